"""Does RL lift a pretrained team? SmolLM2-135M-Instruct: SFT, then ``joyagents_grpo`` against ``grpo`` from the
SFT team at the same budget of generated tokens, every team evaluated greedily on the same test tasks.

    python benchmarks/smol_learning.py --out runs/smol-learning                  # every phase, SFT included
    python benchmarks/smol_learning.py --out DIR --sft-run runs/sft-smol --env joy/qa-v0 --max-new-tokens 64 \
        --max-cycles 8 --budget 20000 --set lr=1e-4                              # the run in docs/results.md
    python benchmarks/smol_learning.py --out DIR --seeds 0 1 --budget 40000 --set temperature=1.2
    python benchmarks/smol_learning.py --quick --out /tmp/smol-learning-quick     # the pipeline on the tiny model

Phases, in this order; each one's result is a file ``OUT/phases/<phase>.json`` written when the phase ends, so a
second call with the same ``--out`` skips the finished phases and continues an unfinished RL run from its newest
checkpoint (the options must be the same; a different setting is refused):

1. ``sft``: the ``sft`` trainer's ``smol`` preset into ``OUT/sft`` (none with ``--sft-run``);
2. ``eval-sft``: the SFT team, greedy, on test tasks ``0..N-1`` of the SFT run's env (or ``--env``) and data
   seed, under the limits the SFT run trained on (:func:`joy_trainers.generation.saved_settings`; or
   ``--max-new-tokens``, ``--max-cycles``), the same for RL and every evaluation;
3. per seed, per method (``joyagents_grpo``, then ``grpo``): the RL run from the SFT team into
   ``OUT/rl/<method>-s<seed>`` (the trainer's ``smol`` preset, the setting's options, ``--set``; one iteration,
   stopped by ``token_budget`` = ``--budget``), then ``eval-<method>-s<seed>`` (with the memory the run wrote);
4. ``eval-untrained``: the base model with fresh adapters (last: it writes every turn to its cap, the dearest
   evaluation);
5. the report: success and format-valid turns per team with bootstrap 95% intervals over tasks, the paired
   intervals of SFT - untrained, joyagents_grpo - SFT, grpo - SFT and joyagents_grpo - grpo (a method's
   per-task success averaged over its seeds; each seed on its own too), wall seconds and generated tokens per
   phase, and each RL run's curves (train reward, share of groups with reward variance, KL, clip fraction) from
   its ``metrics.jsonl``: ``OUT/smol_learning.json`` and ``OUT/smol_learning.png``. Both are also written after
   every evaluation, with the teams evaluated so far and ``"complete": false``.

The device is CUDA when torch sees one (bfloat16), else the CPU (float32: this project's CPUs run bfloat16
matmuls slower). ``--quick`` runs the same phases on the embedded tiny model with small numbers (minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

METHODS = ("joyagents_grpo", "grpo")
"""The RL methods compared, both from the SFT team at the same token budget."""

SETTINGS: dict[str, dict[str, Any]] = {
    "smol": {
        "model": "smollm2-135m-instruct",
        "preset": "smol",
        "sft": {"eval_tasks": 0, "baseline_tasks": None},
        # small steps: on two CPU cores a step of the preset's 8 tasks x 5 samples takes many minutes
        "rl": {"tasks_per_step": 4, "group_size": 4, "max_nodes": 4, "temperature": 1.0, "checkpoint_every": 2},
        "budget": 40_000,
        "eval_tasks": 200,
        "seeds": [0],
    },
    "quick": {
        "model": "tiny",
        "preset": "tiny",
        "sft": {"sft_tasks": 60, "base_epochs": 1.0, "adapter_epochs": 0.25, "eval_tasks": 0, "baseline_tasks": None},
        "rl": {"tasks_per_step": 2, "group_size": 3, "max_nodes": 2, "checkpoint_every": 1},
        "budget": 1_500,
        "eval_tasks": 8,
        "seeds": [0],
    },
}
"""Model, presets and sizes of the answer (``smol``) and of ``--quick`` (the tiny model)."""

PAIRS = (
    ("sft", "untrained"),
    ("joyagents_grpo", "sft"),
    ("grpo", "sft"),
    ("joyagents_grpo", "grpo"),
)
"""The paired differences reported (a - b on the same tasks)."""

CURVES = {
    "reward": "charts/reward_mean",
    "tokens": "charts/tokens_generated_total",
    "groups": "groups/total",
    "groups_with_spread": "groups/with_spread",
    "kl": "losses/kl",
    "clip_fraction": "losses/clip_fraction",
}
"""Per-step figures kept from each RL run's ``metrics.jsonl`` (name -> metric key)."""


