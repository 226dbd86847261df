"""Sampling throughput of a pretrained team on first turns: the same prompts through each engine, dtype and team,
on a quiet machine and with one busy core beside it.

    python benchmarks/team_throughput.py --out team_throughput.json            # SmolLM2, 64 prompts, ~15 min
    python benchmarks/team_throughput.py --dtypes float32 --no-base --prompts 16 --max-new-tokens 16 --no-busy  # quick
    python benchmarks/team_throughput.py --engines continuous,vllm              # with vLLM installed

The prompts are the first turns of ``--prompts`` test tasks of ``joy/mixed-v0`` (the master's system prompt and
tools, then the request: about 260 SmolLM2 tokens each), sampled at ``--temperature`` with at most
``--max-new-tokens`` tokens each. Every setting samples all of them at once through one sampler
(:func:`~joy_agents.sampling.base.make_sampler`), ``--repeats`` times; the figures are of the fastest repeat:

* ``lora``: the five-role team (one base, a rank ``--lora-r`` adapter on every linear layer per role, the adapters
  filled with small random numbers so that each role's rows differ), the prompts dealt to the roles in turn, so
  that every decode step mixes the five adapters;
* ``base``: the base model alone (one role, no adapters), the same prompts: what the adapters cost is the ratio;
* per dtype of ``--dtypes`` (``auto``: what ``TeamConfig(dtype="auto")`` picks here, recorded with its reason) and
  engine of ``--engines``;
* ``busy``: the five-role team in the first dtype again, with ``python -c "while True: pass"`` running beside it,
  once with the project's thread policy (:mod:`joy_agents.threads`: torch's threads follow the free cores) and
  once without it (``JOY_THREAD_POLICY=off``; ``--no-busy`` leaves both out);
* ``node_wise``: ``--group-size`` samples of each of the first ``--node-prompts`` prompts (temperature 1.2, as
  node-wise Monte Carlo sampling draws them), the five-role team in the first dtype.

Each figure: ``tokens_per_s`` (generated tokens over wall seconds), ``cpu_s_per_token`` (CPU seconds of this
process per generated token), the engine's counters (:class:`~joy_agents.sampling.stats.EngineStats`), ``build_s``
(loading the team and making its first sampler: for ``vllm``, starting the engine) and the process's peak resident
memory after it. For the ``continuous`` five-role team in each dtype: ``product_gflop`` (the matrix products of one
run, counted by torch's ``FlopCounterMode``), ``gemm_limit_s`` (those at the ``matmul_gflops`` rate of the dtype)
and ``of_gemm_limit`` (``gemm_limit_s`` over the run's seconds: how close the engine runs to its products' limit),
and, for a dtype other than float32, ``greedy_same_as_float32``: the share of prompts whose greedy completion equals
the float32 team's token for token. ``--profile`` runs each ``continuous`` five-role team once more under torch's
profiler, prints the operators that took the most CPU time by input shape, and records that run's operator
seconds by kind (``profile_seconds``: matrix products, attention, copies, sampling, the rest).

``machine``: the CPU's name, what torch dispatches its kernels for, its native bfloat16 units
(:func:`~joy_agents.dtypes.cpu_bfloat16_units`), threads. ``matmul_gflops``: one linear layer of the model's MLP
shape over 64 rows in each dtype, on all threads and on one.

Figures depend on the machine and on other load: compare ratios measured in one run (``ratios`` in the JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when this file is loaded by path

from _common import torch_machine, write_json  # noqa: E402


def matmul_gflops(dtype: str, rows: int = 64, features: int = 576, out: int = 1536, repeats: int = 20) -> float:
    """GFLOP/s of one linear layer of SmolLM2's MLP shape over ``rows`` rows in ``dtype`` on torch's current
    threads: what this CPU's kernels give each dtype (a CPU without bfloat16 instructions runs bfloat16 far slower
    than float32)."""
    import torch

    x = torch.randn(rows, features).to(getattr(torch, dtype))
    w = torch.randn(out, features).to(x.dtype)
    warm = time.perf_counter()
    while time.perf_counter() - warm < 0.5:  # the thread pool started and the clock up before timing
        torch.nn.functional.linear(x, w)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.nn.functional.linear(x, w)
    return round(2 * rows * features * out * repeats / (time.perf_counter() - start) / 1e9, 1)


def kernel_rates() -> dict[str, dict[str, float]]:
    """:func:`matmul_gflops` per dtype on all of torch's threads and on one."""
    import torch

    threads = torch.get_num_threads()
    rates: dict[str, dict[str, float]] = {}
    for dtype in ("float32", "bfloat16"):
        rates[dtype] = {"all_threads": matmul_gflops(dtype)}
        torch.set_num_threads(1)
        rates[dtype]["one_thread"] = matmul_gflops(dtype)
        torch.set_num_threads(threads)
    return rates


