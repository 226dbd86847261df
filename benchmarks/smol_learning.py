"""Does RL lift a pretrained team? SmolLM2-135M-Instruct: SFT, then ``joyagents_grpo`` against ``grpo`` from the
SFT team at the same budget of generated tokens, every team evaluated on the same tasks of three sets.

    python benchmarks/smol_learning.py --out runs/smol-learning                  # every phase, SFT included
    python benchmarks/smol_learning.py --out DIR --sft-run runs/sft-smol --env joy/qa-v0 --max-new-tokens 64 \
        --max-cycles 8 --budget 80000 --set lr=2e-4 ...      # the third attempt's command: docs/results.md
    python benchmarks/smol_learning.py --quick --out /tmp/smol-learning-quick     # the pipeline on the tiny model

Evaluation sets (``--eval-sets``, all three by default): ``validation`` (tasks ``0..N-1`` of the validation split:
the train split's templates with held-out entities and phrasings), ``test`` (tasks ``0..N-1`` of the test split,
which also holds templates train never shows) and ``train`` (the first ``--train-tasks`` tasks of the RL part of
the train split in the order the first seed's runs draw them: tasks both runs trained on, when their budgets
cover that many). Each set is played greedily (``success``, ``format_valid``) and, with ``--samples K`` > 0, K
times per task with every turn sampled at the RL runs' temperature (``sampled_success``, the mean over the K
samples; ``pass^K``, all K succeed; ``pass@K``, one of them does; ``sampled_format_valid``), seeded the same
for every team. An evaluation decodes at most ``--eval-rows`` episodes together (each holds its KV cache: fewer
rows, less memory).

Phases, in this order; each one's result is a file ``OUT/phases/<phase>.json`` written when the phase ends, so a
second call with the same ``--out`` skips the finished phases and continues an unfinished RL run from its newest
checkpoint (the options must be the same; a different setting is refused). With ``--publish DIR`` every finished
phase and the report are copied into ``DIR`` too, and a phase found there but not in ``OUT`` is taken from it:
commit ``DIR`` and the study continues from another clone (an RL run whose evaluations are not all published
must be run again there: its team lives in ``OUT``). ``--phases PATTERN ...`` runs only the unfinished phases whose
names match, so that several calls share one study (e.g. one process per method on a machine of several cores:
``--phases 'rl-grpo-*' 'eval-grpo-*'``); a last call without it writes the complete report.

1. ``sft``: the ``sft`` trainer's ``smol`` preset into ``OUT/sft`` (none with ``--sft-run``);
2. ``eval-sft-<set>`` (greedy) and ``eval-sft-<set>-sampled``: the SFT team on every set, under the limits the SFT
   run trained on (:func:`joy_trainers.generation.saved_settings`; or ``--max-new-tokens``, ``--max-cycles``), the
   same for RL and every evaluation;
3. per seed, per method (``joyagents_grpo``, then ``grpo``): the RL run from the SFT team into
   ``OUT/rl/<method>-s<seed>`` (the trainer's ``smol`` preset, the setting's options, ``--set``; one iteration,
   stopped by ``token_budget`` = ``--budget``), then its evaluations ``eval-<method>-s<seed>-<set>[-sampled]``
   (with the memory the run wrote);
4. ``eval-untrained-<set>`` with ``--untrained``: the base model with fresh adapters (the dearest evaluation: it
   writes every turn to its cap);
5. the report: per set, every figure per team with bootstrap 95% intervals over tasks and the paired intervals of
   :data:`PAIRS` (a method's per-task values averaged over its seeds; each seed on its own too), wall seconds and
   generated tokens per phase, and each RL run's curves (:data:`CURVES`) from its ``metrics.jsonl``:
   ``OUT/smol_learning.json`` and ``OUT/smol_learning.png``. Both are also written after every phase, with the
   teams evaluated so far and ``"complete": false``.

The device is CUDA when torch sees one (bfloat16), else the CPU (float32: this project's CPUs run bfloat16
matmuls slower). ``--quick`` runs the same phases on the embedded tiny model with small numbers (minutes).
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

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
        "train_tasks": 100,
        "samples": 4,
        "seeds": [0],
    },
    "quick": {
        "model": "tiny",
        "preset": "tiny",
        "sft": {"sft_tasks": 60, "base_epochs": 1.0, "adapter_epochs": 0.25, "eval_tasks": 0, "baseline_tasks": None},
        "rl": {"tasks_per_step": 2, "group_size": 3, "max_nodes": 2, "checkpoint_every": 1},
        "budget": 1_500,
        "eval_tasks": 8,
        "train_tasks": 4,
        "samples": 2,
        "seeds": [0],
    },
}
"""Model, presets and sizes of the answer (``smol``) and of ``--quick`` (the tiny model)."""

EVAL_SETS = ("validation", "test", "train")
"""The sets every team is evaluated on (see the module documentation)."""

PAIRS = (
    ("sft", "untrained"),
    ("joyagents_grpo", "sft"),
    ("grpo", "sft"),
    ("joyagents_grpo", "grpo"),
)
"""The paired differences reported (a - b on the same tasks)."""

CURVES = {
    "reward": "charts/reward_mean",
    "success": "charts/success_rate",
    "sample_reward": "charts/sample_reward_mean",
    "tokens": "charts/tokens_generated_total",
    "groups": "groups/total",
    "groups_with_spread": "groups/with_spread",
    "flat_fraction": "groups/flat_fraction",
    "shaping_only": "groups/shaping_only",
    "selected": "groups/selected",
    "draws": "sampling/draws",
    "entropy": "policy/entropy",
    "kl": "losses/kl",
    "grad_norm": "losses/grad_norm",
    "clip_fraction": "losses/clip_fraction",
    "advantage_success": "advantages/success_mean",
    "advantage_failure": "advantages/failure_mean",
    "memory_size": "memory/size",
    "rollout_s": "time/rollout_s",
    "update_s": "time/update_s",
}
"""Per-step figures kept from each RL run's ``metrics.jsonl`` (name -> metric key)."""


