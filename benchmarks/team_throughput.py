"""Sampling throughput of a pretrained team on first turns: the same prompts through each engine, dtype and team.

    python benchmarks/team_throughput.py --out team_throughput.json            # SmolLM2, 64 prompts, ~15 min
    python benchmarks/team_throughput.py --dtypes float32 --no-base --prompts 16 --max-new-tokens 16   # quick
    python benchmarks/team_throughput.py --engines continuous,vllm              # with vLLM installed

The prompts are the first turns of ``--prompts`` test tasks of ``joy/mixed-v0`` (the master's system prompt and
tools, then the request: about 260 SmolLM2 tokens each), sampled at ``--temperature`` with at most
``--max-new-tokens`` tokens each. Every setting samples all of them at once through one sampler
(:func:`~joy_agents.sampling.base.make_sampler`), ``--repeats`` times; the figures are of the fastest repeat:

* ``lora``: the five-role team (one base, a rank ``--lora-r`` adapter on every linear layer per role, the adapters
  filled with small random numbers so that each role's rows differ), the prompts dealt to the roles in turn, so
  that every decode step mixes the five adapters;
* ``base``: the base model alone (one role, no adapters), the same prompts: what the adapters cost is the ratio;
* per dtype of ``--dtypes`` and engine of ``--engines``;
* ``node_wise``: ``--group-size`` samples of each of the first ``--node-prompts`` prompts (temperature 1.2, as
  node-wise Monte Carlo sampling draws them), the five-role team in the first dtype.

Each figure: ``tokens_per_s`` (generated tokens over wall seconds), ``cpu_s_per_token`` (CPU seconds of this
process per generated token: what other jobs on a shared machine move least), the engine's counters
(:class:`~joy_agents.sampling.stats.EngineStats`), ``build_s`` (loading the team and making its first sampler:
for ``vllm``, starting the engine) and the process's peak resident memory after it. ``--profile`` prints the
operators that took the most CPU time in one more run of the first setting. ``matmul_gflops``: one linear layer of
the model's MLP shape over 64 rows in each dtype, what the CPU's kernels give them.

Figures depend on the machine and on other load: compare ratios measured in one run (``ratios`` in the JSON).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when this file is loaded by path

from _common import torch_machine, write_json  # noqa: E402


def matmul_gflops(dtype: str, rows: int = 64, features: int = 576, out: int = 1536, repeats: int = 20) -> float:
    """GFLOP/s of one linear layer of SmolLM2's MLP shape over ``rows`` rows in ``dtype``: what this CPU's kernels
    give each dtype (a CPU without bfloat16 instructions runs bfloat16 far slower than float32)."""
    import torch

    x = torch.randn(rows, features).to(getattr(torch, dtype))
    w = torch.randn(out, features).to(x.dtype)
    for _ in range(3):
        torch.nn.functional.linear(x, w)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.nn.functional.linear(x, w)
    return round(2 * rows * features * out * repeats / (time.perf_counter() - start) / 1e9, 1)


def first_turn_prompts(team: Any, count: int, max_prompt_tokens: int) -> list[list[int]]:
    """The prompt ids of the first turn (the master's) of test tasks ``0..count-1`` of ``joy/mixed-v0``."""
    import joy_env

    env = joy_env.make("joy/mixed-v0", split="test", seed=0)
    prompts = []
    for i in range(count):
        env.reset(options={"task_index": i})
        role = env.agent_selection
        info = env.infos[role]
        prompts.append(team.fit_prompt(role, list(info["messages"]), info["tools"] or None, max_prompt_tokens).ids)
    return prompts


def build_team(model: str, dtype: str, lora: bool, lora_r: int, seed: int) -> Any:
    """The five-role LoRA team (random adapters) or the base alone as a one-role team without adapters."""
    import torch

    from joy_agents.policy import TeamConfig, TeamPolicy

    if not lora:
        return TeamPolicy(TeamConfig(model=model, roles=("master",), use_lora=False, dtype=dtype))
    torch.manual_seed(seed)  # PEFT draws the A matrices from torch's global generator: the same team every time
    team = TeamPolicy(TeamConfig(model=model, lora_r=lora_r, lora_alpha=2 * lora_r, dtype=dtype))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in team.shared_model.named_parameters():
            if "lora_B" in name:  # PEFT starts B at zero: every role would be the base
                p.copy_((torch.randn(p.shape, generator=gen) * 0.01).to(p.dtype))
    return team


def sample_all(team: Any, requests: list[tuple[str, list[int]]], settings: Any, sampling: Any, group: int) -> dict:
    """Sample ``group`` completions of every request through one sampler; wall and CPU seconds, tokens, counters."""
    from joy_agents.sampling.base import drain, make_sampler

    wall, cpu = time.perf_counter(), time.process_time()
    with make_sampler(team, settings, sampling) as sampler:
        for i, (role, ids) in enumerate(requests):
            sampler.submit(role, ids, i, num_samples=group)
        out = drain(sampler)
        stats = sampler.stats
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    tokens = sum(len(s.completion_ids) for _, s in out)
    return {
        "seconds": round(wall, 3),
        "cpu_seconds": round(cpu, 3),
        "tokens": tokens,
        "samples": len(out),
        "tokens_per_s": round(tokens / wall, 2),
        "cpu_s_per_token": round(cpu / max(tokens, 1), 5),
        "stats": {k: v for k, v in vars(stats).items() if isinstance(v, (int, float))},
    }


def measure(
    args: argparse.Namespace, model: str, engine: str, dtype: str, lora: bool, group: int, profile: bool = False
) -> dict:
    """One setting: build the team and its engine, then ``--repeats`` timed runs; the fastest is kept. With
    ``profile``, one more run under torch's profiler prints its top operators."""
    from joy_agents.config import SamplingConfig
    from joy_agents.sampling.base import start_engine
    from joy_agents.sampling.settings import GenerationSettings
    from joy_agents.sampling.vllm import close_engine

    start = time.perf_counter()
    team = build_team(model, dtype, lora, args.lora_r, args.seed)
    prompts = first_turn_prompts(team, args.prompts, args.max_prompt_tokens)
    settings = GenerationSettings(engine=engine, max_new_tokens=args.max_new_tokens)
    temperature = 1.2 if group > 1 else args.temperature
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=temperature)
    if group > 1:
        prompts = prompts[: args.node_prompts]
    roles = team.roles
    requests = [(roles[i % len(roles)], ids) for i, ids in enumerate(prompts)]
    start_engine(team, settings)
    build_s = time.perf_counter() - start
    try:
        runs = [sample_all(team, requests, settings, sampling, group) for _ in range(args.repeats)]
        if profile:
            import torch.profiler

            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                sample_all(team, requests, settings, sampling, group)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    finally:
        close_engine(team)  # a vllm engine's processes go with its setting
    best = min(runs, key=lambda r: r["seconds"])
    best.update(
        engine=engine,
        dtype=dtype,
        team="lora" if lora else "base",
        group=group,
        prompts=len(prompts),
        mean_prompt_tokens=round(statistics.mean(len(p) for p in prompts), 1),
        build_s=round(build_s, 1),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        all_seconds=[r["seconds"] for r in runs],
    )
    label = f"{engine} {dtype} {best['team']}" + (f" G={group}" if group > 1 else "")
    print(
        f"{label:32s} {best['tokens_per_s']:8.1f} tokens/s  {best['cpu_s_per_token'] * 1e3:7.1f} CPU ms/token  "
        f"({best['tokens']} tokens in {best['seconds']:.1f} s; build {best['build_s']:.0f} s)",
        flush=True,
    )
    return best


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the figures as JSON to this file")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="a model string of joy_agents.models")
    parser.add_argument("--engines", default="continuous", help="comma-separated: continuous, generate, vllm")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated: float32, bfloat16")
    parser.add_argument("--prompts", type=int, default=64, help="first turns of this many test tasks")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-prompt-tokens", type=int, default=896)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--no-base", action="store_true", help="leave out the base model without adapters")
    parser.add_argument("--group-size", type=int, default=8, help="G of the node-wise figure (0: leave it out)")
    parser.add_argument("--node-prompts", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="print the top operators of the first setting")
    args = parser.parse_args(argv)
    for name in ("prompts", "max_new_tokens", "repeats", "lora_r", "node_prompts"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")

    import torch

    from joy_agents.sampling.settings import ENGINES
    from joy_trainers.sft import resolve_model

    engines = [e for e in args.engines.split(",") if e]
    dtypes = [d for d in args.dtypes.split(",") if d]
    for e in engines:
        if e not in ENGINES:
            parser.error(f"--engines: unknown engine {e!r}; pick from {', '.join(ENGINES)}")
    for d in dtypes:
        if d not in ("float32", "bfloat16"):
            parser.error(f"--dtypes: {d!r} is not float32 or bfloat16")
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message=".*ignores `tools`.*")
    model = resolve_model(args.model, args.seed)
    settings: list[dict] = []
    for engine in engines:
        for dtype in dtypes:
            settings.append(measure(args, model, engine, dtype, True, 1, profile=args.profile and not settings))
            if not args.no_base:
                settings.append(measure(args, model, engine, dtype, False, 1))
    if args.group_size:
        settings.append(measure(args, model, engines[0], dtypes[0], True, args.group_size))
    by = {(s["engine"], s["dtype"], s["team"], s["group"]): s["tokens_per_s"] for s in settings}
    ratios: dict[str, float] = {}
    for engine in engines:
        for dtype in dtypes:
            lora, base = by.get((engine, dtype, "lora", 1)), by.get((engine, dtype, "base", 1))
            if lora and base:
                ratios[f"{engine}_{dtype}_lora_over_base"] = round(lora / base, 3)
        if "float32" in dtypes and "bfloat16" in dtypes:
            ratios[f"{engine}_bfloat16_over_float32"] = round(
                by[(engine, "bfloat16", "lora", 1)] / by[(engine, "float32", "lora", 1)], 3
            )
    if "continuous" in engines:
        for other in engines:
            if other != "continuous":
                ratios[f"{other}_over_continuous_{dtypes[0]}"] = round(
                    by[(other, dtypes[0], "lora", 1)] / by[("continuous", dtypes[0], "lora", 1)], 3
                )
    kernels = {dtype: matmul_gflops(dtype) for dtype in ("float32", "bfloat16")}
    print(f"one linear layer, 64 rows: {kernels} GFLOP/s ({torch.backends.cpu.get_cpu_capability()})")
    result = {
        "machine": torch_machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "matmul_gflops": kernels,
        "date": time.strftime("%Y-%m-%d"),
        "model": args.model,
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "settings": settings,
        "ratios": ratios,
    }
    for name, value in ratios.items():
        print(f"{name}: {value}")
    write_json(result, args.out, announce=True)
    return result


if __name__ == "__main__":
    main()