def machine() -> dict[str, Any]:
    """The CPU's name, torch's kernel dispatch level, its native bfloat16 units, threads and versions."""
    import torch

    try:
        from joy_agents.dtypes import cpu_bfloat16_units
    except ImportError:  # a checkout before dtype="auto" (this script also measures older ones: PYTHONPATH=CHECKOUT)
        cpu_bfloat16_units = None
    name = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    return {
        "line": torch_machine(),
        "cpu": name,
        "cores": os.cpu_count(),
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "bfloat16_units": cpu_bfloat16_units() if cpu_bfloat16_units else None,
    }


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
    """Sample ``group`` completions of every request through one sampler; wall and CPU seconds, tokens, counters,
    and the completions' ids (``completions``, in request order)."""
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
        "completions": [s.completion_ids for _, s in sorted(out, key=lambda pair: pair[0])],
    }


OFF_SWITCH = "JOY_THREAD_POLICY"
"""joy_agents.threads.OFF_SWITCH (spelt out: this script also measures checkouts from before it)."""


@contextlib.contextmanager
def machine_load(busy: bool, policy: bool) -> Any:
    """A busy core beside the run (``busy``: a spinning Python process) and the project's thread policy on or off
    (off: ``JOY_THREAD_POLICY=off`` and torch's threads as they were when the run started)."""
    import torch

    threads = torch.get_num_threads()
    before = os.environ.get(OFF_SWITCH)
    if not policy:
        os.environ[OFF_SWITCH] = "off"
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        if spinner is not None:
            time.sleep(1.5)  # the governor sees a second of it before the first step
        yield
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
        if before is None:
            os.environ.pop(OFF_SWITCH, None)
        else:
            os.environ[OFF_SWITCH] = before
        torch.set_num_threads(threads)