def fail(message: str) -> NoReturn:
    """Stop with a one-line error."""
    raise SystemExit(f"smol_learning: {message}")


# ------------------------------------------------------------------------------------------- phases on disk
class Phases:
    """The phases of one study in ``OUT/phases/``: a finished phase's result is read back, not redone. With
    ``publish``, every finished phase is copied into ``publish/phases/`` too, and one found only there is taken."""

    def __init__(self, out: Path, publish: Path | None = None, only: list[str] | None = None) -> None:
        self.dir = out / "phases"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.published = publish / "phases" if publish else None
        self.only = only

    def run(self, name: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        """The result of phase ``name``: read from its file when it finished earlier (here or, with ``publish``,
        in the published copy), else ``work()`` timed and written (atomically, with ``wall_s``); None for an
        unfinished phase that matches none of the patterns ``only`` (when given)."""
        from joy_trainers.rundir import read_json, write_json_atomic

        path = self.dir / f"{name}.json"
        copy = self.published / f"{name}.json" if self.published else None
        if not path.is_file() and copy is not None and copy.is_file():
            shutil.copyfile(copy, path)
            print(f"[smol-learning] {name}: taken from {copy}", flush=True)
        if path.is_file():
            print(f"[smol-learning] {name}: finished earlier ({path})", flush=True)
            result = read_json(path, 256 * 2**20)
        elif self.only is not None and not any(fnmatch.fnmatchcase(name, p) for p in self.only):
            return None
        else:
            print(f"[smol-learning] {name} ...", flush=True)
            start = time.perf_counter()
            result = {**work(), "wall_s": time.perf_counter() - start}
            write_json_atomic(path, result, f"phase {name}")
            print(f"[smol-learning] {name}: {result['wall_s']:.0f} s", flush=True)
        if copy is not None and not copy.is_file():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
        return result

    def walls(self) -> dict[str, float]:
        """Wall seconds of every finished phase."""
        return {p.stem: json.loads(p.read_text())["wall_s"] for p in sorted(self.dir.glob("*.json"))}


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


def cpu_name() -> str:
    """The CPU's model name and whether it has native bfloat16 products (``/proc/cpuinfo``; Linux)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown CPU"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    cores = info.count("\nprocessor") + info.startswith("processor")
    bf16 = "avx512_bf16" in flags or "amx_bf16" in flags
    return f"{name or 'unknown CPU'}, {cores} cores, {'AVX512-BF16' if bf16 else 'no bf16 units'}"


# ------------------------------------------------------------------------------------------------ evaluation
def episode_values(trajectories: list[Any]) -> dict[str, Any]:
    """Per-episode values (in order): success as 0/1, the share of the episode's agent turns in the expected
    format, the reward and the generated tokens."""
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


def per_task(values: dict[str, Any], samples: int) -> dict[str, Any]:
    """Sampled episodes (``samples`` per task, task after task) as per-task figures: ``sampled_success`` (the mean
    over the samples), ``pass^K`` (all K succeed), ``sampled_format_valid``; ``task_ids`` once per task."""
    from joy_trainers.pass_k import pass_hat_k

    n = len(values["success"]) // samples
    chunks = [values["success"][i * samples : (i + 1) * samples] for i in range(n)]
    forms = [values["format_valid"][i * samples : (i + 1) * samples] for i in range(n)]
    return {
        "task_ids": values["task_ids"][::samples],
        "sampled_success": [sum(c) / samples for c in chunks],
        f"pass^{samples}": [pass_hat_k([[bool(x) for x in c]], samples) for c in chunks],
        "sampled_format_valid": [sum(f) / samples for f in forms],
        "generated_tokens": values["generated_tokens"],
    }


EVAL_ROWS = 128
"""Episodes an evaluation decodes together by default (``--eval-rows``): fewer than the engine's own default, so
that the sampled evaluations of two SmolLM2 teams fit side by side in a small machine's memory."""


def evaluate(
    team: Any,
    study: dict[str, Any],
    name: str,
    sampled: bool,
    memory: dict[str, Any] | None = None,
    rows: int = EVAL_ROWS,
) -> dict[str, Any]:
    """Episodes of ``team`` on the evaluation set ``name`` of the study, under its limits: one greedy episode per
    task, or (``sampled``) ``study["samples"]`` per task at the study's sampling temperature, seeded by the set;
    at most ``rows`` episodes decoded together (each holds its KV cache: memory grows with ``rows``)."""
    import torch

    from joy_agents.rollout import RolloutConfig, RolloutEngine, summarize
    from joy_agents.sampling.settings import GenerationSettings

    spec = study["sets"][name]
    limits = GenerationSettings(**study["limits"], max_batch_rows=rows)
    engine = RolloutEngine(
        team, study["env_id"], spec["split"], study["data_seed"], RolloutConfig(limits), memory=memory,
        env_kwargs=study["env_kwargs"],
    )  # fmt: skip
    k = study["samples"] if sampled else 1
    starts = [t for t in spec["tasks"] for _ in range(k)]
    sampling = limits.sampling(study["temperature"] if sampled else 0.0)
    torch.manual_seed(EVAL_SEEDS[name])  # every team's samples drawn from the same seed
    start = time.perf_counter()
    trajectories = engine.run(starts, sampling)
    wall = time.perf_counter() - start
    metrics = summarize(trajectories)
    values = episode_values(trajectories)
    print(
        f"[smol-learning]   {name}{' sampled' if sampled else ''}: success {metrics['success_rate']:.3f}, "
        f"format-valid turns {metrics['format_valid_rate']:.3f}, {values['generated_tokens']} tokens in {wall:.0f} s",
        flush=True,
    )
    out = per_task(values, k) if sampled else values
    return {**out, "metrics": metrics, "eval_s": wall, "max_batch_rows": rows}


EVAL_SEEDS = {"validation": 11, "test": 12, "train": 13}
"""The torch seed of each set's sampled evaluation (the same for every team)."""


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
    """Teams with bootstrap intervals and the :data:`PAIRS` differences of one evaluation set, for every figure
    the evaluations hold per task (``success``, ``format_valid``; sampled: ``sampled_success``, ``pass^K``,
    ``sampled_format_valid``). A method over its seeds: its per-task values averaged over the seeds; each seed on
    its own as ``<method>-s<seed>``."""
    from joy_trainers.intervals import LEVEL, RESAMPLES, bootstrap_interval, paired_difference

    figures = [k for k in next(iter(evaluations.values()), {}) if k not in ("task_ids", "domains")]
    per_task: dict[str, dict[str, list[float]]] = {}
    for key, ev in evaluations.items():
        if len(seeds) > 1 or not key.endswith(f"-s{seeds[0]}"):  # one seed: the method's own row
            per_task[key] = {name: ev[name] for name in figures}
    for method in METHODS:
        runs = [evaluations[f"{method}-s{s}"] for s in seeds if f"{method}-s{s}" in evaluations]
        if runs:
            per_task[method] = {
                name: [sum(vs) / len(vs) for vs in zip(*(r[name] for r in runs), strict=True)] for name in figures
            }
    teams = {
        key: {name: bootstrap_interval(values[name])._asdict() for name in figures}
        | {"tasks": len(next(iter(values.values()), []))}
        for key, values in per_task.items()
    }
    differences = {}
    pairs = list(PAIRS) + [(f"{m}-s{s}", "sft") for m in METHODS for s in seeds if len(seeds) > 1]
    for a, b in pairs:
        if a in per_task and b in per_task:
            differences[f"{a} - {b}"] = {
                name: paired_difference(per_task[a][name], per_task[b][name])._asdict() for name in figures
            }
    return {"teams": teams, "differences": differences, "level": LEVEL, "resamples": RESAMPLES}


def merged(greedy: dict[str, Any], sampled: dict[str, Any] | None) -> dict[str, Any]:
    """The per-task figures of a team on one set: its greedy ones, and its sampled ones when played, with
    ``pass@K`` (one of the K samples succeeds: what RL could sharpen into the greedy answer)."""
    out = {"task_ids": greedy["task_ids"], "success": greedy["success"], "format_valid": greedy["format_valid"]}
    if sampled is not None:
        if sampled["task_ids"] != greedy["task_ids"]:
            fail("a sampled evaluation ran on other tasks than its greedy one")
        out |= {k: v for k, v in sampled.items() if k.startswith(("sampled_", "pass^"))}
        k = next(int(key[len("pass^") :]) for key in sampled if key.startswith("pass^"))
        out[f"pass@{k}"] = [float(v > 0) for v in sampled["sampled_success"]]
    return out


def table(summary: dict[str, Any]) -> str:
    """The report of one set as text."""

    def cell(i: dict[str, float], sign: str = "") -> str:
        return f"{i['estimate']:{sign}.3f} [{i['low']:{sign}.3f}, {i['high']:{sign}.3f}]"

    figures = list(next(iter(summary["teams"].values()), {}))
    figures = [f for f in figures if f != "tasks"]
    lines = [f"{'team':<22} {'tasks':>5}  " + "  ".join(f"{f:<24}" for f in figures)]
    for key, t in summary["teams"].items():
        lines.append(f"{key:<22} {t['tasks']:>5}  " + "  ".join(f"{cell(t[f]):<24}" for f in figures))
    lines += ["", f"{'paired difference':<30} " + "  ".join(f"{f:<26}" for f in figures)]
    for key, d in summary["differences"].items():
        lines.append(f"{key:<30} " + "  ".join(f"{cell(d[f], '+'):<26}" for f in figures))
    return "\n".join(lines)


def plot(summaries: dict[str, dict[str, Any]], runs: dict[str, dict[str, list[float]]], path: Path) -> None:
    """Per set, greedy and sampled success per team with their intervals; the sampled success of each RL run's
    training rollouts against its generated tokens (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, grid = plt.subplots(1, len(summaries) + 1, figsize=(4.2 * (len(summaries) + 1), 4.2), squeeze=False)
    axes = list(grid[0])
    for ax, (name, summary) in zip(axes, summaries.items(), strict=False):
        keys = list(summary["teams"])
        for offset, figure, colour in ((-0.2, "success", "#7aa6c2"), (0.2, "sampled_success", "#d9a35f")):
            rows = [summary["teams"][k].get(figure) for k in keys]
            if not any(rows):
                continue
            est = [r["estimate"] if r else 0.0 for r in rows]
            err = [[e - r["low"] if r else 0 for e, r in zip(est, rows, strict=True)],
                   [r["high"] - e if r else 0 for e, r in zip(est, rows, strict=True)]]  # fmt: skip
            ax.bar([i + offset for i in range(len(keys))], est, 0.4, yerr=err, capsize=3, color=colour, label=figure)
        ax.set_xticks(range(len(keys)), keys, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{name}, {summary['level']:.0%} bootstrap intervals", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    right = axes[-1]
    for name, c in runs.items():
        right.plot(c["tokens"], c["success"], marker=".", label=name)
    right.set_xlabel("generated tokens (training rollouts)")
    right.set_ylabel("success of the step's training episodes")
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
    parser.add_argument("--publish", help="also copy every finished phase and the report here (and read them back)")
    parser.add_argument("--quick", action="store_true", help="the same phases on the embedded tiny model, small")
    parser.add_argument("--sft-run", help="a run directory of the sft trainer to start from (skips the sft phase)")
    parser.add_argument("--seeds", nargs="+", type=int, help="RL seeds of each method (default: 0)")
    parser.add_argument("--budget", type=int, help="generated tokens of each RL run (token_budget)")
    parser.add_argument("--eval-tasks", type=int, help="validation and test tasks (default 200; quick 8)")
    parser.add_argument("--train-tasks", type=int, help="tasks of the train set (default 100; quick 4)")
    parser.add_argument(
        "--eval-rows",
        type=int,
        default=EVAL_ROWS,
        help=f"episodes an evaluation decodes together (default {EVAL_ROWS}; fewer: less memory, slower)",
    )
    parser.add_argument("--samples", type=int, help="sampled episodes per task (default 4, quick 2; 0: greedy only)")
    parser.add_argument("--eval-sets", nargs="+", choices=EVAL_SETS, help="the sets evaluated (default: all)")
    parser.add_argument("--untrained", action="store_true", help="also evaluate the base model with fresh adapters")
    parser.add_argument(
        "--phases",
        nargs="+",
        metavar="PATTERN",
        help="run only the unfinished phases whose names match one of these patterns (e.g. 'rl-grpo-*' "
        "'eval-grpo-*'), so that several calls on the same --out share the work; finished phases are always read",
    )
    parser.add_argument("--engine", choices=("continuous", "vllm"), default="continuous", help="rollout engine")
    parser.add_argument("--env", help="env id of RL and of every evaluation (default: the SFT run's)")
    parser.add_argument("--max-new-tokens", type=int, help="tokens per turn (default: the SFT run's limit)")
    parser.add_argument("--max-cycles", type=int, help="agent turns per episode (default: the SFT run's limit)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the RL runs (JSON value), given to each method that has it (e.g. top_k to joyagents_grpo)",
    )
    args = parser.parse_args(argv)
    if args.budget is not None and args.budget < 1:
        parser.error(f"--budget must be >= 1, got {args.budget}")
    for name in ("eval_tasks", "train_tasks", "max_new_tokens", "max_cycles"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.samples is not None and not 0 <= args.samples <= 64:
        parser.error(f"--samples must be in [0, 64], got {args.samples}")
    if not 1 <= args.eval_rows <= 4096:
        parser.error(f"--eval-rows must be in [1, 4096], got {args.eval_rows}")
    if args.seeds is not None and (not args.seeds or len(set(args.seeds)) != len(args.seeds)):
        parser.error(f"--seeds must be distinct, got {args.seeds}")
    return args


def study_settings_of(args: argparse.Namespace, setting: dict[str, Any], dtype: str) -> dict[str, Any]:
    """What the study is (its options), recorded in ``OUT/settings.json``."""
    from joy_trainers.cli import load_trainer, parse_overrides

    common = parse_overrides(args.set)
    known = {n for m in METHODS for n in load_trainer(m).config_class.__dataclass_fields__}
    if unknown := sorted(set(common) - known):  # a typo is refused before any work
        fail(f"--set {unknown}: not an option of {' or '.join(METHODS)}; see joy-train --trainer NAME --list-options")
    return {
        "mode": "quick" if args.quick else "smol",
        "sft_run": args.sft_run,
        "seeds": args.seeds or setting["seeds"],
        "budget": args.budget or setting["budget"],
        "eval_tasks": args.eval_tasks or setting["eval_tasks"],
        "train_tasks": args.train_tasks or setting["train_tasks"],
        "samples": setting["samples"] if args.samples is None else args.samples,
        "eval_sets": list(args.eval_sets or EVAL_SETS),
        "untrained": args.untrained,
        "engine": args.engine,
        "env": args.env,
        "max_new_tokens": args.max_new_tokens,
        "max_cycles": args.max_cycles,
        "rl_options": {**setting["rl"], **common},
        "dtype": dtype,
    }


def eval_sets(settings: dict[str, Any], study: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The split and task indices of every evaluation set (see the module documentation), each checked against
    the env's tasks."""
    import random

    import joy_env
    from joy_agents.sft_data import split_train_tasks

    sets = {}
    for name in settings["eval_sets"]:
        env = joy_env.make(study["env_id"], split=name, seed=study["data_seed"], **study["env_kwargs"])
        if name == "train":  # the first tasks the first seed's runs draw (joy_trainers.rl.loop.prepare's order)
            _, rl_tasks = split_train_tasks(env.num_tasks, 0.5, study["data_seed"])
            random.Random(f"rl-order/{settings['seeds'][0]}").shuffle(rl_tasks)
            tasks = rl_tasks[: settings["train_tasks"]]
        else:
            if settings["eval_tasks"] > env.num_tasks:
                fail(f"--eval-tasks {settings['eval_tasks']} is more than the {env.num_tasks} {name} tasks")
            tasks = list(range(settings["eval_tasks"]))
        sets[name] = {"split": name, "tasks": tasks, "templates": [env.get_task(t).template for t in tasks]}
    return sets


def by_template(teams: dict[str, dict[str, Any]], templates: list[str]) -> dict[str, dict[str, Any]]:
    """Per task template of one set (``templates[i]`` is task i's), each team's mean of every per-task figure and
    the template's number of tasks ``n``."""
    out: dict[str, dict[str, Any]] = {}
    for template in sorted(set(templates)):
        idx = [i for i, t in enumerate(templates) if t == template]
        out[template] = {"n": len(idx)} | {
            key: {f: sum(v[i] for i in idx) / len(idx) for f, v in values.items() if f not in ("task_ids", "domains")}
            for key, values in teams.items()
        }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    setting = SETTINGS["quick" if args.quick else "smol"]
    import torch

    cuda = torch.cuda.is_available()
    dtype = "bfloat16" if cuda else "float32"
    out = Path(args.out)
    publish = Path(args.publish) if args.publish else None
    settings = study_settings_of(args, setting, dtype)
    claim(out, settings)
    phases = Phases(out, publish, args.phases)
    started = time.perf_counter()
    hardware = torch.cuda.get_device_name() if cuda else f"{cpu_name()}; {torch.get_num_threads()} threads"
    print(f"[smol-learning] {settings['mode']} on {hardware}, torch {torch.__version__}; output {out}", flush=True)

    sft_dir, sft_record, study = sft_phase(args, setting, settings, phases, out, dtype)
    from joy_agents.policy import TeamPolicy

    device = "cuda" if cuda else "cpu"
    evaluations: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in study["sets"]}
    rl_runs: dict[str, dict[str, Any]] = {}
    order = ["sft", *[f"{m}-s{s}" for s in settings["seeds"] for m in METHODS]]
    order += ["untrained"] if settings["untrained"] else []

    def evaluate_team(key: str, load: Callable[[], Any], memory: dict[str, Any] | None = None) -> None:
        """Every evaluation of the team ``key`` (loaded once, when one is not finished yet), then the report."""
        team: list[Any] = []

        def work(name: str, sampled: bool) -> Callable[[], dict[str, Any]]:
            def run() -> dict[str, Any]:
                if not team:
                    team.append(load())
                return evaluate(team[0], study, name, sampled, memory, args.eval_rows)

            return run

        for name in study["sets"]:
            greedy = phases.run(f"eval-{key}-{name}", work(name, False))
            sampled = phases.run(f"eval-{key}-{name}-sampled", work(name, True)) if settings["samples"] else None
            if greedy is not None and (sampled is not None or not settings["samples"]):  # else left to --phases
                evaluations[name][key] = merged(greedy, sampled)
        write_report(out, publish, phases, settings, study, sft_record, hardware, evaluations, rl_runs, order, started)

    # 2. the SFT team
    evaluate_team("sft", lambda: TeamPolicy.load(str(sft_dir / "team"), device=device, dtype=dtype))

    # 3. RL, per seed and method, each evaluated
    def load_team(team_dir: Path) -> Any:
        if not (team_dir / "team.json").is_file():  # its RL phase was taken from the published copy
            fail(f"{team_dir} holds no team; delete the study's phase file of its RL run to train it again")
        return TeamPolicy.load(str(team_dir), device=device, dtype=dtype)

    for seed in settings["seeds"]:
        for method in METHODS:
            name = f"{method}-s{seed}"
            run = out / "rl" / name
            work = functools.partial(train, method, seed, run, setting, settings, study, sft_dir, args.engine, dtype)
            trained = phases.run(f"rl-{name}", work)
            if trained is None:  # another call's (--phases)
                continue
            rl_runs[name] = trained
            memory = run_memory(run) if (run / "results.json").is_file() else None
            evaluate_team(name, functools.partial(load_team, run / "team"), memory)

    # 4. the untrained team: the base model with fresh adapters, seeded as the SFT run's were
    if settings["untrained"]:
        evaluate_team("untrained", lambda: untrained_team(sft_dir, device, dtype))

    # 5. the report (also written after every team above, with the teams evaluated so far)
    record = write_report(
        out, publish, phases, settings, study, sft_record, hardware, evaluations, rl_runs, order, started
    )
    for name, summary in record["summary"].items():
        if isinstance(summary, dict) and "teams" in summary:
            print(f"\n== {name}\n{table(summary)}")
    print(f"\nphases (s): {', '.join(f'{k} {v:.0f}' for k, v in record['phases_s'].items())}")
    print(f"wrote {out / 'smol_learning.json'} and {out / 'smol_learning.png'}")
    return record


