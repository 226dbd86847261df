"""Rollout throughput: env-driven batched rollouts against bare ``model.generate`` and against one
episode at a time, plus the memory of five adapters on one base against one model.

    python benchmarks/rollout_throughput.py --out rollout.json [--model tiny|PATH] [--episodes 32]

Figures (measured in this one run):

* ``tokens_per_s``: generated tokens per second of ``RolloutEngine.run`` over ``--episodes`` episodes
  (env, prompts, adapter switching, batched sampling with log-probs).
* ``generate_tokens_per_s``: the same generate calls replayed with bare ``model.generate`` on the same
  model (the role's adapter active): the same prompts, batch sizes and number of new tokens per call, no
  env, no prompt rendering, no log-probs, no stop strings. ``ratio_vs_generate`` = tokens_per_s /
  generate_tokens_per_s (goal >= 0.9).
* ``sequential_tokens_per_s``: the same episodes run one at a time; ``ratio_vs_sequential``.
* ``adapter_team_memory_ratio``: bytes of every parameter and buffer of the five-role team (one base,
  five LoRA adapters of rank ``--lora-r``; shared storage counted once) over those of one plain model
  (goal <= 1.2); ``adapter_team_memory_ratio_qwen2.5_0.5b``: the same for a Qwen2.5-0.5B-sized model in
  bf16 with rank-16 adapters, built on the meta device (no download, no memory).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the figures as JSON to this file")
    parser.add_argument("--model", default="tiny", help="'tiny' (embedded) or a model path")
    parser.add_argument("--env", default="joy/mixed-v0")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--max-cycles", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lora-r", type=int, default=4, help="LoRA rank (the tiny preset's)")
    args = parser.parse_args(argv)

    from transformers import AutoModelForCausalLM

    from joy_agents.policy import SamplingConfig, TeamConfig, TeamPolicy, meta_team_memory_ratio, parameter_bytes
    from joy_agents.rollout import RolloutConfig, RolloutEngine
    from joy_trainers.sft import resolve_model

    torch.manual_seed(args.seed)
    path = resolve_model(args.model, args.seed)
    team = TeamPolicy(TeamConfig(model=path, lora_r=args.lora_r, lora_alpha=2 * args.lora_r))
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=args.max_new_tokens, stop=("</answer>",))
    config = RolloutConfig(sampling=sampling, max_cycles=args.max_cycles)
    engine = RolloutEngine(team, args.env, "validation", args.seed, config, progress=False)
    starts = list(range(args.episodes))
    engine.run(starts[:2])  # warm-up

    calls: list[tuple[str, list[list[int]], int]] = []
    original = team.generate

    def recording(role, prompts, cfg, num_samples=1):
        out = original(role, prompts, cfg, num_samples)
        longest = max(len(s.completion_ids) for group in out for s in group)
        calls.append((role, [list(p) for p in prompts], longest))
        return out

    team.generate = recording
    t0 = time.perf_counter()
    batched = engine.run(starts)
    batched_s = time.perf_counter() - t0
    team.generate = original
    tokens = sum(t.generated_tokens for t in batched)

    pad = team.tokenizer.pad_token_id or 0
    bare_tokens, t0 = 0, time.perf_counter()
    with torch.no_grad():
        for role, prompts, new in calls:
            with team.use_role(role) as model:
                bare_tokens += _bare_generate(model, prompts, new, pad)
    bare_s = time.perf_counter() - t0

    seq_tokens, t0 = 0, time.perf_counter()
    for s in starts:
        seq_tokens += engine.run([s])[0].generated_tokens
    seq_s = time.perf_counter() - t0

    plain = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    memory_ratio = team.parameter_bytes() / parameter_bytes(plain)
    qwen_ratio = meta_team_memory_ratio()  # Qwen2.5-0.5B shape, bf16, rank-16 adapters

    result = {
        "machine": f"{platform.machine()} {torch.get_num_threads()} threads",
        "date": time.strftime("%Y-%m-%d"),
        "model": args.model,
        "env_id": args.env,
        "episodes": args.episodes,
        "generate_calls": len(calls),
        "mean_batch": sum(len(p) for _, p, _ in calls) / max(len(calls), 1),
        "tokens": tokens,
        "tokens_per_s": tokens / batched_s,
        "generate_tokens": bare_tokens,
        "generate_tokens_per_s": bare_tokens / bare_s,
        "sequential_tokens_per_s": seq_tokens / seq_s,
        "ratio_vs_generate": (tokens / batched_s) / (bare_tokens / bare_s),
        "ratio_vs_sequential": (tokens / batched_s) / (seq_tokens / seq_s),
        "adapter_team_memory_ratio": memory_ratio,
        "adapter_team_memory_ratio_qwen2.5_0.5b": qwen_ratio,
        "lora_r": args.lora_r,
    }
    for key in ("tokens_per_s", "generate_tokens_per_s", "sequential_tokens_per_s"):
        print(f"{key:>26}: {result[key]:9.1f}")
    for key in (
        "ratio_vs_generate",
        "ratio_vs_sequential",
        "adapter_team_memory_ratio",
        "adapter_team_memory_ratio_qwen2.5_0.5b",
    ):
        print(f"{key:>26}: {result[key]:9.3f}")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.out}")
    return result


def _bare_generate(model, prompts: list[list[int]], new: int, pad: int) -> int:
    """``model.generate`` on left-padded ``prompts`` for exactly ``new`` tokens; returns tokens made."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        pad_token_id=pad,
    )
    return len(prompts) * new


if __name__ == "__main__":
    main()
