"""Metrics: one row per training step in ``metrics.jsonl`` with one vocabulary for every trainer
(``charts/reward_mean``, ``groups/selected/<role>``, ``losses/kl``, ``time/rollout_s``, ...; see
``docs/trainers/``), built by :func:`~joy_trainers.rl.step.metrics_row` from a step's :class:`StepOutput`, and
the reward curve."""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joy_trainers.errors import UsageError, shown
from joy_trainers.rl.groups import Group
from joy_trainers.rundir import write_text_atomic, writing

ROW_NUMBER_MAX = 2**63 - 1
"""The largest magnitude of an integer in a ``metrics.jsonl`` row read back (every one converts to a float)."""


class MetricsLog:
    """One JSON line per step in ``path`` (flushed and synced: nothing is lost on a crash), mirrored to
    Accelerate trackers when given an ``accelerator`` with trackers.

    Rows already in the file are read back (a last line torn by a crash is dropped; a row holding an integer
    beyond :data:`ROW_NUMBER_MAX`, which no run writes, is a one-line UsageError naming the line and the metric);
    :meth:`truncate` keeps the rows up to the step a run resumes from, so that no step is ever logged twice."""

    def __init__(self, path: str | Path, accelerator: Any = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.accelerator = accelerator
        self.rows: list[dict[str, Any]] = []
        if self.path.is_file():
            for number, line in enumerate(self.path.read_text().splitlines(), 1):
                try:
                    row = json.loads(line) if line.strip() else None
                except (ValueError, RecursionError):  # a line torn by a crash mid-write
                    row = None
                if isinstance(row, dict):
                    self._check_row(row, number)
                    self.rows.append(row)

    def _check_row(self, row: dict[str, Any], number: int) -> None:
        for key, value in row.items():
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) > ROW_NUMBER_MAX:
                raise UsageError(
                    f"{self.path} line {number}: {shown(key, 60)} is {shown(value)}, a number no run writes (damaged "
                    "or tampered with); restore the file, or delete that line (its step is then missing from the log)"
                )

    def truncate(self, step: int) -> None:
        """Keep the rows of steps ``1..step`` (once each), rewriting the file atomically."""
        kept: dict[int, dict[str, Any]] = {}
        for r in self.rows:
            s = r.get("step", 0)
            if isinstance(s, int) and 0 < s <= step:
                kept[s] = r  # a step logged twice (a file from before resumes truncated) keeps its last row
        self.rows = [kept[s] for s in sorted(kept)]
        write_text_atomic(self.path, "".join(json.dumps(r, default=float) + "\n" for r in self.rows), "the metrics")

    def log(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        with writing(self.path, f"the metrics of step {row.get('step')}"), open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=float) + "\n")  # a line torn by a full disk is dropped when read back
            f.flush()
            os.fsync(f.fileno())
        if self.accelerator is not None and getattr(self.accelerator, "trackers", None):
            scalars = {k: v for k, v in row.items() if isinstance(v, (int, float)) and math.isfinite(v)}
            self.accelerator.log(scalars, step=int(row.get("step", 0)))


class Timer:
    """Accumulates seconds per phase: ``with timer("rollout"): ...``; ``timer.seconds`` holds the totals."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start


@dataclass
class StepOutput:
    """What one training step did, for its metrics row (:func:`~joy_trainers.rl.step.metrics_row`); every field is
    optional.

    A trainer's ``step`` returns one; the loop turns it into the ``metrics.jsonl`` row.
    """

    trajectories: Sequence[Any] = ()
    """The step's episodes whose team rewards are ``charts/reward_mean`` and ``charts/success_rate``."""
    groups: Sequence[Group] = ()
    """Every group the step formed (``groups/total``, ``groups/variance_mean``, ...)."""
    selected: Sequence[Group] = ()
    """The groups used in the update (``groups/selected``, ``groups/selected/<role>``)."""
    continuations: Sequence[Any] = ()
    """Extra episodes rolled out (node-wise branches): their tokens count in ``charts/tokens_generated``."""
    update_stats: dict[str, Any] = field(default_factory=dict)
    """Role -> statistics of :func:`~joy_trainers.rl.policy_update` (``losses/*``)."""
    memory_stats: dict[str, Any] = field(default_factory=dict)
    """Counts of memory evolution (``memory/written``, ``memory/evicted``)."""
    timer: Timer | None = None
    """Seconds per phase (``time/<phase>_s``)."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """The trainer's own entries, added to the row as they are (e.g. ``losses/value_loss``)."""


def plot_rewards(path: Path, rows: Sequence[dict[str, Any]], results: dict[str, Any]) -> None:
    """Training reward and success per step, with the test success before and after as lines."""
    import matplotlib  # imported here: plotting is the only use, and it costs import time

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [r["step"] for r in rows]
    ax.plot(steps, [r["charts/reward_mean"] for r in rows], marker="o", label="train reward (rollouts)")
    ax.plot(steps, [r["charts/success_rate"] for r in rows], marker=".", label="train success")
    # "before" wide and light under a thin dashed "after": both stay visible when they are equal
    lines = (
        ("baseline_metrics", "-", "tab:gray", 5.0, 0.45, "test success before"),
        ("metrics", "--", "black", 1.5, 1.0, "test success after"),
    )
    for key, style, colour, width, alpha, label in lines:
        m = results.get(key) or {}
        if "success_rate" in m:
            ax.axhline(
                m["success_rate"],
                linestyle=style,
                color=colour,
                linewidth=width,
                alpha=alpha,
                label=f"{label} ({m['success_rate']:.2f})",
            )
    ax.set_xlabel("step")
    ax.set_ylabel("reward / success")
    ax.set_title(f"{results['trainer']} on {results['env_id']} (seed {results['seed']})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
