"""The accuracy checks of a finished episode, the factors of R_A (see :mod:`joy_env.rewards`): the route, the
required calls, the final database against the gold one and the final answer; for tau2-bench tasks, the checks
of the task's reward basis instead (the database, the state assertions, the gold actions, the facts
communicated). :class:`~joy_env.env.JoyEnv` calls :func:`accuracy_checks` when an episode ends."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from joy_env import database
from joy_env.episode import Episode
from joy_env.rewards import score_answer, score_calls, score_communicate, score_facts, score_tau2_actions
from joy_env.scoring import gold_db
from joy_env.spec import Dialogue, World

__all__ = ["FinalState", "accuracy_checks", "communicated", "db_matches", "env_assertions_hold", "tau2_checks"]


@dataclass(frozen=True)
class FinalState:
    """What the checks read of a finished episode."""

    world: World
    episode: Episode
    dbs: Mapping[str, sqlite3.Connection]
    """Each agent's live database."""
    audits: Mapping[str, Mapping[str, tuple[str, ...]]]
    """Each agent's audited tables (:attr:`joy_env.core.Domain.audit`)."""
    unchanged: Mapping[str, bool]
    """Each agent's database is known to hold the pristine image still (the comparison is then free)."""
    schemas: Callable[[str], list[dict[str, Any]]]
    """An agent's tool schemas in the episode."""
    dialogue: Dialogue | None = None


def db_matches(state: FinalState) -> bool:
    """Whether every agent's database equals the gold solution's (only the rows either of them changed are read)."""
    task = state.episode.task
    for agent, conn in state.dbs.items():
        audit = state.audits[agent]
        gold = gold_db(state.world, task, agent, audit)
        if not audit:
            if database.full_dump(conn) != gold:
                return False
            continue
        gold_keys, gold_rows = gold
        keys = set() if state.unchanged[agent] else database.changed_keys(conn, audit)
        pristine = state.world.pristine[agent]
        for key in keys | gold_keys:
            expected = gold_rows[key] if key in gold_keys else database.fetch_row(pristine, audit, key)
            if database.fetch_row(conn, audit, key) != expected:
                return False
    return True


def env_assertions_hold(state: FinalState) -> float:
    """1.0 when every state assertion of the task holds on the final database of the agent that owns the task's
    tools (its domain's ``env_assertions``, on a scratch copy: tau2's assertion functions sync the state as they
    run)."""
    task = state.episode.task
    assertions = task.meta.get("env_assertions") or ()
    agent = task.route[0].agent if task.route else ""
    domain, conn = state.world.spec.domain(agent), state.dbs.get(agent)
    if domain is None or domain.env_assertions is None or conn is None:
        return 0.0 if assertions else 1.0
    scratch = database.load(database.image(conn))
    try:
        return float(domain.env_assertions(scratch, assertions))
    finally:
        scratch.close()


def communicated(state: FinalState, facts: tuple[str, ...]) -> float:
    """tau2's communicate check: every fact in one of the service side's messages to the customer (in a dialogue:
    the greeting and every message; else the master's final answer)."""
    ep = state.episode
    if state.dialogue is None:
        return score_communicate(ep.final_answer, facts) if ep.final_answer is not None else 0.0
    said = [state.dialogue.greeting, *ep.said]
    return float(all(any(score_communicate(text, [fact]) for text in said) for fact in facts))


def tau2_checks(state: FinalState) -> dict[str, float]:
    """tau2-bench's reward: one check per entry of the task's reward basis (R_A is their product)."""
    ep, task = state.episode, state.episode.task
    checks: dict[str, float] = {}
    for basis in task.meta.get("reward_basis", ("DB", "COMMUNICATE")):
        if basis == "DB":
            checks["db"] = float(db_matches(state))
        elif basis == "ENV_ASSERTION":
            checks["env_assertions"] = env_assertions_hold(state)
        elif basis == "ACTION":
            calls = [c for made in ep.attempted.values() for c in made]
            checks["actions"] = score_tau2_actions(calls, task.meta.get("actions") or ())
        elif basis == "COMMUNICATE":
            checks["communicate"] = communicated(state, task.facts)
    return checks


def accuracy_checks(state: FinalState) -> dict[str, float]:
    """The accuracy checks of the finished episode (each in [0, 1]; R_A is their product)."""
    ep, task = state.episode, state.episode.task
    if task.answer_type == "tau2":  # tau2-bench's rule: the checks of the task's reward basis only
        return tau2_checks(state)
    checks: dict[str, float] = {}
    checks["route"] = float(all(s.agent in ep.called for s in task.route))
    call_score = 1.0
    for agent in {s.agent for s in task.route}:
        required = [c for s in task.route if s.agent == agent for c in s.required_calls]
        if not required:
            continue
        strict = any(s.strict_calls for s in task.route if s.agent == agent)
        score = score_calls(ep.executed.get(agent, []), required, state.schemas(agent), allow_extra=not strict)
        call_score = min(call_score, score)
    checks["calls"] = call_score
    checks["db"] = float(db_matches(state))
    answer = ep.final_answer
    if answer is None:
        checks["answer"] = 0.0
    elif task.answer_type == "facts":
        checks["answer"] = score_facts(answer, task.facts)
    else:
        checks["answer"] = score_answer(answer, task.answer, task.answer_type)
    return checks
