"""What a τ² customer costs per turn in each ``customer_isolation`` mode of ``joy/tau2-v0``.

    python benchmarks/customer_isolation.py --out benchmarks/results/customer_isolation.json [--turns 300]

One customer's view of a telecom task (the largest views: the phone's tools), answered by a customer that returns
at once, so that the figures are the isolation's own cost (all measured in this one run):

* ``per_turn_ms``: median and mean milliseconds of one turn called directly, in a worker thread
  (``customer_isolation="thread"``) and in the env's worker process (``"process"``: the view and the answer
  through a pipe);
* ``worker_start_ms``: median of 10 first turns of a new worker process (a fork of this process, or a spawn where
  the platform has no fork), and this process's peak memory, which a fork copies on write;
* ``ratio_process_to_thread``: the process turn's median over the thread turn's.
"""

from __future__ import annotations

import argparse
import pickle
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import joy_env
from joy_env.dialogue import CustomerProcess, call_before, start_method

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when this file is loaded by path

from _common import write_json  # noqa: E402


def answer(view: Any) -> str:
    """A customer that answers at once (module level, so that a spawned worker can unpickle it)."""
    return "<answer>fine</answer>"


def telecom_view() -> dict[str, Any]:
    """The first view an in-env customer receives on telecom's first test task."""
    views: list[dict[str, Any]] = []

    def keep(view: dict[str, Any]) -> str:
        views.append(view)
        return "<answer>thanks ###STOP###</answer>"

    env = joy_env.make("joy/tau2-v0", domain="telecom", protocol="interactive", customer=keep, split="test")
    env.reset(options={"task_index": 0})
    env.close()
    return views[0]


def timed(call: Callable[[], Any], n: int) -> dict[str, float]:
    """Median and mean milliseconds of ``n`` calls."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return {"median": statistics.median(times) * 1e3, "mean": statistics.mean(times) * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=300, help="turns timed per mode")
    parser.add_argument("--out", help="write the figures to this JSON file")
    args = parser.parse_args()
    if args.turns < 1:
        parser.error(f"--turns must be >= 1, got {args.turns}")
    view = telecom_view()

    def far() -> float:
        return time.monotonic() + 60

    worker = CustomerProcess(answer)
    worker.ask(view, far(), 60)
    per_turn = {
        "direct": timed(lambda: answer(view), args.turns),
        "thread": timed(lambda: call_before(answer, view, far(), 60), args.turns),
        "process": timed(lambda: worker.ask(view, far(), 60), args.turns),
    }
    starts = []
    for _ in range(10):
        worker.close()
        start = time.perf_counter()
        worker.ask(view, far(), 60)
        starts.append(time.perf_counter() - start)
    worker.close()
    result = {
        "view_bytes": len(pickle.dumps(view)),
        "start_method": start_method(),
        "per_turn_ms": per_turn,
        "worker_start_ms": statistics.median(starts) * 1e3,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "ratio_process_to_thread": per_turn["process"]["median"] / per_turn["thread"]["median"],
    }
    for mode, t in per_turn.items():
        print(f"{mode:8s} {t['median']:.3f} ms a turn (median; mean {t['mean']:.3f})")
    print(
        f"worker start ({result['start_method']}, a {result['peak_rss_mib']:.0f} MiB process): "
        f"{result['worker_start_ms']:.1f} ms; process / thread: {result['ratio_process_to_thread']:.2f}"
    )
    write_json(result, args.out, announce=True)


if __name__ == "__main__":
    main()
