"""torch's CPU thread count following the cores that other processes leave free: the project's thread policy.

torch's CPU kernels run on an OpenMP thread pool, one thread per core by default. A thread that finishes its share
of a product waits at the barrier for the others, spinning for a while before it sleeps. On a machine where another
job holds one of the cores, the thread that shares that core is descheduled, and every product waits for it: a
two-thread product falls to a fraction of its quiet rate.

Two remedies, measured by ``benchmarks/team_throughput.py`` (docs/results.md, "Rollouts at the CPU's limit"):

* ``OMP_WAIT_POLICY=PASSIVE`` (waiting threads sleep at once) keeps most of the rate on a busy machine, but on a
  quiet one every product pays for waking its threads, which costs most where products are short (bfloat16);
* fewer threads when fewer cores are free: one thread never waits for another. This is what the project does.

:class:`ThreadGovernor` reads, at most once per ``interval_s``, how much CPU time the machine's other processes
used since its last reading (``/proc/stat`` for the cores this process may run on, less this process's own time
from ``/proc/self/stat``), and sets ``torch.set_num_threads`` to the cores they left free: never more than the
count torch had when the governor started (torch's default, ``OMP_NUM_THREADS`` or the user's own
``torch.set_num_threads``), never fewer than one. :func:`follow_free_cores` is the process's governor; the samplers
call it before each step (:class:`~joy_agents.sampling.continuous.ContinuousSampler`,
:class:`~joy_agents.sampling.generate.GenerateSampler`) and the RL trainers before each update, so ``joy-train``,
``joy-eval``, the benchmarks and a user's own loop over a sampler all follow it. Between calls nothing runs: there
is no background thread (a thread count set from another thread would not apply to the one running the products).

``JOY_THREAD_POLICY=off`` in the environment turns it off (the thread count stays what it is). Where ``/proc`` is
missing (not Linux) it does nothing. Not done, on purpose: binding threads to cores (``OMP_PROC_BIND``), which
would keep a thread on a core that another job has taken.
"""

from __future__ import annotations

import os
import time

import torch

__all__ = ["OFF_SWITCH", "ThreadGovernor", "busy_cores", "follow_free_cores"]

OFF_SWITCH = "JOY_THREAD_POLICY"
"""``JOY_THREAD_POLICY=off`` in the environment: the thread count is left alone."""

_IDLE_FIELDS = (3, 4)
"""The idle and iowait columns of a ``/proc/stat`` cpu line (after its name)."""


def _cpu_times(cpus: set[int] | None) -> tuple[int, int] | None:
    """``(busy, total)`` clock ticks of the cores ``cpus`` (None: all) since boot, or None without ``/proc/stat``."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    busy = total = 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or not name[3:].isdigit():
            continue
        if cpus is not None and int(name[3:]) not in cpus:
            continue
        ticks = [int(v) for v in rest.split()[:8]]
        total += sum(ticks)
        busy += sum(ticks) - sum(ticks[i] for i in _IDLE_FIELDS)
    return (busy, total) if total else None


def _own_ticks() -> int | None:
    """This process's user and system clock ticks (all its threads), or None without ``/proc/self/stat``."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))


def busy_cores(before: tuple[int, int, int], after: tuple[int, int, int], cores: int) -> float:
    """How many of ``cores`` cores other processes kept busy between two readings ``(busy, total, own)`` of the
    cores' busy and total ticks and this process's own ticks (0 when no time passed)."""
    elapsed = after[1] - before[1]
    if elapsed <= 0:
        return 0.0
    others = (after[0] - before[0]) - (after[2] - before[2])
    return max(0.0, others * cores / elapsed)


class ThreadGovernor:
    """Sets torch's thread count to the cores other processes leave free (see the module documentation).

    ``cap``: the most threads (default: torch's count when the governor is made); ``interval_s``: the least time
    between two readings. :attr:`threads` is the count it last set (or found)."""

    def __init__(self, cap: int | None = None, interval_s: float = 1.0) -> None:
        self.cap = cap if cap is not None else torch.get_num_threads()
        self.interval_s = interval_s
        self.threads = torch.get_num_threads()
        try:
            self._cpus: set[int] | None = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self._cpus = None
        self._cores = len(self._cpus) if self._cpus else (os.cpu_count() or 1)
        self._last = self._reading()
        self._at = time.monotonic()

    def _reading(self) -> tuple[int, int, int] | None:
        times, own = _cpu_times(self._cpus), _own_ticks()
        return None if times is None or own is None else (*times, own)

    def update(self) -> int:
        """Read the machine if ``interval_s`` has passed since the last reading, and set torch's thread count to
        the cores left free (capped); the thread count now."""
        now = time.monotonic()
        if torch.get_num_threads() != self.threads:  # set by someone else since: their count is the new cap
            self.cap = self.threads = torch.get_num_threads()
        if self._last is None or now - self._at < self.interval_s:
            return self.threads
        reading = self._reading()
        if reading is None:
            return self.threads
        others = busy_cores(self._last, reading, self._cores)
        self._last, self._at = reading, now
        wanted = max(1, min(self.cap, self._cores - int(others + 0.5)))
        if wanted != self.threads:
            torch.set_num_threads(wanted)
            self.threads = wanted
        return self.threads


_governor: ThreadGovernor | None = None


def follow_free_cores() -> int | None:
    """The process's :class:`ThreadGovernor`, made on first use and updated (cheap between its readings): torch's
    thread count now, or None when ``JOY_THREAD_POLICY=off``."""
    global _governor
    if os.environ.get(OFF_SWITCH, "").strip().lower() == "off":
        return None
    if _governor is None:
        _governor = ThreadGovernor()
    return _governor.update()
