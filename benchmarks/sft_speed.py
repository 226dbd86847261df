"""SFT speed: the ``sft`` trainer's adapter stage against a plain forward/backward loop over the same batches.

    python benchmarks/sft_speed.py --out sft_speed.json [--model tiny-llama|smollm2-135m-instruct|PATH]
        [--dtype float32|bfloat16] [--tasks 200] [--role master] [--batch-size 8 | --batch-tokens N] [--max-length 1024]

Both sides train a fresh LoRA adapter of one role (``--role``) for one epoch of its expert rows from ``--tasks``
episodes of ``joy/mixed-v0``, in the order the trainer uses (:func:`joy_trainers.sft.bucketed_order`), on the
same device and dtype:

* ``trainer``: :meth:`joy_trainers.sft.SFTTrainer._fit` as ``joy-train --trainer sft`` runs it (TRL's
  ``SFTTrainer``, the completion-only loss with the vocabulary projection on labelled positions only, batches
  whose shared prefix runs once when ``--shared-prefix``);
* ``plain``: a loop over the same rows, collated by :func:`joy_trainers.sft.collate_left`, each step
  ``model(**batch, labels=...)`` (the model's own loss over every position), ``backward``, AdamW ``step``.

Figures (this one run): ``tokens`` (real tokens of the epoch), ``*_s`` (wall seconds of the epoch, model loading
excluded), ``*_tokens_per_s`` and ``ratio`` = trainer tokens/s over plain tokens/s (above 1: the trainer is
faster than the plain loop).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when this file is loaded by path

from _common import write_json  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-llama", help="tiny-llama (default), tiny-base, smollm2, or a path")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--tasks", type=int, default=200, help="expert episodes the rows come from")
    parser.add_argument("--role", default="master")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batch-tokens", type=int, default=0, help="batches sized by tokens (SFTConfig.batch_tokens)")
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--shared-prefix", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the JSON here")
    args = parser.parse_args(argv)

    import tempfile

    import torch

    from joy_agents.policy import TeamConfig, TeamPolicy
    from joy_agents.sft_data import build_sft_examples
    from joy_trainers.sft import (
        SFTConfig,
        SFTTrainer,
        _dataset,
        collate_left,
        collate_shared_prefix,
        prefix_sharing_supported,
        resolve_model,
        sft_rows,
    )

    device = "cuda" if torch.cuda.is_available() else "cpu"
    path = resolve_model(args.model, args.seed)
    team_config = TeamConfig(
        model=path, roles=(args.role,), lora_r=args.lora_r, lora_alpha=2 * args.lora_r, dtype=args.dtype, device=device
    )
    examples = build_sft_examples("joy/mixed-v0", args.tasks, 0.5, args.seed)[args.role]
    if not examples:
        parser.error(f"no {args.role} examples in {args.tasks} tasks; raise --tasks or pick another --role")
    tokenizer = TeamPolicy._load_tokenizer(path)
    rows = sft_rows(tokenizer, examples, args.max_length)
    pad = int(tokenizer.pad_token_id)
    dataset, spans = _dataset(rows, args.batch_size, 1.0, args.seed, args.shared_prefix, args.batch_tokens)
    ordered = [dataset[i] for i in range(len(dataset))]
    if spans is None:
        spans = [
            list(range(i, min(i + args.batch_size, len(ordered)))) for i in range(0, len(ordered), args.batch_size)
        ]
    batches = [[ordered[i] for i in span] for span in spans]
    tokens = sum(len(r["input_ids"]) for r in ordered)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    # the trainer's path
    torch.manual_seed(args.seed)
    team = TeamPolicy(team_config)
    with tempfile.TemporaryDirectory() as tmp:
        config = SFTConfig(
            model=path,
            dtype=args.dtype,
            batch_size=args.batch_size,
            batch_tokens=args.batch_tokens,
            max_length=args.max_length,
            activation_checkpointing=False,
            shared_prefix=args.shared_prefix,
            eval_tasks=0,
            output_dir=tmp,
        )
        trainer = SFTTrainer(config)
        trainer.tokenizer = tokenizer
        model = team.model_for(args.role)
        shared = args.shared_prefix and prefix_sharing_supported(model)

        def collate(batch):
            return collate_shared_prefix(batch, pad) if shared else collate_left(batch, pad)

        sync()
        start = time.perf_counter()
        fitted = trainer._fit(args.role, model, rows, collate, 1e-4, 1.0, shared)
        sync()
        trainer_s = time.perf_counter() - start
        steps = fitted.state.global_step

    # the plain loop over the same rows in the same order
    torch.manual_seed(args.seed)
    plain_team = TeamPolicy(team_config)
    model = plain_team.model_for(args.role).train()
    optimizer = torch.optim.AdamW(plain_team.trainable_parameters(args.role), lr=1e-4)
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=args.dtype == "bfloat16")
    sync()
    start = time.perf_counter()
    for batch in batches:
        inputs = {k: v.to(device) for k, v in collate_left(batch, pad).items() if k != "keep" and k != "label_index"}
        with autocast:
            loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    sync()
    plain_s = time.perf_counter() - start

    result = {
        "machine": f"{platform.machine()} {torch.get_num_threads()} threads"
        + (f", {torch.cuda.get_device_name()}" if device == "cuda" else ""),
        "date": time.strftime("%Y-%m-%d"),
        "model": args.model,
        "dtype": args.dtype,
        "role": args.role,
        "rows": len(ordered),
        "batches": len(batches),
        "batch_tokens": args.batch_tokens,
        "trainer_steps": steps,
        "shared_prefix": shared,
        "tokens": tokens,
        "trainer_s": trainer_s,
        "plain_s": plain_s,
        "trainer_tokens_per_s": tokens / trainer_s,
        "plain_tokens_per_s": tokens / plain_s,
        "ratio": plain_s / trainer_s,
    }
    for key in ("trainer_tokens_per_s", "plain_tokens_per_s", "ratio"):
        print(f"{key:>22}: {result[key]:10.2f}")
    write_json(result, args.out, announce=True)
    return result


if __name__ == "__main__":
    main()
