"""The baselines side by side: SFT only, ``mappo``, ``grpo`` and ``joyagents_grpo`` (with its ablations) from
the same SFT team, each stopped at the same budget of generated tokens, over several seeds.

Every RL run starts from one SFT team (the tiny preset's, cached; or ``--sft-run``), trains until its
training rollouts have generated ``--budget`` tokens (``token_budget``: a run stops at the first step that
reaches it, so it may overshoot by part of one step; the tokens actually used are reported), then is
evaluated greedily on the first ``--eval-tasks`` test tasks. "sft" is the starting team evaluated the same
way (0 tokens). All runs use one RL iteration (the reference policy is the SFT team throughout).

Outputs in ``--out-dir``: ``baselines.json`` (every run and the mean / std per method), ``baselines.md``
(the table), ``success_vs_tokens.png`` and ``success_vs_wall.png`` (test success and mean reward against
generated tokens and against training wall time), and ``runs/<method>-s<seed>/`` (each run directory). A
run whose ``results.json`` exists is not redone (an unfinished one is started again), so an interrupted
benchmark continues where it stopped.

    python benchmarks/run_baselines.py --quick --out-dir /tmp/baselines-quick   # <= 5 min: checks the pipeline
    python benchmarks/run_baselines.py --out-dir /tmp/baselines                 # ~2 h on 2 cores: the published figures
    python benchmarks/run_baselines.py --methods grpo joyagents_grpo --seeds 0 1 --budget 10000 --out-dir DIR
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shutil
import time
from pathlib import Path
from typing import Any

METHODS: dict[str, tuple[str, dict[str, Any]] | None] = {
    "sft": None,
    "mappo": ("mappo", {}),
    "grpo": ("grpo", {}),
    "joyagents_grpo": ("joyagents_grpo", {}),
    "joyagents_grpo_k1": ("joyagents_grpo", {"top_k": 1}),
    "joyagents_grpo_kall": ("joyagents_grpo", {"top_k": "all"}),
    "joyagents_grpo_nomem": ("joyagents_grpo", {"memory": False}),
    "joyagents_grpo_traj": ("joyagents_grpo", {"sampling": "trajectory"}),
}
"""Method name -> (trainer, options on top of its tiny preset); ``None``: the SFT team, untrained further."""

ABLATIONS = ("joyagents_grpo_k1", "joyagents_grpo_kall", "joyagents_grpo_nomem", "joyagents_grpo_traj")
"""joyagents_grpo with one part changed: top-K selection, memory, node-wise sampling (``--ablation-seeds``)."""

DATA_SEED = 0
"""The env's data seed of every run: all methods and seeds start from one SFT team and meet the same test tasks;
``--seeds`` vary the RL runs (task order, sampling)."""

FULL = {"methods": list(METHODS), "seeds": [0, 1, 2], "ablation_seeds": [0], "budget": 150_000, "eval_tasks": 200}
QUICK = {
    "methods": ["sft", "mappo", "grpo", "joyagents_grpo"],
    "seeds": [0],
    "ablation_seeds": [0],
    "budget": 2_500,
    "eval_tasks": 10,
}
QUICK_RL = {"tasks_per_step": 2, "group_size": 3, "max_nodes": 2, "max_new_tokens": 48, "max_cycles": 6}
"""``--quick``'s RL options (``--set`` wins): small steps, so that one step does not overshoot the budget much."""
QUICK_SFT = {"sft_tasks": 80, "base_epochs": 1.0, "adapter_epochs": 0.25}
"""``--quick`` fine-tunes a smaller SFT team (cached) so that the whole benchmark fits in a few minutes."""


def method_config(
    method: str, seed: int, sft_run: str, budget: int, eval_tasks: int, out: Path, common: dict[str, Any] | None = None
) -> tuple[Any, Any]:
    """(trainer class, config) of one RL run of ``method``: the trainer's tiny preset, ``common`` (``--set``
    options, each given to the trainers that have it), the method's options, and the shared settings."""
    import dataclasses

    from joy_trainers.cli import load_trainer

    spec = METHODS[method]
    if spec is None:
        raise ValueError(f"method {method!r} is not trained")
    trainer, options = spec
    cls = load_trainer(trainer)
    names = {f.name for f in dataclasses.fields(cls.config_class)}
    values = {
        **cls.presets["tiny"],
        **{k: v for k, v in (common or {}).items() if k in names},
        **options,
        "sft_run": sft_run,
        "seed": seed,
        "data_seed": DATA_SEED,
        "token_budget": budget,
        "iterations": 1,
        "steps_per_iteration": 10_000,  # the token budget ends the run
        "checkpoint_every": 10_000,  # a checkpoint is still written when the budget is reached
        "eval_tasks": eval_tasks,
        "eval_baseline": False,
        "output_dir": str(out),
    }
    return cls, cls.config_class.from_dict(values)