def sft_phase(
    args: argparse.Namespace,
    setting: dict[str, Any],
    settings: dict[str, Any],
    phases: Phases,
    out: Path,
    dtype: str,
) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """The SFT team (trained here, or ``--sft-run``), what the study records of it, and the study's env, limits
    and evaluation sets (from the SFT run, or the options)."""
    from joy_trainers.cli import data_seed_of
    from joy_trainers.generation import saved_settings
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
        sft_record = phases.run("sft", sft) or fail("the sft phase is unfinished; run it first (its --phases: sft)")
    sft_results = json.loads((sft_dir / "results.json").read_text())
    sft_config = sft_results["config"]
    limits = saved_settings(sft_results)
    sft_env = sft_config.get("env_id", "joy/mixed-v0")
    study: dict[str, Any] = {
        "env_id": args.env or sft_env,
        "env_kwargs": (sft_config.get("env_kwargs") or {}) if (args.env or sft_env) == sft_env else {},
        "data_seed": data_seed_of(sft_config),
        "samples": settings["samples"],
        "temperature": float(settings["rl_options"].get("temperature", 1.0)),
        "limits": {
            "max_new_tokens": args.max_new_tokens or limits.max_new_tokens,
            "max_cycles": args.max_cycles or limits.max_cycles,
            "max_prompt_tokens": limits.max_prompt_tokens,
            "engine": args.engine,
        },
        "sft_config": sft_config,
    }
    study["sets"] = eval_sets(settings, study)
    return sft_dir, sft_record, study


