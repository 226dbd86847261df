"""pass^k, tau2-bench's reliability metric: the chance that ``k`` trials of a task, drawn without replacement from
the ``n`` trials played, all succeed, averaged over tasks.

Each task is played ``n`` times; with ``c`` successful trials, a task's pass^k is ``C(c, k) / C(n, k)`` (``C``:
the binomial coefficient), the unbiased estimate of the probability that ``k`` independent trials all succeed.
pass^1 is the mean success rate; pass^k never grows with ``k``; a task that always succeeds scores 1 for every
``k``, one that succeeds in fewer than ``k`` trials scores 0.

    pass_hat_k([[True, True, False, False]], 2)          # C(2, 2) / C(4, 2) = 1/6
    pass_hat_ks([[True, True], [True, False]])           # {"1": 0.75, "2": 0.5}

The result is computed exactly (in fractions) and rounded once, so pass^1 equals ``successes / (tasks * n)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from math import comb

__all__ = ["pass_hat_k", "pass_hat_ks"]


def _trials(successes_per_task: Sequence[Sequence[bool]]) -> int:
    """The number of trials every task holds (refused: no tasks, or tasks with different counts)."""
    if isinstance(successes_per_task, (str, bytes)) or not isinstance(successes_per_task, Sequence):
        raise TypeError(
            f"successes_per_task must be a sequence of tasks, each a sequence of trial successes, got "
            f"{type(successes_per_task).__name__}"
        )
    if len(successes_per_task) == 0:
        raise ValueError("pass^k needs at least one task; got no tasks (successes_per_task is empty)")
    counts = sorted({len(trials) for trials in successes_per_task})
    if len(counts) > 1:
        raise ValueError(
            f"every task must have the same number of trials for pass^k; got trial counts {counts}: play each task "
            "the same number of times"
        )
    return counts[0]


def pass_hat_k(successes_per_task: Sequence[Sequence[bool]], k: int) -> float:
    """pass^k of tasks played ``n`` times each: the mean over tasks of ``C(c, k) / C(n, k)``, ``c`` the task's
    successful trials (see the module documentation).

    ``successes_per_task[i][t]`` is whether trial ``t`` of task ``i`` succeeded (tau2-bench: reward 1; here the
    episode's ``success``). ``k`` must be an int in ``1..n``; no tasks, or tasks with different numbers of trials,
    are refused with a ``ValueError``.
    """
    n = _trials(successes_per_task)
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int, got {k!r}")
    if k < 1:
        raise ValueError(f"k must be >= 1 (pass^1 is the success rate), got {k}")
    if k > n:
        raise ValueError(f"k must be at most the number of trials per task ({n}), got k={k}; play more trials")
    total = sum(Fraction(comb(sum(map(bool, trials)), k), comb(n, k)) for trials in successes_per_task)
    return float(total / len(successes_per_task))


def pass_hat_ks(successes_per_task: Sequence[Sequence[bool]]) -> dict[str, float]:
    """pass^1 .. pass^n of tasks played ``n`` times each, keyed ``"1"`` .. ``"n"`` (as in the evaluation
    metrics, whose keys are JSON strings); refused as :func:`pass_hat_k` refuses its tasks."""
    n = _trials(successes_per_task)
    if n == 0:
        raise ValueError("pass^k needs at least one trial per task; got tasks with 0 trials")
    return {str(k): pass_hat_k(successes_per_task, k) for k in range(1, n + 1)}
