"""The files an ``sft`` run writes beside ``results.json``: ``logs.json`` (TRL's log per stage) and
``training.png`` (the loss per stage and role; per test domain, format-valid turns and success before and after)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from joy_trainers.rundir import write_json_atomic, writing, wrote

__all__ = ["plot_run", "write_logs"]


def write_logs(run_dir: Path, results: dict[str, Any], logs: dict[str, list[dict[str, Any]]]) -> None:
    """``logs.json`` (TRL's log per stage, atomically) and ``training.png`` in ``run_dir``."""
    write_json_atomic(run_dir / "logs.json", logs, "the SFT stages' logs")
    with writing(run_dir / "training.png", "the training plot", cleanup=[run_dir / "training.png"]):
        plot_run(run_dir / "training.png", results, logs)
    wrote(run_dir / "training.png")  # what --overwrite may remove


def plot_run(path: Path, results: dict[str, Any], logs: dict[str, list[dict[str, Any]]]) -> None:
    """Training loss per stage / role; per test domain, the format-valid turn rate (bars) and the success rate
    (markers) of the starting team and of the trained one."""
    import matplotlib  # imported here: plotting is its only use, and it costs import time

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, log in logs.items():
        pts = [(e["step"], e["loss"]) for e in log if "loss" in e and math.isfinite(e["loss"])]
        if pts:
            ax1.plot(*zip(*pts, strict=True), label=name)
    ax1.set_xlabel("step")
    ax1.set_ylabel("training loss")
    ax1.set_yscale("log")
    if ax1.lines:  # a run without training stages has no loss to show
        ax1.legend(fontsize=8)
    after = (results.get("metrics") or {}).get("per_domain") or {}
    before = (results.get("baseline_metrics") or {}).get("per_domain") or {}
    domains = list(after)
    xs = list(range(len(domains)))
    sides = ((-0.2, "baseline", before, "tab:gray"), (0.2, results["trainer"], after, "tab:blue"))
    for offset, label, per, colour in sides:
        if not per:
            continue
        at = [x + offset for x in xs]
        ax2.bar(
            at,
            [per.get(d, {}).get("format_valid_rate", 0) for d in domains],
            0.4,
            color=colour,
            alpha=0.6,
            label=f"{label}: format-valid turns",
        )
        ax2.scatter(
            at,
            [per.get(d, {}).get("success_rate", 0) for d in domains],
            color=colour,
            marker="D",
            edgecolor="black",
            zorder=3,
            label=f"{label}: success",
        )
    ax2.set_xticks(xs, domains, rotation=20, fontsize=8)
    ax2.set_ylabel(f"rate ({results['split']} split)")
    ax2.set_ylim(0, 1.05)
    if before or after:
        ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
