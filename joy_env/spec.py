"""The types an environment id is built from, shared by :mod:`joy_env.registry` and :mod:`joy_env.env`.

An :class:`EnvSpec` names the sub-agents' domains (tools and databases) and a task-source factory
(:data:`TaskFactory`); a :class:`World` is the read-only part built from a spec once per process (pristine
database images, the task source, the tools) and shared by every env made from it. Both are re-exported by
:mod:`joy_env.registry`, the module that registers specs and makes envs.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from joy_env.core import SPLITS, Domain, TaskSource, Tool

__all__ = ["CUSTOMER_ISOLATIONS", "Dialogue", "EnvSpec", "TaskFactory", "World", "check_customer_run"]

CUSTOMER_ISOLATIONS = ("thread", "process")
"""Where an in-env customer runs (:attr:`Dialogue.customer_isolation`): a worker thread or a worker process."""

TaskFactory = Callable[..., TaskSource]
"""``factory(seed, dbs, **source_kwargs) -> TaskSource`` where ``dbs`` maps an agent name to the
pristine read-only connection of its domain's database."""


def check_customer_run(isolation: Any, timeout_s: Any) -> None:
    """A one-line ``ValueError`` unless ``isolation`` is one of :data:`CUSTOMER_ISOLATIONS` and ``timeout_s`` a
    number of seconds > 0 (:class:`Dialogue`'s ``customer_isolation`` and ``customer_timeout_s``)."""
    if isolation not in CUSTOMER_ISOLATIONS:
        raise ValueError(
            f"customer_isolation must be one of {', '.join(map(repr, CUSTOMER_ISOLATIONS))}, got {isolation!r}"
        )
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < math.inf:
        raise ValueError(f"customer_timeout_s must be a number of seconds > 0, got {timeout_s!r}")


@dataclass(frozen=True)
class Dialogue:
    """The request comes from a user agent (the *customer*) who converses with the team, as in tau2-bench's
    interactive protocol (see :mod:`joy_env.env`, "Dialogue").

    Attributes:
        system_prompt: ``system_prompt(task) -> str``: the customer's instructions for a task.
        tools: the customer's own tools (tau2 telecom: the phone's); they run on ``db_agent``'s database.
        db_agent: the sub-agent whose database the customer's tools use (``None`` without tools).
        policy: ``policy(view) -> str`` plays the customer inside the env (``view``: ``{"messages", "tools",
            "task"}``, the customer's conversation, its tool schemas and the task); ``None`` makes the customer
            an agent of the env (``"customer"`` in ``possible_agents``), played like any other.
        greeting: the service side's first message, shown to the customer before it speaks.
        user_stops: texts that end the conversation when the customer's message holds one (a user stop).
        agent_stop: a text that ends the conversation when the service side's message holds it (an agent stop).
        max_errors: tool errors (both sides) that end the conversation prematurely.
        max_customer_turns: turns an in-env customer may take in a row (tool calls, format errors) before its
            message; past it the conversation ends prematurely (a customer that never answers).
        customer_timeout_s: the seconds an in-env customer (a ``policy`` other than ``expert``) has for one turn,
            the re-asks after its malformed replies included; past them the conversation ends prematurely
            (``customer_error``), as it does when the customer raises (``SystemExit`` included).
        customer_isolation: where such a customer runs: ``"thread"`` (default), a worker thread of the env's
            process, left behind at the deadline; it shares the process (its state is there to read) but cannot
            be stopped inside a C call that keeps the GIL (a catastrophic regular expression), nor survive its
            ``os._exit()``. ``"process"``: a worker process of the env's own, killed at the deadline, so the
            deadline always holds; the customer's state stays in the worker (see :mod:`joy_env.dialogue`).
        expert: the customer's turn in expert episodes (``expert(view) -> str``, the same view as ``policy``),
            used by :func:`joy_env.expert.expert_action` when the customer is an agent of the env.
        service_expert: ``service_expert(task, turns_done) -> str``: the expert's turn for the agent holding the
            conversation, after ``turns_done`` turns of its own (:func:`joy_env.expert.expert_action`).
    """

    system_prompt: Callable[[Any], str]
    tools: tuple[Tool, ...] = ()
    db_agent: str | None = None
    policy: Callable[[Mapping[str, Any]], str] | None = None
    greeting: str = "Hi! How can I help you today?"
    user_stops: tuple[str, ...] = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
    agent_stop: str = "###STOP###"
    max_errors: int = 10
    max_customer_turns: int = 20
    customer_timeout_s: float = 60.0
    expert: Callable[[Mapping[str, Any]], str] | None = None
    service_expert: Callable[[Any, int], str] | None = None
    agent: str = "customer"
    customer_isolation: str = "thread"

    def __post_init__(self) -> None:
        check_customer_run(self.customer_isolation, self.customer_timeout_s)


@dataclass(frozen=True)
class EnvSpec:
    """Everything needed to build an environment id.

    Attributes:
        env_id: the id passed to :func:`~joy_env.registry.make`, e.g. ``"acme/pharmacy-v0"``.
        domains: one :class:`~joy_env.core.Domain` per sub-agent, in the order of ``possible_agents``.
        tasks: task-source factory, called as ``tasks(seed, dbs, **source_kwargs)``.
        source_kwargs: extra keyword arguments of ``make`` forwarded to ``tasks`` (e.g. ``path``).
        description: one line for :func:`~joy_env.registry.list_envs`.
        splits: the split names ``make`` accepts for this spec.
        variant: ``variant(kwargs) -> EnvSpec | None``, called by ``make`` with its keyword arguments before
            anything else: it returns the spec to build instead (another database and tools, e.g. the
            ``source="tau2"`` data of ``joy/ecommerce-v0``) or ``None`` to build this one.
        master_prompt: the master's system prompt, or ``""`` for the default one
            (:data:`joy_env.env.MASTER_PROMPT`, which describes the built-in sub-agents).
        dialogue: how a customer converses with the team (:class:`Dialogue`), or ``None``: the request is one
            message and the master's answer ends the episode.
    """

    env_id: str
    domains: tuple[Domain, ...]
    tasks: TaskFactory
    source_kwargs: tuple[str, ...] = ()
    description: str = ""
    splits: tuple[str, ...] = SPLITS
    variant: Callable[[Mapping[str, Any]], EnvSpec | None] | None = None
    master_prompt: str = ""
    dialogue: Dialogue | None = None

    @property
    def agents(self) -> tuple[str, ...]:
        customer = (self.dialogue.agent,) if self.dialogue is not None and self.dialogue.policy is None else ()
        return ("master", *(d.agent for d in self.domains), *customer)

    def domain(self, agent: str) -> Domain | None:
        """The domain of sub-agent ``agent`` (``None`` for the master or an unknown name)."""
        return next((d for d in self.domains if d.agent == agent), None)


@dataclass
class World:
    """The read-only part of an environment, shared by every env made from the same spec and kwargs."""

    spec: EnvSpec
    seed: int
    tasks: TaskSource
    images: dict[str, bytes]
    """Pristine database image per agent (domains without a database are absent)."""
    pristine: dict[str, sqlite3.Connection]
    """Read-only connections to the pristine databases (used to compare final states)."""
    tools: dict[str, dict[str, Tool]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    cache: dict[Any, Any] = field(default_factory=dict)
    """Generated tasks and gold database states, filled on first use."""