def product_gflop(team: Any, requests: list, settings: Any, sampling: Any) -> float:
    """GFLOP of the matrix products (attention left out) of one more run, counted by torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        sample_all(team, requests, settings, sampling, 1)
    counts = counter.get_flop_counts().get("Global", {})
    return round(sum(n for op, n in counts.items() if "attention" not in str(op)) / 1e9, 2)


def measure(args: argparse.Namespace, model: str, engine: str, dtype: str, lora: bool, group: int, **how: Any) -> dict:
    """One setting: build the team and its engine, then ``--repeats`` timed runs; the fastest is kept. ``how``:
    ``busy`` and ``policy`` (:func:`machine_load`), ``profile`` (one more run under torch's profiler), ``gemm``
    (the rates of :func:`kernel_rates`: count the run's products against them) and ``greedy`` (the float32 team's
    greedy completions, or None: this run's own are the figure's ``greedy``)."""
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
    prompts = prompts[: args.node_prompts] if group > 1 else prompts
    requests = [(team.roles[i % len(team.roles)], ids) for i, ids in enumerate(prompts)]
    start_engine(team, settings)
    build_s = time.perf_counter() - start
    chosen = getattr(team, "dtype", team.config.dtype)  # a checkout before dtype="auto" has no team.dtype
    extra: dict[str, Any] = {}
    try:
        with machine_load(how.get("busy", False), how.get("policy", True)):
            runs = [sample_all(team, requests, settings, sampling, group) for _ in range(args.repeats)]
        if how.get("profile"):
            extra["profile_seconds"] = profile(team, requests, settings, sampling)
        if how.get("gemm"):
            extra["product_gflop"] = product_gflop(team, requests, settings, sampling)
            rate = how["gemm"][chosen]["all_threads"]
            extra["gemm_limit_s"] = extra["product_gflop"] / rate
        if "greedy" in how:
            greedy = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=0.0)
            extra["greedy"] = sample_all(team, requests, settings, greedy, 1)["completions"]
    finally:
        close_engine(team)  # a vllm engine's processes go with its setting
    best = min(runs, key=lambda r: r["seconds"])
    for run in runs:
        run.pop("completions")
    if "gemm_limit_s" in extra:
        extra["of_gemm_limit"] = round(extra["gemm_limit_s"] / best["seconds"], 3)
        extra["gemm_limit_s"] = round(extra["gemm_limit_s"], 4)
    if how.get("greedy") is not None:
        same = sum(a == b for a, b in zip(extra["greedy"], how["greedy"], strict=True))
        extra["greedy_same_as_float32"] = round(same / len(how["greedy"]), 3)
    best.update(
        extra,
        engine=engine,
        dtype=dtype,
        dtype_chosen=chosen,
        dtype_reason=getattr(team, "dtype_reason", "set"),
        team="lora" if lora else "base",
        group=group,
        load="busy core" if how.get("busy") else "quiet",
        thread_policy=how.get("policy", True),
        prompts=len(prompts),
        mean_prompt_tokens=round(statistics.mean(len(p) for p in prompts), 1),
        build_s=round(build_s, 1),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        all_seconds=[r["seconds"] for r in runs],
    )
    label = f"{engine} {dtype}" + (f"={chosen}" if dtype == "auto" else "") + f" {best['team']}"
    label += (f" G={group}" if group > 1 else "") + (f", {best['load']}" if how.get("busy") else "")
    label += "" if best["thread_policy"] else ", no thread policy"
    print(
        f"{label:48s} {best['tokens_per_s']:8.1f} tokens/s  {best['cpu_s_per_token'] * 1e3:7.1f} CPU ms/token  "
        f"({best['tokens']} tokens in {best['seconds']:.1f} s; build {best['build_s']:.0f} s)",
        flush=True,
    )
    return best


PRODUCTS = frozenset({"aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm"})
COPIES = frozenset({"aten::copy_", "aten::index_select", "aten::cat", "aten::index", "aten::_index_put_impl_"})
DRAWS = frozenset({"aten::_softmax", "aten::logsumexp", "aten::cumsum", "aten::searchsorted", "aten::argmax"})


def time_shares(events: Any) -> dict[str, float]:
    """Seconds of operator self time in a profile's ``key_averages()`` by kind: ``products`` (matrix products),
    ``attention``, ``copies`` (copies, gathers, concatenations), ``sampling`` (softmax, cumulative sums and searches
    of the draws) and ``other`` (element-wise and the rest); ``total``."""
    kinds = dict.fromkeys(("products", "attention", "copies", "sampling", "other"), 0.0)
    for event in events:
        name, seconds = event.key, event.self_cpu_time_total / 1e6
        if name in PRODUCTS:
            kinds["products"] += seconds
        elif "scaled_dot_product" in name:
            kinds["attention"] += seconds
        elif name in COPIES:
            kinds["copies"] += seconds
        elif name in DRAWS:
            kinds["sampling"] += seconds
        else:
            kinds["other"] += seconds
    kinds["total"] = sum(kinds.values())
    return {k: round(v, 2) for k, v in kinds.items()}


def profile(team: Any, requests: list, settings: Any, sampling: Any) -> dict[str, float]:
    """Print the operators of one more run that took the most CPU time, by input shape; its :func:`time_shares`."""
    import torch.profiler

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        sample_all(team, requests, settings, sampling, 1)
    shares = time_shares(prof.key_averages())
    print(f"operator seconds by kind: {shares}", flush=True)
    table = prof.key_averages(group_by_input_shape=True)
    print(
        table.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=40, max_shapes_column_width=80)
    )
    return shares


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the figures as JSON to this file")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="a model string of joy_agents.models")
    parser.add_argument("--engines", default="continuous", help="comma-separated: continuous, generate, vllm")
    parser.add_argument("--dtypes", default="auto,float32,bfloat16", help="comma-separated: auto, float32, bfloat16")
    parser.add_argument("--prompts", type=int, default=64, help="first turns of this many test tasks")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-prompt-tokens", type=int, default=896)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--no-base", action="store_true", help="leave out the base model without adapters")
    parser.add_argument("--no-busy", action="store_true", help="leave out the runs with a busy core beside them")
    parser.add_argument("--group-size", type=int, default=8, help="G of the node-wise figure (0: leave it out)")
    parser.add_argument("--node-prompts", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="profile each continuous five-role team once more")
    args = parser.parse_args(argv)
    for name in ("prompts", "max_new_tokens", "repeats", "lora_r", "node_prompts"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    from joy_agents.sampling.settings import ENGINES

    args.engines = [e for e in args.engines.split(",") if e]
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    for e in args.engines:
        if e not in ENGINES:
            parser.error(f"--engines: unknown engine {e!r}; pick from {', '.join(ENGINES)}")
    for d in args.dtypes:
        if d not in ("auto", "float32", "bfloat16"):
            parser.error(f"--dtypes: {d!r} is not auto, float32 or bfloat16")
    return args


def ratios_of(args: argparse.Namespace, settings: list[dict]) -> dict[str, float]:
    """The ratios of figures measured in this run."""
    by = {(s["engine"], s["dtype"], s["team"], s["group"], s["load"], s["thread_policy"]): s for s in settings}

    def rate(engine: str, dtype: str, team: str = "lora", load: str = "quiet", policy: bool = True) -> float | None:
        found = by.get((engine, dtype, team, 1, load, policy))
        return found["tokens_per_s"] if found else None

    ratios: dict[str, float] = {}
    first = args.dtypes[0]
    for engine in args.engines:
        for dtype in args.dtypes:
            lora, base = rate(engine, dtype), rate(engine, dtype, "base")
            if lora and base:
                ratios[f"{engine}_{dtype}_lora_over_base"] = round(lora / base, 3)
            if dtype != "float32" and lora and rate(engine, "float32"):
                ratios[f"{engine}_{dtype}_over_float32"] = round(lora / rate(engine, "float32"), 3)
        for policy, name in ((True, "thread_policy"), (False, "no_thread_policy")):
            busy, quiet = rate(engine, first, load="busy core", policy=policy), rate(engine, first)
            if busy and quiet:
                ratios[f"{engine}_{first}_busy_over_quiet_{name}"] = round(busy / quiet, 3)
    for other in args.engines[1:]:
        mine, theirs = rate(args.engines[0], first), rate(other, first)
        if mine and theirs:
            ratios[f"{other}_over_{args.engines[0]}_{first}"] = round(theirs / mine, 3)
    return ratios


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import torch

    from joy_trainers.sft import resolve_model

    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message=".*ignores `tools`.*")
    model = resolve_model(args.model, args.seed)
    gemm = kernel_rates()
    print(f"one linear layer, 64 rows, GFLOP/s: {gemm} ({torch.backends.cpu.get_cpu_capability()})", flush=True)
    settings: list[dict] = []
    greedy32: list | None = None
    for engine in args.engines:
        for dtype in sorted(args.dtypes, key=lambda d: d != "float32"):  # float32 first: the greedy reference
            how: dict[str, Any] = {"profile": args.profile and engine == "continuous"}
            if engine == "continuous":
                how.update(gemm=gemm, greedy=greedy32 if dtype != "float32" else None)
            settings.append(measure(args, model, engine, dtype, True, 1, **how))
            if engine == "continuous" and dtype == "float32":
                greedy32 = settings[-1]["greedy"]
            if not args.no_base and dtype != "auto":  # auto: float32 for a team without adapters
                settings.append(measure(args, model, engine, dtype, False, 1))
    if not args.no_busy:
        for policy in (True, False):
            settings.append(measure(args, model, args.engines[0], args.dtypes[0], True, 1, busy=True, policy=policy))
    if args.group_size:
        settings.append(measure(args, model, args.engines[0], args.dtypes[0], True, args.group_size))
    for s in settings:
        s.pop("greedy", None)
    ratios = ratios_of(args, settings)
    result = {
        "machine": machine(),
        "matmul_gflops": gemm,
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