def run_one(
    method: str, seed: int, sft_run: str, budget: int, eval_tasks: int, limits: dict, out: Path, common: dict
) -> dict:
    """One row: ``method`` at ``seed`` (trained unless "sft"), evaluated on ``eval_tasks`` test tasks."""
    done = out / "results.json"
    if done.is_file():
        results = json.loads(done.read_text())
    elif METHODS[method] is None:
        # the SFT team is evaluated greedily on the tasks of DATA_SEED, the same for every RL seed: once
        earlier = sorted(out.parent.glob(f"{method}-s*/results.json"))
        if earlier:
            results = {**json.loads(earlier[0].read_text()), "seed": seed}
        else:
            from joy_agents.policy import TeamPolicy
            from joy_trainers.evaluation import evaluate_team

            team = TeamPolicy.load(str(Path(sft_run) / "team"))
            metrics = evaluate_team(team, "joy/mixed-v0", "test", eval_tasks, DATA_SEED, **limits)
            results = {"trainer": "sft", "seed": seed, "generated_tokens": 0, "train_wall_s": 0.0, "metrics": metrics}
        out.mkdir(parents=True, exist_ok=True)
        done.write_text(json.dumps(results, indent=2))
    else:
        if out.exists():  # an interrupted run: start it again
            shutil.rmtree(out)
        cls, config = method_config(method, seed, sft_run, budget, eval_tasks, out, common)
        results = cls(config).train()
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
        results["train_wall_s"] = rows[-1]["time/wall_s"] if rows else 0.0
        results["steps_logged"] = len(rows)
        done.write_text(json.dumps(results, indent=2, default=str))
    m = results["metrics"]
    return {
        "method": method,
        "seed": seed,
        "generated_tokens": int(results["generated_tokens"]),
        "train_wall_s": float(results.get("train_wall_s", 0.0)),
        "success_rate": m["success_rate"],
        "mean_reward": m["mean_reward"],
        "mean_accuracy": m["mean_accuracy"],
        "format_valid_rate": m["format_valid_rate"],
        "per_domain": {d: v["success_rate"] for d, v in m["per_domain"].items()},
        "run_dir": str(out),
    }


def _check_options(common: dict[str, Any], methods: list[str]) -> None:
    """Every ``--set`` key must be an option of at least one selected trainer (catches typos)."""
    import dataclasses

    from joy_trainers.cli import load_trainer

    trainers = {spec[0] for m in methods if (spec := METHODS[m]) is not None}
    names = {f.name for t in trainers for f in dataclasses.fields(load_trainer(t).config_class)}
    unknown = sorted(set(common) - names)
    if unknown:
        raise SystemExit(f"--set {unknown}: not an option of {sorted(trainers)}; options: {', '.join(sorted(names))}")