def fail(message: str) -> None:
    """Stop with a one-line error."""
    raise SystemExit(f"smol_learning: {message}")


# ------------------------------------------------------------------------------------------- phases on disk
class Phases:
    """The phases of one study in ``OUT/phases/``: a finished phase's result is read back, not redone."""

    def __init__(self, out: Path) -> None:
        self.dir = out / "phases"
        self.dir.mkdir(parents=True, exist_ok=True)

    def run(self, name: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The result of phase ``name``: read from its file when it finished earlier, else ``work()`` timed and
        written (atomically, with ``wall_s``)."""
        from joy_trainers.rundir import read_json, write_json_atomic

        path = self.dir / f"{name}.json"
        if path.is_file():
            print(f"[smol-learning] {name}: finished earlier ({path})", flush=True)
            return read_json(path, 256 * 2**20)
        print(f"[smol-learning] {name} ...", flush=True)
        start = time.perf_counter()
        result = {**work(), "wall_s": time.perf_counter() - start}
        write_json_atomic(path, result, f"phase {name}")
        print(f"[smol-learning] {name}: {result['wall_s']:.0f} s", flush=True)
        return result


def claim(out: Path, settings: dict[str, Any]) -> None:
    """Record the study's settings in ``OUT/settings.json``, or refuse when ``OUT`` holds a study of others."""
    path = out / "settings.json"
    if path.is_file():
        earlier = json.loads(path.read_text())
        if earlier != settings:
            changed = sorted(k for k in {*earlier, *settings} if earlier.get(k) != settings.get(k))
            fail(
                f"{out} holds a study with other settings ({', '.join(changed)}); continue it with the same options "
                "or pass a new --out"
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2))


# ------------------------------------------------------------------------------------------------ evaluation
def episode_values(trajectories: list[Any]) -> dict[str, Any]:
    """Per-task values of greedy episodes (one per task, in task order): success as 0/1, the share of the
    episode's agent turns in the expected format, the reward and the generated tokens."""
    return {
        "task_ids": [t.task_id for t in trajectories],
        "domains": [t.domain for t in trajectories],
        "success": [float(t.success) for t in trajectories],
        "format_valid": [
            sum(bool(n["format_ok"]) for n in t.result["nodes"]) / len(t.result["nodes"]) if t.result["nodes"] else 0.0
            for t in trajectories
        ],
        "reward": [float(t.reward) for t in trajectories],
        "generated_tokens": sum(t.generated_tokens for t in trajectories),
    }


def evaluate(team: Any, study: dict[str, Any], memory: dict[str, Any] | None = None) -> dict[str, Any]:
    """Greedy episodes of ``team`` on test tasks ``0..N-1`` of the study's env, under its limits."""
    from joy_agents.rollout import RolloutConfig, RolloutEngine, summarize
    from joy_agents.sampling.settings import GenerationSettings

    limits = GenerationSettings(**study["limits"])
    engine = RolloutEngine(
        team, study["env_id"], "test", study["data_seed"], RolloutConfig(limits), memory=memory,
        env_kwargs=study["env_kwargs"],
    )  # fmt: skip
    start = time.perf_counter()
    trajectories = engine.run(list(range(study["eval_tasks"])))
    wall = time.perf_counter() - start
    metrics = summarize(trajectories)
    values = episode_values(trajectories)
    print(
        f"[smol-learning]   success {metrics['success_rate']:.3f}, format-valid turns "
        f"{metrics['format_valid_rate']:.3f}, {values['generated_tokens']} tokens in {wall:.0f} s",
        flush=True,
    )
    return {**values, "metrics": metrics, "eval_s": wall}