def train(
    method: str,
    seed: int,
    run: Path,
    setting: dict[str, Any],
    settings: dict[str, Any],
    study: dict[str, Any],
    sft_dir: Path,
    engine: str,
    dtype: str,
) -> dict[str, Any]:
    """The RL run of ``method`` and ``seed`` from the SFT team into ``run`` (continued from its newest checkpoint
    when it has one), stopped by the token budget."""
    from joy_trainers.cli import load_trainer

    cls = load_trainer(method)
    names = set(cls.config_class.__dataclass_fields__)
    resume = (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir())
    values = {
        **cls.presets[setting["preset"]],
        **{k: v for k, v in settings["rl_options"].items() if k in names},
        "model": setting["model"],
        "sft_run": str(sft_dir),
        "seed": seed,
        "data_seed": study["data_seed"],
        "env_id": study["env_id"],
        "env_kwargs": study["env_kwargs"],
        **{k: v for k, v in study["limits"].items() if k != "engine"},
        "rollout_engine": engine,
        "dtype": dtype,
        "token_budget": settings["budget"],
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
        "tasks_drawn": tasks_drawn(run),
        "run_wall_s": float(results["wall_s"]),  # over every call that ran it (a phase's wall_s: this call's)
    }


def run_wall(run: Path) -> float | None:
    """The wall seconds the RL run in ``run`` took over all the calls that ran it (its ``results.json``)."""
    try:
        return float(json.loads((run / "results.json").read_text())["wall_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def tasks_drawn(run: Path) -> int:
    """How many RL tasks the run in ``run`` drew (its newest checkpoint's count)."""
    from joy_trainers.rl.checkpoints import checkpoint_steps

    steps = checkpoint_steps(run / "checkpoints")
    if not steps:
        return 0
    state = json.loads((run / "checkpoints" / f"step-{steps[0]}" / "state.json").read_text())
    return int(state.get("tasks_drawn", 0))


def untrained_team(sft_dir: Path, device: str, dtype: str) -> Any:
    """The SFT run's base model with fresh adapters, seeded as the SFT run's were."""
    import torch

    from joy_agents.policy import TeamConfig, TeamPolicy
    from joy_trainers.sft import resolve_model

    sft_config = json.loads((sft_dir / "results.json").read_text())["config"]
    torch.manual_seed(int(sft_config.get("seed", 0)))
    return TeamPolicy(
        TeamConfig(
            model=resolve_model(sft_config["model"], int(sft_config.get("seed", 0))),
            dtype=dtype,
            device=device,
            lora_r=sft_config["lora_r"],
            lora_alpha=sft_config["lora_alpha"],
            prompt_style=sft_config.get("prompt_style", "chat"),
        )
    )


def write_report(
    out: Path,
    publish: Path | None,
    phases: Phases,
    settings: dict[str, Any],
    study: dict[str, Any],
    sft_record: dict[str, Any],
    hardware: str,
    evaluations: dict[str, dict[str, dict[str, Any]]],
    rl_runs: dict[str, dict[str, Any]],
    order: list[str],
    started: float,
) -> dict[str, Any]:
    """``smol_learning.json`` and ``.png`` from the evaluations so far (``complete`` once all are in), in ``out``
    and, with ``publish``, there too."""
    import torch

    summary: dict[str, Any] = {}
    per_task_record: dict[str, Any] = {}
    templates: dict[str, Any] = {}
    for name, teams in evaluations.items():
        done = [k for k in order if k in teams]
        if not done:
            continue
        if len({tuple(teams[k]["task_ids"]) for k in done}) != 1:
            fail(f"the {name} evaluations ran on different tasks; the paired differences would be meaningless")
        summary[name] = report({k: teams[k] for k in done}, settings["seeds"])
        per_task_record[name] = {k: {f: v for f, v in teams[k].items() if f != "task_ids"} for k in done}
        templates[name] = by_template({k: teams[k] for k in done}, study["sets"][name]["templates"])
    complete = all(k in teams for teams in evaluations.values() for k in order)
    record = {
        "benchmark": "smol_learning",
        "complete": complete,
        "date": time.strftime("%Y-%m-%d"),
        "hardware": hardware,
        "torch": torch.__version__,
        "settings": settings,
        "study": {k: v for k, v in study.items() if k not in ("sets", "sft_config")},
        "sets": study["sets"],
        "sft": {k: v for k, v in sft_record.items() if k != "config"},
        "phases_s": phases.walls(),
        "generated_tokens": {f"rl-{k}": r["generated_tokens"] for k, r in rl_runs.items()},
        "rl": {
            k: {n: r.get(n) for n in ("steps", "generated_tokens", "tasks_drawn", "curves")}
            | {"wall_s": r.get("run_wall_s") or run_wall(out / "rl" / k)}
            for k, r in rl_runs.items()
        },
        "summary": summary,
        "per_task": per_task_record,
        "by_template": templates,
        "wall_s_this_call": time.perf_counter() - started,
    }
    (out / "smol_learning.json").write_text(json.dumps(record, indent=2))
    plot(summary, {k: r["curves"] for k, r in rl_runs.items()}, out / "smol_learning.png")
    if publish is not None:
        publish.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "smol_learning.json", publish / "smol_learning.json")
        shutil.copyfile(out / "smol_learning.png", publish / "smol_learning.png")
    return record


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from joy_trainers.errors import Terminated, UsageError

    try:
        main(sys.argv[1:])
    except UsageError as exc:  # an option or a run directory the trainers refused
        fail(str(exc))
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: an RL run stopped after its step, with a checkpoint
        print(f"smol_learning: {exc or 'interrupted'}; the same command continues the study", file=sys.stderr)
        sys.exit(143 if isinstance(exc, Terminated) else 130)