def mean_std(xs: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    if not xs:
        return 0.0, 0.0
    mu = sum(xs) / len(xs)
    if len(xs) < 2:
        return mu, 0.0
    return mu, math.sqrt(sum((x - mu) ** 2 for x in xs) / (len(xs) - 1))


def summarize(rows: list[dict]) -> dict[str, dict[str, Any]]:
    """Mean and std over seeds of every figure, per method (in the order of first appearance)."""
    out: dict[str, dict[str, Any]] = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        rs = [r for r in rows if r["method"] == method]
        entry: dict[str, Any] = {"seeds": len(rs)}
        keys = ("success_rate", "mean_reward", "mean_accuracy", "format_valid_rate", "generated_tokens", "train_wall_s")
        for key in keys:
            entry[key], entry[f"{key}_std"] = mean_std([float(r[key]) for r in rs])
        domains = sorted({d for r in rs for d in r["per_domain"]})
        entry["per_domain_success"] = {d: mean_std([r["per_domain"].get(d, 0.0) for r in rs])[0] for d in domains}
        out[method] = entry
    return out


def table(summary: dict[str, dict[str, Any]], settings: dict[str, Any]) -> str:
    """The markdown table of ``summary``."""
    domains = sorted({d for e in summary.values() for d in e["per_domain_success"]})
    head = ["method", "seeds", "tokens", "train s", "success", "reward", "accuracy", "format", *domains]
    lines = [
        f"Test split, first {settings['eval_tasks']} tasks, greedy; token budget {settings['budget']:,}; "
        f"mean ± std over RL seeds {settings['seeds']} (ablations: {settings['ablation_seeds']}); one SFT team and "
        f"one set of test tasks (data seed {DATA_SEED}) for every run.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for method, e in summary.items():
        cells = [
            method,
            str(e["seeds"]),
            f"{e['generated_tokens']:,.0f}",
            f"{e['train_wall_s']:.0f}",
            f"{e['success_rate']:.3f} ± {e['success_rate_std']:.3f}",
            f"{e['mean_reward']:.3f} ± {e['mean_reward_std']:.3f}",
            f"{e['mean_accuracy']:.3f}",
            f"{e['format_valid_rate']:.2f}",
            *[f"{e['per_domain_success'].get(d, 0.0):.2f}" for d in domains],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, dict[str, Any]], x_key: str, x_label: str, path: Path) -> None:
    """Test success and mean reward (mean ± std over seeds) against ``x_key``; each RL method is drawn from
    the SFT point (0, SFT's figures) to its own."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    start = summary.get("sft")
    for ax, key, label in ((axes[0], "success_rate", "test success"), (axes[1], "mean_reward", "test mean reward")):
        for method, e in summary.items():
            xs, ys, errs = [e[x_key]], [e[key]], [e[f"{key}_std"]]
            if start is not None and method != "sft":
                xs, ys, errs = [0.0, *xs], [start[key], *ys], [start[f"{key}_std"], *errs]
            ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=method)
        ax.set_xlabel(x_label)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.suptitle(f"test success and reward against {x_label}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", required=True, help="where the JSON, table, plots and run directories go")
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK}, RL options {QUICK_RL} and a smaller SFT team ({QUICK_SFT})"
    )
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), help="default: all (quick: the four)")
    parser.add_argument("--seeds", nargs="+", type=int, help="RL seeds (default 0 1 2; quick: 0)")
    parser.add_argument(
        "--ablation-seeds", nargs="+", type=int, help=f"RL seeds of the ablations {ABLATIONS} (default 0)"
    )
    parser.add_argument("--budget", type=int, help="generated tokens per RL run (default 150000; quick: 2500)")
    parser.add_argument("--eval-tasks", type=int, help="test tasks per evaluation (default 200; quick: 10)")
    parser.add_argument("--sft-run", help="run directory of `joy-train --trainer sft` (default: the cached tiny one)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="an option of every RL run (JSON value)"
    )
    args = parser.parse_args(argv)
    from joy_trainers.cli import parse_overrides

    common = parse_overrides(args.set)

    base = QUICK if args.quick else FULL
    if args.quick:
        common = {**QUICK_RL, **common}
    methods = args.methods or base["methods"]
    _check_options(common, methods)
    settings = {
        "methods": methods,
        "seeds": args.seeds if args.seeds is not None else base["seeds"],
        "ablation_seeds": args.ablation_seeds if args.ablation_seeds is not None else base["ablation_seeds"],
        "budget": args.budget or base["budget"],
        "eval_tasks": args.eval_tasks or base["eval_tasks"],
        "quick": args.quick,
        "rl_options": common,
    }
    if settings["budget"] < 1 or settings["eval_tasks"] < 1 or not settings["seeds"]:
        raise SystemExit(f"need --budget >= 1, --eval-tasks >= 1 and at least one seed; got {settings}")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    from joy_trainers.joyagents_grpo import PRESETS
    from joy_trainers.rl import sft_team

    sft_run = args.sft_run
    if sft_run is None:
        sft_run = str(sft_team(None, PRESETS["tiny"]["model"], DATA_SEED, QUICK_SFT if args.quick else None).parent)
    settings["sft_run"] = sft_run
    tiny = PRESETS["tiny"]
    limits = {k: common.get(k, tiny[k]) for k in ("max_new_tokens", "max_cycles", "max_prompt_tokens")}
    rows = []
    for seed in sorted({*settings["seeds"], *settings["ablation_seeds"]}):
        for method in settings["methods"]:
            if seed not in (settings["ablation_seeds"] if method in ABLATIONS else settings["seeds"]):
                continue
            print(f"[baselines] {method} seed {seed}", flush=True)
            run_dir = out / "runs" / f"{method}-s{seed}"
            budget, tasks = settings["budget"], settings["eval_tasks"]
            rows.append(run_one(method, seed, sft_run, budget, tasks, limits, run_dir, common))
    summary = summarize(rows)
    import torch

    report = {
        "benchmark": "run_baselines",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "torch": torch.__version__},
        "settings": settings,
        "wall_s": time.perf_counter() - start,
        "summary": summary,
        "runs": rows,
    }
    (out / "baselines.json").write_text(json.dumps(report, indent=2))
    (out / "baselines.md").write_text(table(summary, settings))
    plot(summary, "generated_tokens", "generated tokens (training rollouts)", out / "success_vs_tokens.png")
    plot(summary, "train_wall_s", "training wall time (s)", out / "success_vs_wall.png")
    print(table(summary, settings))
    print(f"[baselines] {time.perf_counter() - start:.0f} s; results in {out}")
    return report


if __name__ == "__main__":
    main()
