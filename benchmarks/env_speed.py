"""Environment speed: expert agent turns per second, PettingZoo's performance benchmark, and the cost
of snapshot + restore.

    python benchmarks/env_speed.py --out env_speed.json [--episodes 2000] [--pz-env joy/mixed-v0]

Figures (all measured in this one run):

* ``expert_turns_per_s[env_id]``: agent turns per second of full expert episodes (parse, tools,
  database, scoring), tasks already generated (``warm``: best of three passes, all in
  ``warm_passes``) and including task generation on first use (``cold``). Goal: >= 5000 on a 2-core
  machine, so the env never limits an LLM.
* ``pettingzoo_turns_per_s``: ``pettingzoo.test.performance_benchmark`` (random text actions, 5 s); it
  mostly measures gymnasium's ``Text.sample``, so ``random_text`` also gives the env's own speed on the
  same kind of actions sampled beforehand (``turns_per_s``) and the cost of one sample (``sample_us``).
* ``left_out``: the env ids left out because an optional asset they need is not installed (tau2-bench's data),
  each with the line that says how to install it.
* ``snapshot_restore_us``: one snapshot + one restore, with a clean database (the usual case: the
  snapshot shares the image) and after a database write (the image is serialised and loaded back), and
  ``deepcopy_us``, the naive alternative (``copy.deepcopy`` of the env) for comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import platform
import re
import statistics
import sys
import time
from pathlib import Path

import joy_env
from joy_env.expert import expert_action

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when this file is loaded by path

from _common import write_json  # noqa: E402


def expert_speed(env_id: str, episodes: int, pool: int) -> dict[str, float]:
    env = joy_env.make(env_id, split="train")
    n = min(pool, env.num_tasks)
    turns = 0
    start = time.perf_counter()
    for i in range(n):  # cold: tasks are generated on first use
        env.reset(options={"task_index": i})
        turns += joy_env.run_expert_episode(env, expert_action)["turns"]
    cold = turns / (time.perf_counter() - start)
    rates = []
    for _ in range(3):  # the best of three passes: this machine is shared and noisy
        turns = 0
        start = time.perf_counter()
        for i in range(episodes // 3):
            env.reset(options={"task_index": i % n})
            turns += joy_env.run_expert_episode(env, expert_action)["turns"]
        rates.append(turns / (time.perf_counter() - start))
    return {"warm": max(rates), "warm_passes": rates, "cold": cold}


def pettingzoo_speed(env_id: str) -> float:
    from pettingzoo.test import performance_benchmark

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        performance_benchmark(joy_env.make(env_id))
    match = re.search(r"([\d.]+) turns per second", out.getvalue())
    return float(match.group(1)) if match else float("nan")


def random_text_speed(env_id: str, steps: int = 500) -> dict[str, float]:
    """Env turns per second on random text actions sampled beforehand, and the cost of sampling one
    (``gymnasium.spaces.Text.sample``, which dominates PettingZoo's benchmark)."""
    env = joy_env.make(env_id)
    env.reset(seed=0)
    space = env.action_space("master")
    space.seed(0)
    start = time.perf_counter()
    actions = [space.sample() for _ in range(steps)]
    sample_us = (time.perf_counter() - start) / steps * 1e6
    start = time.perf_counter()
    for action in actions:
        if not env.agents:
            env.reset()
        _, _, term, trunc, _ = env.last()
        env.step(None if term or trunc else action)
    return {"turns_per_s": steps / (time.perf_counter() - start), "sample_us": sample_us}


def _median_us(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


def snapshot_cost(repeats: int) -> dict[str, float]:
    env = joy_env.make("joy/ecommerce-v0", split="train")
    env.reset(seed=0)
    env.step(expert_action(env))

    def clean() -> None:
        env.restore(env.snapshot())

    clean_us = _median_us(clean, repeats)
    conn = env._dbs["ecommerce"]

    def dirty() -> None:
        conn.execute("UPDATE products SET stock = stock + 0 WHERE rowid = 1")  # any write dirties the image
        env.restore(env.snapshot())

    dirty_us = _median_us(dirty, max(20, repeats // 10))
    deep_us = _median_us(lambda: copy.deepcopy(env.snapshot()), max(20, repeats // 10))
    return {
        "clean_db_us": clean_us,
        "after_write_us": dirty_us,
        "deepcopy_us": deep_us,
        "db_bytes": len(env.world.images["ecommerce"]),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the figures as JSON to this file")
    parser.add_argument("--episodes", type=int, default=2000, help="warm expert episodes per env id")
    parser.add_argument("--pool", type=int, default=300, help="distinct tasks per env id")
    parser.add_argument("--pz-env", default="joy/mixed-v0", help="env id for PettingZoo's benchmark ('' to skip)")
    parser.add_argument("--repeats", type=int, default=500)
    args = parser.parse_args(argv)
    result: dict = {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "expert_turns_per_s": {},
    }
    for env_id in [e for e in joy_env.list_envs() if e.startswith("joy/")]:
        try:
            result["expert_turns_per_s"][env_id] = expert_speed(env_id, args.episodes, args.pool)
        except (ImportError, FileNotFoundError) as exc:  # an optional asset (tau2-bench's data) not installed
            result.setdefault("left_out", {})[env_id] = " ".join(str(exc).split())
            print(f"{env_id:<18} left out: {result['left_out'][env_id]}")
            continue
        s = result["expert_turns_per_s"][env_id]
        print(f"{env_id:<18} expert turns/s  warm {s['warm']:>8.0f}   cold {s['cold']:>8.0f}")
    result["min_warm_turns_per_s"] = min(s["warm"] for s in result["expert_turns_per_s"].values())
    print(f"slowest env id (warm): {result['min_warm_turns_per_s']:.0f} turns/s (goal >= 5000)")
    cost = snapshot_cost(args.repeats)
    result["snapshot_restore_us"] = cost
    print(
        f"snapshot+restore: {cost['clean_db_us']:.1f} us (clean db), {cost['after_write_us']:.1f} us (after a write,"
        f" {cost['db_bytes'] / 1e6:.2f} MB db); deepcopy of a snapshot {cost['deepcopy_us']:.1f} us"
    )
    if args.pz_env:
        result["pettingzoo_turns_per_s"] = {args.pz_env: pettingzoo_speed(args.pz_env)}
        rnd = random_text_speed(args.pz_env)
        result["random_text"] = {args.pz_env: rnd}
        print(
            f"pettingzoo performance_benchmark ({args.pz_env}): {result['pettingzoo_turns_per_s'][args.pz_env]:.0f}"
            f" turns/s, bound by sampling random 16k-char Text actions ({rnd['sample_us']:.0f} us each); the env"
            f" alone on pre-sampled random text: {rnd['turns_per_s']:.0f} turns/s"
        )
    write_json(result, args.out, announce=True)
    return result


if __name__ == "__main__":
    main()
