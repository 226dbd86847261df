"""Scoring a finished episode: the database state of the gold solution and the reward breakdown.

:func:`start_image` is an agent's database at the start of a task (the pristine one, or after the domain's
``prepare`` step); :func:`gold_db` replays a task's gold calls on a scratch copy of it (once per world, cached) and
returns what they change; :class:`~joy_env.env.JoyEnv` compares its own databases with it.
:func:`episode_breakdown` turns the accuracy checks and the episode's turns and calls into R = R_A + R_F - R_E
and one record per agent turn with its share of R_F and R_E (the rules are in :mod:`joy_env.rewards`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from joy_env import database
from joy_env.core import Task, ToolContext, ToolError
from joy_env.episode import Episode
from joy_env.rewards import RewardConfig
from joy_env.spec import World

__all__ = ["episode_breakdown", "gold_db", "start_image"]


def start_image(world: World, task: Task, agent: str) -> bytes:
    """The image of ``agent``'s database at the start of ``task``: the pristine one, or, for a domain with a
    ``prepare`` step (:class:`~joy_env.core.Domain`), the pristine one after it (computed once per world and
    task). Rows that ``prepare`` changes stay in the change log, so they are compared like the episode's."""
    domain = world.spec.domain(agent)
    if domain is None or domain.prepare is None:
        return world.images[agent]
    key = ("start_image", task.task_id, task.query, agent)
    cached = world.cache.get(key)
    if cached is not None:
        return cached
    scratch = database.load(world.images[agent])
    try:
        domain.prepare(scratch, task)
        image = database.image(scratch)
    finally:
        scratch.close()
    with world.lock:
        world.cache[key] = image
    return image


def gold_db(world: World, task: Task, agent: str, audit: Mapping[str, Any]) -> tuple[set, dict] | list:
    """Rows changed by the task's starting state and the gold calls of ``agent`` (or a full dump for unaudited
    databases)."""
    key = ("gold_db", task.task_id, task.query, agent)
    cached = world.cache.get(key)
    if cached is not None:
        return cached
    tools = world.tools.get(agent, {})
    calls = [c for s in task.route if s.agent == agent for turn in s.turns for c in turn]
    writes = any(tools[c["name"]].writes for c in calls if c["name"] in tools)
    start = start_image(world, task, agent)
    if not writes and audit and start is world.images[agent]:
        result: Any = (set(), {})
    else:
        scratch = database.load(start)
        ctx = ToolContext(db=scratch, task=task)
        for c in calls:
            tool = tools.get(c["name"])
            if tool is None:
                continue
            try:
                tool.fn(ctx, **c["arguments"])
            except ToolError:
                pass  # gold solutions may include a call that is refused on purpose
        if audit:
            keys = database.changed_keys(scratch, audit)
            result = (keys, database.rows(scratch, audit, keys))
        else:
            result = database.full_dump(scratch)
        scratch.close()
    with world.lock:
        world.cache[key] = result
    return result


def episode_breakdown(
    ep: Episode, cfg: RewardConfig, checks: dict[str, float], truncated: bool, unpaid: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The reward breakdown of the finished episode ``ep`` with accuracy ``checks`` (``infos[agent]["episode"]``).
    Turns of the agents in ``unpaid`` (a dialogue's customer) cost no efficiency; the gold solution's turns and
    calls are the task's (``meta["gold_turns"]`` / ``meta["gold_calls"]`` where its route does not give them,
    e.g. a dialogue)."""
    task = ep.task
    gold_turns = int(task.meta.get("gold_turns", task.gold_turns))
    gold_calls = int(task.meta.get("gold_calls", task.gold_calls))
    answered = ep.final_answer is not None and not truncated  # a premature end scores R_A = 0, as in tau2
    r_a = cfg.accuracy(checks, answered)
    success = answered and all(v >= 1.0 - 1e-9 for v in checks.values())
    n = len(ep.nodes)
    valid = sum(1 for nd in ep.nodes if nd["format_ok"])
    r_f = cfg.format_weight * valid / n if n else 0.0
    paid = sum(1 for nd in ep.nodes if nd["agent"] not in unpaid)
    extra_turns = max(0, paid - gold_turns)
    extra_calls = max(0, ep.n_calls - gold_calls)
    raw_e = cfg.turn_cost * extra_turns + cfg.call_cost * extra_calls
    r_e = min(cfg.efficiency_cap, raw_e)
    scale = r_e / raw_e if raw_e > 0 else 0.0
    calls_seen = turns_seen = 0
    node_records = []
    for nd in ep.nodes:
        cost = 0.0
        if nd["agent"] not in unpaid:
            cost = cfg.turn_cost if turns_seen >= gold_turns else 0.0
            turns_seen += 1
            before, calls_seen = calls_seen, calls_seen + nd["calls"]
            cost += cfg.call_cost * max(0, calls_seen - max(gold_calls, before))
        node_records.append(dict(nd, R_F=cfg.format_weight * float(nd["format_ok"]) / n, R_E=cost * scale))
    total = cfg.accuracy_weight * r_a + r_f - r_e
    return {
        "R": total,
        "R_A": r_a,
        "R_F": r_f,
        "R_E": r_e,
        "success": success,
        "accuracy": checks,
        "truncated": truncated,
        "termination": ep.termination,
        "final_answer": ep.final_answer,
        "turns": n,
        "gold_turns": gold_turns,
        "calls": ep.n_calls,
        "gold_calls": gold_calls,
        "format_valid_rate": valid / n if n else 0.0,
        "tool_errors": sum(nd["tool_errors"] for nd in ep.nodes),
        "agents_called": list(ep.called),
        "task_id": task.task_id,
        "domain": task.domain,
        "not_scored": list(task.meta.get("not_scored", ())),
        "nodes": node_records,
    }