def run_memory(run: Path) -> dict[str, Any] | None:
    """The memory banks an RL run wrote (``run/memory/*.json``), read as ``joy-eval`` reads them; None without."""
    from joy_agents.memory import MemoryBank
    from joy_trainers.joyagents_grpo import memory_config_of
    from joy_trainers.rundir import read_json

    if not (run / "memory").is_dir():
        return None
    settings = memory_config_of(read_json(run / "results.json", 64 * 2**20)["config"])
    if not settings.enabled:
        return None
    return {
        p.stem: MemoryBank.from_dict(read_json(p, 256 * 2**20), settings)
        for p in sorted((run / "memory").glob("*.json"))
    }


# ------------------------------------------------------------------------------------------------------ report
def curves(run: Path) -> dict[str, list[float]]:
    """:data:`CURVES` of each logged step of the RL run in ``run``."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {name: [float(r.get(key, 0.0)) for r in rows] for name, key in CURVES.items()}


def report(evaluations: dict[str, dict[str, Any]], seeds: list[int]) -> dict[str, Any]:
    """Teams with bootstrap intervals and the :data:`PAIRS` differences (a method over its seeds: its per-task
    success averaged over the seeds; each seed on its own as ``<method>-s<seed>``)."""
    from joy_trainers.intervals import LEVEL, RESAMPLES, bootstrap_interval, paired_difference

    per_task: dict[str, dict[str, list[float]]] = {}
    for key, ev in evaluations.items():
        if len(seeds) > 1 or not key.endswith(f"-s{seeds[0]}"):  # one seed: the method's own row
            per_task[key] = {"success": ev["success"], "format_valid": ev["format_valid"]}
    for method in METHODS:
        runs = [evaluations[f"{method}-s{s}"] for s in seeds if f"{method}-s{s}" in evaluations]
        if runs:
            per_task[method] = {
                name: [sum(vs) / len(vs) for vs in zip(*(r[name] for r in runs), strict=True)]
                for name in ("success", "format_valid")
            }
    teams = {
        key: {name: bootstrap_interval(values[name])._asdict() for name in ("success", "format_valid")}
        | {"tasks": len(values["success"])}
        for key, values in per_task.items()
    }
    differences = {}
    pairs = list(PAIRS) + [(f"{m}-s{s}", "sft") for m in METHODS for s in seeds if len(seeds) > 1]
    for a, b in pairs:
        if a in per_task and b in per_task:
            differences[f"{a} - {b}"] = {
                name: paired_difference(per_task[a][name], per_task[b][name])._asdict()
                for name in ("success", "format_valid")
            }
    return {"teams": teams, "differences": differences, "level": LEVEL, "resamples": RESAMPLES}


def table(summary: dict[str, Any]) -> str:
    """The report as text."""

    def cell(i: dict[str, float], sign: str = "") -> str:
        return f"{i['estimate']:{sign}.3f} [{i['low']:{sign}.3f}, {i['high']:{sign}.3f}]"

    lines = [f"{'team':<22} {'tasks':>5}  {'success [95% CI]':<24} {'format-valid turns [95% CI]':<28}"]
    for key, t in summary["teams"].items():
        lines.append(f"{key:<22} {t['tasks']:>5}  {cell(t['success']):<24} {cell(t['format_valid']):<28}")
    lines += ["", f"{'paired difference':<30} {'success':<26} {'format-valid turns':<26}"]
    for key, d in summary["differences"].items():
        lines.append(f"{key:<30} {cell(d['success'], '+'):<26} {cell(d['format_valid'], '+'):<26}")
    return "\n".join(lines)


def plot(summary: dict[str, Any], runs: dict[str, dict[str, list[float]]], path: Path) -> None:
    """Success per team with its interval (left); the train reward of each RL run against its generated tokens
    (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    keys = list(summary["teams"])
    est = [summary["teams"][k]["success"]["estimate"] for k in keys]
    low = [e - summary["teams"][k]["success"]["low"] for k, e in zip(keys, est, strict=True)]
    high = [summary["teams"][k]["success"]["high"] - e for k, e in zip(keys, est, strict=True)]
    left.bar(range(len(keys)), est, yerr=[low, high], capsize=4, color="#7aa6c2")
    left.set_xticks(range(len(keys)), keys, rotation=30, ha="right", fontsize=8)
    left.set_ylabel(f"test success (greedy), {summary['level']:.0%} bootstrap interval")
    left.grid(axis="y", alpha=0.3)
    for name, c in runs.items():
        right.plot(c["tokens"], c["reward"], marker=".", label=name)
    right.set_xlabel("generated tokens (training rollouts)")
    right.set_ylabel("train reward (mean of the step's rollouts)")
    right.grid(alpha=0.3)
    if runs:
        right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -------------------------------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the study's directory (phases/, sft/, rl/, the report)")
    parser.add_argument("--quick", action="store_true", help="the same phases on the embedded tiny model, small")
    parser.add_argument("--sft-run", help="a run directory of the sft trainer to start from (skips the sft phase)")
    parser.add_argument("--seeds", nargs="+", type=int, help="RL seeds of each method (default: 0)")
    parser.add_argument("--budget", type=int, help="generated tokens of each RL run (token_budget)")
    parser.add_argument("--eval-tasks", type=int, help="test tasks of every evaluation (default 200; quick 8)")
    parser.add_argument("--engine", choices=("continuous", "vllm"), default="continuous", help="rollout engine")
    parser.add_argument("--env", help="env id of RL and of every evaluation (default: the SFT run's)")
    parser.add_argument("--max-new-tokens", type=int, help="tokens per turn (default: the SFT run's limit)")
    parser.add_argument("--max-cycles", type=int, help="agent turns per episode (default: the SFT run's limit)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="an option of both RL runs (JSON value)"
    )
    args = parser.parse_args(argv)
    if args.budget is not None and args.budget < 1:
        parser.error(f"--budget must be >= 1, got {args.budget}")
    if args.eval_tasks is not None and args.eval_tasks < 1:
        parser.error(f"--eval-tasks must be >= 1, got {args.eval_tasks}")
    for name in ("max_new_tokens", "max_cycles"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.seeds is not None and (not args.seeds or len(set(args.seeds)) != len(args.seeds)):
        parser.error(f"--seeds must be distinct, got {args.seeds}")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    setting = SETTINGS["quick" if args.quick else "smol"]
    import torch

    from joy_trainers.cli import load_trainer, parse_overrides

    cuda = torch.cuda.is_available()
    dtype = "bfloat16" if cuda else "float32"
    common = parse_overrides(args.set)
    for method in METHODS:  # a typo is refused before any work
        names = set(load_trainer(method).config_class.__dataclass_fields__)
        if unknown := sorted(set(common) - names):
            fail(f"--set {unknown}: not an option of {method}; see joy-train --trainer {method} --list-options")
    out = Path(args.out)
    seeds = args.seeds or setting["seeds"]
    study_settings = {
        "mode": "quick" if args.quick else "smol",
        "sft_run": args.sft_run,
        "seeds": seeds,
        "budget": args.budget or setting["budget"],
        "eval_tasks": args.eval_tasks or setting["eval_tasks"],
        "engine": args.engine,
        "env": args.env,
        "max_new_tokens": args.max_new_tokens,
        "max_cycles": args.max_cycles,
        "rl_options": {**setting["rl"], **common},
        "dtype": dtype,
    }
    claim(out, study_settings)
    phases = Phases(out)
    started = time.perf_counter()
    hardware = torch.cuda.get_device_name() if cuda else f"CPU, {torch.get_num_threads()} threads"
    print(
        f"[smol-learning] {study_settings['mode']} on {hardware}, torch {torch.__version__}; output {out}", flush=True
    )

    # 1. SFT
    from joy_trainers.sft import SFT_PRESETS, SFTConfig, SFTTrainer

    sft_dir = Path(args.sft_run) if args.sft_run else out / "sft"

    def sft() -> dict[str, Any]:
        values = {
            **SFT_PRESETS[setting["preset"]],
            **setting["sft"],
            "model": setting["model"],
            "dtype": dtype,
            "rollout_engine": args.engine,
            "output_dir": str(sft_dir),
            "resume": (sft_dir / "checkpoints").is_dir(),
        }
        results = SFTTrainer(SFTConfig.from_dict(values)).train()
        return {"steps": results["steps"], "config": results["config"]}

    if args.sft_run:
        if not (sft_dir / "results.json").is_file() or not (sft_dir / "team").is_dir():
            fail(f"--sft-run {sft_dir} holds no finished sft run (results.json and team/)")
        sft_record: dict[str, Any] = {"sft_run": str(sft_dir)}
    else:
        sft_record = phases.run("sft", sft)
    sft_results = json.loads((sft_dir / "results.json").read_text())
    sft_config = sft_results["config"]

    from joy_trainers.cli import data_seed_of
    from joy_trainers.generation import saved_settings

    limits = saved_settings(sft_results)
    sft_env = sft_config.get("env_id", "joy/mixed-v0")
    study = {
        "env_id": args.env or sft_env,
        "env_kwargs": (sft_config.get("env_kwargs") or {}) if (args.env or sft_env) == sft_env else {},
        "data_seed": data_seed_of(sft_config),
        "eval_tasks": study_settings["eval_tasks"],
        "limits": {
            "max_new_tokens": args.max_new_tokens or limits.max_new_tokens,
            "max_cycles": args.max_cycles or limits.max_cycles,
            "max_prompt_tokens": limits.max_prompt_tokens,
            "engine": args.engine,
        },
    }
    import joy_env

    available = joy_env.make(study["env_id"], split="test", seed=study["data_seed"], **study["env_kwargs"]).num_tasks
    if study["eval_tasks"] > available:
        fail(f"--eval-tasks {study['eval_tasks']} is more than the {available} test tasks of {study['env_id']}")
    from joy_agents.policy import TeamConfig, TeamPolicy

    device = "cuda" if cuda else "cpu"
    evaluations: dict[str, dict[str, Any]] = {}

    def load_and_evaluate(team_dir: Path, memory: dict[str, Any] | None = None) -> Callable[[], dict[str, Any]]:
        return lambda: evaluate(TeamPolicy.load(str(team_dir), device=device, dtype=dtype), study, memory)

    rl_runs: dict[str, dict[str, Any]] = {}
    order = ["untrained", "sft", *[f"{m}-s{s}" for s in seeds for m in METHODS]]

    def write_report() -> dict[str, Any]:
        """``smol_learning.json`` and ``.png`` from the evaluations so far (``complete`` once all are in)."""
        done = [k for k in order if k in evaluations]
        ids = {key: tuple(evaluations[key]["task_ids"]) for key in done}
        if len(set(ids.values())) != 1:
            fail("the evaluations ran on different tasks; the paired differences would be meaningless")
        summary = report({k: evaluations[k] for k in done}, seeds)
        record = {
            "benchmark": "smol_learning",
            "complete": done == order,
            "date": time.strftime("%Y-%m-%d"),
            "hardware": hardware,
            "torch": torch.__version__,
            "settings": study_settings,
            "study": study,
            "sft": {k: v for k, v in sft_record.items() if k != "config"},
            "phases_s": {p.stem: json.loads(p.read_text())["wall_s"] for p in sorted(phases.dir.glob("*.json"))},
            "generated_tokens": {k: evaluations[k]["generated_tokens"] for k in done}
            | {f"rl-{k}": r["generated_tokens"] for k, r in rl_runs.items()},
            "rl": {k: {n: r[n] for n in ("steps", "generated_tokens", "curves")} for k, r in rl_runs.items()},
            "summary": summary,
            "per_task": {k: {n: evaluations[k][n] for n in ("success", "format_valid")} for k in done},
            "task_ids": list(ids[done[0]]),
            "wall_s_this_call": time.perf_counter() - started,
        }
        (out / "smol_learning.json").write_text(json.dumps(record, indent=2))
        plot(summary, {k: r["curves"] for k, r in rl_runs.items()}, out / "smol_learning.png")
        return record

    # 2. the SFT team
    evaluations["sft"] = phases.run("eval-sft", load_and_evaluate(sft_dir / "team"))
    write_report()

    # 3. RL, per seed and method, each evaluated
    for seed in seeds:
        for method in METHODS:
            name = f"{method}-s{seed}"
            run = out / "rl" / name

            def train(method: str = method, seed: int = seed, run: Path = run) -> dict[str, Any]:
                cls = load_trainer(method)
                names = set(cls.config_class.__dataclass_fields__)
                resume = (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir())
                values = {
                    **cls.presets[setting["preset"]],
                    **{k: v for k, v in study_settings["rl_options"].items() if k in names},
                    "model": setting["model"],
                    "sft_run": str(sft_dir),
                    "seed": seed,
                    "data_seed": study["data_seed"],
                    "env_id": study["env_id"],
                    "env_kwargs": study["env_kwargs"],
                    **{k: v for k, v in study["limits"].items() if k != "engine"},
                    "rollout_engine": args.engine,
                    "dtype": dtype,
                    "token_budget": study_settings["budget"],
                    "iterations": 1,
                    "steps_per_iteration": 100_000,  # the token budget ends the run
                    "eval_tasks": 0,
                    "eval_baseline": False,
                    "output_dir": str(run),
                    "resume": resume,
                    "overwrite": run.exists() and not resume,
                }
                values = {k: v for k, v in values.items() if k in names}
                results = cls(cls.config_class.from_dict(values)).train()
                return {
                    "steps": results["steps"],
                    "generated_tokens": int(results["generated_tokens"]),
                    "config": results["config"],
                    "curves": curves(run),
                }

            rl_runs[name] = phases.run(f"rl-{name}", train)
            evaluations[name] = phases.run(f"eval-{name}", load_and_evaluate(run / "team", run_memory(run)))
            write_report()

    # 4. the untrained team: the base model with fresh adapters, seeded as the SFT run's were
    def untrained() -> dict[str, Any]:
        from joy_trainers.sft import resolve_model

        torch.manual_seed(int(sft_config.get("seed", 0)))
        team = TeamPolicy(
            TeamConfig(
                model=resolve_model(sft_config["model"], int(sft_config.get("seed", 0))),
                dtype=dtype,
                device=device,
                lora_r=sft_config["lora_r"],
                lora_alpha=sft_config["lora_alpha"],
                prompt_style=sft_config.get("prompt_style", "chat"),
            )
        )
        return evaluate(team, study, None)

    evaluations["untrained"] = phases.run("eval-untrained", untrained)

    # 5. the report (also written after every evaluation above, with the teams evaluated so far)
    record = write_report()
    print()
    print(table(record["summary"]))
    print(f"\nphases (s): {', '.join(f'{k} {v:.0f}' for k, v in record['phases_s'].items())}")
    print(f"wrote {out / 'smol_learning.json'} and {out / 'smol_learning.png'}")
    return record


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from joy_trainers.errors import UsageError

    try:
        main(sys.argv[1:])
    except UsageError as exc:  # an option or a run directory the trainers refused
        fail(str(exc))
