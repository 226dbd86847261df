"""One decode step of a five-role team: kernels it runs and its time, per way of applying the adapters.

A team's roles share one base and hold one LoRA adapter each. A decode step of ``--rows`` rows, each with a
``--context``-token cache (one more after each step), runs five ways:

* ``base``: the adapters off (the floor);
* ``peft_one_adapter``: one role's adapter active in PEFT (the step of the per-role engine);
* ``peft_mixed``: each row through its own role's adapter by PEFT's ``adapter_names=`` (rows of every role);
* ``stacked_one_role`` / ``stacked_mixed``: :class:`~joy_agents.sampling.stacked_lora.StackedLoRA`, the continuous
  engine's way, with all rows of one role and with rows of every role.

For each: ``kernels`` (aten operators that compute, counted by :class:`~joy_agents.sampling.stats.KernelCounter`;
on a GPU about one launch each, and a small model's step is bound by launches) and ``ms`` (median wall time of
``--steps`` steps, after a warm-up). The counts do not depend on the machine; the times are measured in this one
run. ``adapter_kernels_per_layer`` is each way's count above ``base``, per decoder layer;
``stacked_mixed_tokens_per_s`` = rows / the ``stacked_mixed`` step time, the rate a full batch of rows decodes at.

    python benchmarks/decode_step.py --out benchmarks/results/decode_step.json
    python benchmarks/decode_step.py --model smollm2-135m-instruct --rows 64 --context 600 --out smol_step.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when this file is loaded by path

from _common import torch_machine, write_json  # noqa: E402

WAYS = ("base", "peft_one_adapter", "peft_mixed", "stacked_one_role", "stacked_mixed")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-base", help="'tiny-base', 'tiny', 'smollm2-135m-instruct' or a path")
    parser.add_argument("--rows", type=_positive, default=16)
    parser.add_argument("--context", type=_positive, default=256, help="cached tokens per row")
    parser.add_argument("--steps", type=_positive, default=30, help="timed steps per way (median)")
    parser.add_argument("--lora-r", type=_positive, default=4)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), help="default: bfloat16 on a GPU, else float32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the JSON here")
    args = parser.parse_args(argv)

    import torch
    from transformers import DynamicCache

    from joy_agents.adapters import hf_model
    from joy_agents.policy import TeamConfig, TeamPolicy
    from joy_agents.sampling.stacked_lora import StackedLoRA
    from joy_agents.sampling.stats import KernelCounter
    from joy_trainers.sft import resolve_model

    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = args.dtype or ("bfloat16" if device == "cuda" else "float32")
    team = TeamPolicy(
        TeamConfig(
            model=resolve_model(args.model, args.seed),
            lora_r=args.lora_r,
            lora_alpha=2 * args.lora_r,
            device=device,
            dtype=dtype,
        )
    )
    model = team.model_for(team.roles[0]).eval()
    config = hf_model(model).config
    roles = [team.roles[i % len(team.roles)] for i in range(args.rows)]
    ids = torch.randint(10, int(config.vocab_size), (args.rows, args.context + 1), device=device)
    stack = StackedLoRA(model, tuple(team.roles))
    if not stack.supported:
        parser.error(f"the team of {args.model!r} holds adapters StackedLoRA does not cover")

    def way(name: str):
        """A context that runs the model the way ``name`` says, and the forward's extra arguments."""
        if name == "base":
            return model.disable_adapter(), {}
        if name == "peft_one_adapter":
            team.activate(roles[0])
            return torch.no_grad(), {}
        if name == "peft_mixed":
            return torch.no_grad(), {"adapter_names": roles}
        stack.set_rows(roles[:1] if name == "stacked_one_role" else roles)
        return stack, {}

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    result: dict = {
        "machine": torch_machine(),
        "date": time.strftime("%Y-%m-%d"),
        "model": args.model,
        "device": device,
        "dtype": dtype,
        "rows": args.rows,
        "context": args.context,
        "lora_r": args.lora_r,
        "layers": int(config.num_hidden_layers),
    }

    def measure(name: str) -> dict:
        """Kernels of one decode step the way ``name`` says, and the median time of ``--steps`` steps."""
        context, extra = way(name)
        with torch.no_grad(), context:
            cache = DynamicCache(config=config)
            model(input_ids=ids[:, :-1], past_key_values=cache, use_cache=True, **extra)

            def decode() -> None:
                model(input_ids=ids[:, -1:], past_key_values=cache, use_cache=True, **extra)  # context + 1

            decode()  # warm-up
            with KernelCounter() as counter:
                decode()
            times = []
            for _ in range(args.steps):
                sync()
                t0 = time.perf_counter()
                decode()
                sync()
                times.append(time.perf_counter() - t0)
        return {"kernels": counter.count, "ms": 1000 * statistics.median(times)}

    for name in WAYS:
        result[name] = measure(name)
    layers = result["layers"]
    result["adapter_kernels_per_layer"] = {
        name: (result[name]["kernels"] - result["base"]["kernels"]) / layers for name in WAYS[1:]
    }
    result["ratio_kernels_stacked_mixed_vs_peft_mixed"] = (
        result["stacked_mixed"]["kernels"] / result["peft_mixed"]["kernels"]
    )
    result["ratio_time_peft_mixed_vs_stacked_mixed"] = result["peft_mixed"]["ms"] / result["stacked_mixed"]["ms"]
    result["stacked_mixed_tokens_per_s"] = args.rows / (result["stacked_mixed"]["ms"] / 1000)
    for name in WAYS:
        print(f"{name:18s} {result[name]['kernels']:6d} kernels  {result[name]['ms']:8.2f} ms")
    print(f"adapter kernels per layer: {result['adapter_kernels_per_layer']}")
    write_json(result, args.out, announce=True)
    return result


if __name__ == "__main__":
    main()
