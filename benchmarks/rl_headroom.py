"""How much can RL reinforce? Greedy success against the best of k samples, per task.

    python benchmarks/rl_headroom.py RUN_DIR --out rl_headroom.json [--tasks 40] [--samples 20] [--temperature 1.0]

RL with group-relative advantages can only raise the probability of actions the team already samples: a task
whose G samples all fail (or all succeed) gives no signal. For the team in ``RUN_DIR/team`` (a
``joy-train`` run directory), this plays the first ``--tasks`` tasks of the RL part of the train split (the
tasks RL trains on; ``--split validation`` or ``test`` for those splits) of the run's env (or ``--env``) and
data seed (from ``RUN_DIR/results.json``; ``joy/mixed-v0`` and data seed 0 without one) once greedily and
``--samples`` times with every turn sampled at ``--temperature`` / ``--top-p`` (seeded by ``--seed``), under the
run's own generation limits (tokens per turn, turns per episode, prompt tokens: the ``"generation"`` block of its
``results.json``, which is what its training rollouts and evaluations used; ``--max-new-tokens``,
``--max-cycles`` and ``--max-prompt-tokens`` override each), and reports:

* ``greedy_success``: the share of tasks the greedy team solves (what evaluation measures);
* ``sample_success``: the mean success of the samples (what the sampling policy earns now);
* ``pass_at_k`` for k = 1, 5 and ``--samples`` (or the ``--ks`` given): the unbiased estimate (Chen et al.,
  2021) of the share of tasks solved by at least one of k samples. ``pass_at_k - greedy_success`` indicates
  what sharpening the policy onto its own good samples of a group of k could add on these tasks;
* ``mixed_tasks``: the share of tasks whose samples both succeed and fail (groups with a success signal);
* ``format_valid_rate``: the share of well-formed agent turns of the samples (``greedy_format_valid_rate``:
  of the greedy episodes), as in ``results.json``;
* ``by_domain`` and ``by_template``: the same figures (but format) per task domain and per task template
  (``"domain:template"``; a mixed task's template is its source's), each with its number of tasks ``n``. On
  the tiny team they show where the headroom lies: most templates are solved by every sample or by none.

Sampling covers whole trajectories (every turn sampled), so it also shows how far the sampling policy's
format is below the greedy one's. The run prints one line; its cost with the defaults (40 tasks, 20 samples)
is on the results page (docs/results.md).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when this file is loaded by path

from _common import check_team_run, run_settings, torch_machine, write_json  # noqa: E402


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of P(at least one of k samples succeeds) from ``c`` successes in ``n`` samples."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def headroom(successes: list[list[bool]], greedy: list[bool], ks: tuple[int, ...]) -> dict[str, Any]:
    """The figures of the module doc from per-task sample outcomes and per-task greedy outcomes."""
    if len(successes) != len(greedy) or not successes:
        raise ValueError(f"need one sample list per greedy outcome, got {len(successes)} and {len(greedy)}")
    n = len(successes[0])
    if any(len(s) != n for s in successes):
        raise ValueError("every task needs the same number of samples")
    tasks = len(successes)
    return {
        "greedy_success": sum(greedy) / tasks,
        "sample_success": sum(sum(s) for s in successes) / (tasks * n),
        "pass_at_k": {str(k): sum(pass_at_k(n, sum(s), k) for s in successes) / tasks for k in ks if k <= n},
        "mixed_tasks": sum(1 for s in successes if 0 < sum(s) < n) / tasks,
    }


def grouped(
    keys: list[str], successes: list[list[bool]], greedy: list[bool], ks: tuple[int, ...]
) -> dict[str, dict[str, Any]]:
    """:func:`headroom` of the tasks of each key (sorted), with ``n``, the number of tasks of the key."""
    if len(keys) != len(successes):
        raise ValueError(f"need one key per task, got {len(keys)} keys for {len(successes)} tasks")
    out = {}
    for key in sorted(set(keys)):
        idx = [i for i, k in enumerate(keys) if k == key]
        out[key] = {"n": len(idx), **headroom([successes[i] for i in idx], [greedy[i] for i in idx], ks)}
    return out


def task_list(env_id: str, env_kwargs: dict[str, Any], data_seed: int, split: str) -> list[int]:
    """The tasks of ``split`` in order; for ``train``, the RL trainers' half (the other half is SFT's)."""
    import joy_env
    from joy_agents.sft_data import split_train_tasks

    n = joy_env.make(env_id, split=split, seed=data_seed, **env_kwargs).num_tasks
    if split == "train":
        return split_train_tasks(n, 0.5, data_seed)[1]
    return list(range(n))


def run_limits(run: str | Path) -> dict[str, int]:
    """Tokens per turn, turns per episode and prompt tokens of the ``joy-train`` run ``run``: what its
    ``results.json`` says it trained and evaluated under (:func:`joy_trainers.generation.saved_settings`), or the
    generation defaults for a directory without one (or whose ``results.json`` states no limits, said in a line)."""
    import json

    from joy_agents.sampling.settings import GenerationSettings
    from joy_trainers.generation import saved_settings

    results = Path(run) / "results.json"
    settings = GenerationSettings()
    if results.is_file():
        try:
            settings = saved_settings(json.loads(results.read_text()))
        except ValueError as exc:
            print(f"rl_headroom: {results}: {exc}; the generation defaults are used where no option is given")
    return {
        "max_new_tokens": settings.max_new_tokens,
        "max_cycles": settings.max_cycles,
        "max_prompt_tokens": settings.max_prompt_tokens,
    }


def play(
    team_dir: Path | str,
    env_id: str,
    env_kwargs: dict[str, Any],
    data_seed: int,
    split: str,
    tasks: list[int],
    samples: int,
    args: argparse.Namespace,
) -> tuple[list[Any], list[Any], list[list[bool]]]:
    """Play ``tasks`` once greedily and ``samples`` times sampled (``args``: temperature, top_p,
    max_new_tokens, max_cycles, max_prompt_tokens) with the team in ``team_dir``; returns the greedy
    trajectories, the sampled ones and the samples' successes per task."""
    from joy_agents.policy import SamplingConfig, TeamPolicy
    from joy_agents.rollout import RolloutConfig, RolloutEngine
    from joy_agents.sampling.settings import GenerationSettings
    from joy_env.protocol import TURN_STOP

    team = TeamPolicy.load(str(team_dir))
    config = RolloutConfig(GenerationSettings(max_cycles=args.max_cycles, max_prompt_tokens=args.max_prompt_tokens))
    engine = RolloutEngine(team, env_id, split, data_seed, config, progress=False, env_kwargs=env_kwargs)
    stop = TURN_STOP
    greedy = engine.run(tasks, SamplingConfig(temperature=0.0, max_new_tokens=args.max_new_tokens, stop=stop))
    sampling = SamplingConfig(
        temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens, stop=stop
    )
    runs = engine.run([t for t in tasks for _ in range(samples)], sampling)
    outcomes = [[r.success for r in runs[i * samples : (i + 1) * samples]] for i in range(len(tasks))]
    return greedy, runs, outcomes


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run directory of `joy-train` (holds team/)")
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--split", choices=("train", "validation", "test"), default="train")
    parser.add_argument("--max-new-tokens", type=int, help="tokens per turn (default: the run's)")
    parser.add_argument("--max-cycles", type=int, help="agent turns per episode (default: the run's)")
    parser.add_argument("--max-prompt-tokens", type=int, help="prompt tokens kept (default: the run's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    parser.add_argument("--ks", nargs="+", type=int, help="the k of pass@k (default: 1, 5 and --samples)")
    parser.add_argument("--env", help="env id of the tasks (default: the run's; its env options only with its env)")
    parser.add_argument("--out", help="write the JSON here")
    args = parser.parse_args(argv)
    if args.ks is not None and not all(1 <= k <= args.samples for k in args.ks):
        parser.error(f"every --ks value must be in [1, --samples={args.samples}], got {args.ks}")
    if args.tasks < 1 or args.samples < 1 or args.temperature <= 0:
        parser.error(
            f"need --tasks >= 1, --samples >= 1, --temperature > 0; got {args.tasks}, {args.samples}, "
            f"{args.temperature}"
        )
    check_team_run(parser, args.run)
    for name in ("max_new_tokens", "max_cycles", "max_prompt_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    limits = run_limits(args.run)
    for name, value in limits.items():
        if getattr(args, name) is None:
            setattr(args, name, value)

    import torch

    import joy_env
    from joy_agents.rollout import summarize

    start = time.perf_counter()
    env_id, env_kwargs, data_seed = run_settings(args.run)
    if args.env and args.env != env_id:
        env_id, env_kwargs = args.env, {}
    torch.manual_seed(args.seed)
    tasks = task_list(env_id, env_kwargs, data_seed, args.split)[: args.tasks]
    greedy, runs, outcomes = play(
        Path(args.run) / "team", env_id, env_kwargs, data_seed, args.split, tasks, args.samples, args
    )
    ks = tuple(sorted(set(args.ks))) if args.ks else (1, 5, args.samples)
    greedy_ok = [r.success for r in greedy]
    figures = headroom(outcomes, greedy_ok, ks)
    figures["format_valid_rate"] = summarize(runs)["format_valid_rate"]
    figures["greedy_format_valid_rate"] = summarize(greedy)["format_valid_rate"]
    env = joy_env.make(env_id, split=args.split, seed=data_seed, **env_kwargs)
    specs = [env.get_task(t) for t in tasks]
    figures["by_domain"] = grouped([s.domain for s in specs], outcomes, greedy_ok, ks)
    figures["by_template"] = grouped([f"{s.domain}:{s.template}" for s in specs], outcomes, greedy_ok, ks)
    passes = ", ".join(f"pass@{k} {v:.3f}" for k, v in figures["pass_at_k"].items())
    print(
        f"{args.run} ({args.split}, {len(tasks)} tasks, T={args.temperature}, top_p={args.top_p}): greedy "
        f"{figures['greedy_success']:.3f}, samples {figures['sample_success']:.3f}, {passes}, "
        f"mixed {figures['mixed_tasks']:.3f}, format {figures['format_valid_rate']:.3f}"
    )
    for domain, f in figures["by_domain"].items():
        passes = ", ".join(f"pass@{k} {v:.3f}" for k, v in f["pass_at_k"].items())
        print(f"  {domain} ({f['n']} tasks): greedy {f['greedy_success']:.3f}, {passes}")
    result = {
        "benchmark": "rl_headroom",
        "date": time.strftime("%Y-%m-%d"),
        "machine": torch_machine(),
        "settings": {
            **{k: v for k, v in vars(args).items() if k not in ("out",)},
            "env_id": env_id,
            "env_kwargs": env_kwargs,
            "data_seed": data_seed,
        },
        "figures": figures,
        "wall_s": time.perf_counter() - start,
    }
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
