"""Rollout throughput: env-driven batched rollouts against bare ``model.generate`` and against one
episode at a time, plus the memory of five adapters on one base against one model.

    python benchmarks/rollout_throughput.py --out rollout.json [--model tiny|PATH] [--episodes 32]
    python benchmarks/rollout_throughput.py --model smollm2-135m-instruct --shared-only --node-tasks 2 \
        --max-nodes 2 --max-new-tokens 32 --out smol.json

Figures (measured in this one run):

* ``tokens_per_s``: generated tokens per second of ``RolloutEngine.run`` over ``--episodes`` episodes
  (env, prompts, adapter switching, batched sampling with log-probs).
* ``generate_tokens_per_s``: the same generate calls replayed with bare ``model.generate`` on the same
  model (the role's adapter active): the same prompts, batch sizes and number of new tokens per call, no
  env, no prompt rendering, no log-probs, no stop strings. ``ratio_vs_generate`` = tokens_per_s /
  generate_tokens_per_s (goal >= 0.9).
* ``sequential_tokens_per_s``: the same episodes run one at a time; ``ratio_vs_sequential``.
* ``ratio_shared_vs_unshared``: node-wise sampling as ``joyagents_grpo`` does it (G = ``--group-size``
  samples at each of the first ``--max-nodes`` nodes of ``--node-tasks`` expert trajectories, one generate per
  role, temperature 1.2, ``--max-new-tokens``), tokens per second with ``TeamConfig.share_prefix`` on (each
  node's prompt, and the start all of a role's prompts share, prefilled once) over off (every row prefilled on
  its own); each repeat runs both settings back to back (alternating which goes first), and the figure is the
  median over ``--shared-repeats`` repeats of the per-repeat ratio (``..._totals``: over summed times).
  ``--shared-only`` measures only this, and ``--team RUN/team`` measures it on a trained team (whose turns end
  at their stop tokens, as RL samples them) instead of fresh adapters on ``--model``. ``--cpu-time`` times it
  in CPU seconds of this process instead of wall seconds: with ``--threads 1``, a figure that other jobs on a
  shared machine barely move (``clock`` in the JSON).
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
import statistics
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
    parser.add_argument("--group-size", type=int, default=5, help="G of the node-wise sampling figure")
    parser.add_argument("--node-tasks", type=int, default=6, help="expert trajectories branched")
    parser.add_argument("--max-nodes", type=int, default=4, help="nodes branched per trajectory")
    parser.add_argument("--shared-repeats", type=int, default=2, help="timed runs of each setting, alternating")
    parser.add_argument("--shared-only", action="store_true", help="only the shared-vs-unshared figure")
    parser.add_argument(
        "--team", help="with --shared-only: a saved team (RUN/team of joy-train) sampled instead of fresh adapters"
    )
    parser.add_argument("--cpu-time", action="store_true", help="time the shared figure in CPU seconds of this process")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's; 1 with --cpu-time)")
    args = parser.parse_args(argv)
    if args.team and not args.shared_only:
        parser.error("--team goes with --shared-only (the other figures compare against a plain model)")
    if args.team and not os.path.isfile(os.path.join(args.team, "team.json")):
        parser.error(f"--team {args.team!r} holds no team.json; pass the team/ folder of a joy-train run")

    from transformers import AutoModelForCausalLM

    from joy_agents.policy import SamplingConfig, TeamConfig, TeamPolicy, meta_team_memory_ratio, parameter_bytes
    from joy_agents.rollout import RolloutConfig, RolloutEngine
    from joy_trainers.sft import resolve_model

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.team:
        team = TeamPolicy.load(args.team)
    else:
        path = resolve_model(args.model, args.seed)
        team = TeamPolicy(TeamConfig(model=path, lora_r=args.lora_r, lora_alpha=2 * args.lora_r))
    shared = shared_vs_unshared(team, args)
    if args.shared_only:
        result = {
            "machine": f"{platform.machine()} {torch.get_num_threads()} threads",
            "date": time.strftime("%Y-%m-%d"),
            "model": args.model if not args.team else f"team {args.team} (base {team.config.model})",
            **shared,
        }
        _report(result, args.out)
        return result
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
        **shared,
    }
    _report(result, args.out)
    return result


def _report(result: dict, out: str | None) -> None:
    for key in (
        "tokens_per_s",
        "generate_tokens_per_s",
        "sequential_tokens_per_s",
        "shared_tokens_per_s",
        "unshared_tokens_per_s",
    ):
        if key in result:
            print(f"{key:>26}: {result[key]:9.1f}")
    for key in (
        "ratio_vs_generate",
        "ratio_vs_sequential",
        "ratio_shared_vs_unshared",
        "adapter_team_memory_ratio",
        "adapter_team_memory_ratio_qwen2.5_0.5b",
    ):
        if key in result:
            print(f"{key:>26}: {result[key]:9.3f}")
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {out}")


def node_prompts(team, env_id: str, tasks: int, max_nodes: int, seed: int) -> dict[str, list[list[int]]]:
    """Prompts of the first ``max_nodes`` agent turns of ``tasks`` expert trajectories of the validation split,
    by role (what node-wise sampling branches from, for a team that follows the expert's route)."""
    import warnings

    import joy_env
    from joy_agents.sft_data import expert_examples

    env = joy_env.make(env_id, split="validation", seed=seed)
    examples = expert_examples(env, range(tasks))
    by_role: dict[str, list[list[int]]] = {}
    taken: dict[str, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a template that ignores tools: said once by the engine's own prompts
        for ex in examples:
            if taken.get(ex.task_id, 0) >= max_nodes:
                continue
            taken[ex.task_id] = taken.get(ex.task_id, 0) + 1
            ids = team.encode_prompt(ex.role, list(ex.messages), list(ex.tools) or None)
            by_role.setdefault(ex.role, []).append(ids)
    return by_role


def shared_vs_unshared(team, args) -> dict:
    """``ratio_shared_vs_unshared`` (see the module doc): node-wise sampling with and without shared prefill."""
    from joy_agents.policy import SamplingConfig

    by_role = node_prompts(team, args.env, args.node_tasks, args.max_nodes, args.seed)
    sampling = SamplingConfig(temperature=1.2, max_new_tokens=args.max_new_tokens, stop=("</answer>",))
    clock = time.process_time if args.cpu_time else time.perf_counter
    runs: dict[bool, list[tuple[int, float]]] = {True: [], False: []}  # (tokens, seconds) per repeat
    for repeat in range(args.shared_repeats):
        for share in (True, False) if repeat % 2 == 0 else (False, True):
            team.config.share_prefix = share
            torch.manual_seed(args.seed + repeat)
            tokens, start = 0, clock()
            for role, prompts in by_role.items():
                out = team.generate(role, prompts, sampling, num_samples=args.group_size)
                tokens += sum(len(s.completion_ids) for group in out for s in group)
            runs[share].append((tokens, clock() - start))
    team.config.share_prefix = True
    shared_tps, unshared_tps = (sum(t for t, _ in runs[k]) / sum(s for _, s in runs[k]) for k in (True, False))
    # each repeat ran both settings back to back: the median of the per-repeat ratios resists load spikes
    per_repeat = [(ts / ss) / (tu / su) for (ts, ss), (tu, su) in zip(runs[True], runs[False], strict=True)]
    nodes = sum(len(p) for p in by_role.values())
    return {
        "group_size": args.group_size,
        "branched_nodes": nodes,
        "mean_node_prompt_tokens": sum(len(p) for ps in by_role.values() for p in ps) / max(nodes, 1),
        "max_new_tokens": args.max_new_tokens,
        "clock": "cpu" if args.cpu_time else "wall",
        "shared_tokens": sum(t for t, _ in runs[True]),
        "unshared_tokens": sum(t for t, _ in runs[False]),
        "shared_tokens_per_s": shared_tps,
        "unshared_tokens_per_s": unshared_tps,
        "ratio_shared_vs_unshared": statistics.median(per_repeat),
        "ratio_shared_vs_unshared_per_repeat": per_repeat,
        "ratio_shared_vs_unshared_totals": shared_tps / unshared_tps,
    }


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
