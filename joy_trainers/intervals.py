"""Bootstrap intervals of a team's success over tasks, and of the difference between two teams on the same tasks.

Pure functions on per-task values (a success as 0/1, or any finite number); the benchmark and example scripts
that compare teams (``benchmarks/smol_learning.py``, ``examples/gpu/smol_check.py``) report them.

>>> bootstrap_interval([1, 0, 1, 1]).estimate
0.75
>>> paired_difference([1, 1, 0], [1, 0, 0]).estimate  # team a - team b, task by task
0.3333333333333333
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

RESAMPLES = 2000
"""Bootstrap resamples of every interval."""
LEVEL = 0.95
"""Coverage of every interval."""
BOOTSTRAP_SEED = 0
"""Seed of the bootstrap resampling (the same seed for every interval)."""


class Interval(NamedTuple):
    """An estimate and its bootstrap interval."""

    estimate: float
    low: float
    high: float


def _resampled_means(values: np.ndarray, resamples: int, level: float, seed: int) -> tuple[float, float]:
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(values), size=(resamples, len(values)))
    means = values[rows].mean(axis=1)
    low, high = np.quantile(means, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(low), float(high)


def _as_array(values: Sequence[float], name: str) -> np.ndarray:
    array = np.asarray([float(v) for v in values], dtype=np.float64)
    if array.size == 0:
        raise ValueError(f"{name} is empty; the bootstrap needs at least one value")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} holds a value that is not finite; pass numbers (successes as 0/1)")
    return array


def bootstrap_interval(
    values: Sequence[float], resamples: int = RESAMPLES, level: float = LEVEL, seed: int = BOOTSTRAP_SEED
) -> Interval:
    """The mean of ``values`` (e.g. one success per task, as 0/1) and its percentile bootstrap interval at
    ``level``: the tasks resampled with replacement ``resamples`` times with a generator seeded by ``seed``."""
    array = _as_array(values, "values")
    low, high = _resampled_means(array, resamples, level, seed)
    return Interval(float(array.mean()), low, high)


def paired_difference(
    a: Sequence[float],
    b: Sequence[float],
    resamples: int = RESAMPLES,
    level: float = LEVEL,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """The mean of ``a - b`` over paired tasks (``a[i]`` and ``b[i]`` are the same task for two teams) and its
    paired bootstrap interval: task indices resampled with replacement, the same indices for both teams."""
    left, right = _as_array(a, "a"), _as_array(b, "b")
    if left.shape != right.shape:
        raise ValueError(
            f"a paired difference needs one value per task for both teams, got {left.size} and {right.size} "
            "values; evaluate both teams on the same tasks"
        )
    differences = left - right
    low, high = _resampled_means(differences, resamples, level, seed)
    return Interval(float(differences.mean()), low, high)
