"""Core types shared by the environment, the domains and the reward module.

A *domain* contributes tools to one sub-agent, optionally a SQLite database, and a task generator.
A *task* is a user query for the master with its **gold solution**: the route through sub-agents
(:class:`SubTask`), the tool calls each sub-agent makes, and the final answer.

Everything here is plain data; the environment (:mod:`joy_env.env`) executes it.
"""

from __future__ import annotations

import numbers
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

SPLITS = ("train", "validation", "test")
SUB_AGENTS = ("qa", "ecommerce", "general", "math")
AGENTS = ("master", *SUB_AGENTS)


SEED_MODULUS = 2**63
"""Data seeds (``joy_env.make(seed=...)``) are reduced modulo this (SQLite's integers are 64-bit signed)."""


def check_seed(seed: Any, what: str = "seed") -> int:
    """``seed`` as an int, or ``ValueError`` unless it is an integer >= 0 (Python or numpy; not a bool)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(
            f"{what} must be an int >= 0, got {seed!r}; negative and non-integer seeds are refused "
            "(derive one with e.g. abs(seed) or seed % 2**63)"
        )
    return int(seed)


def check_split(split: Any, splits: tuple[str, ...] = SPLITS) -> None:
    """Raise ``ValueError`` unless ``split`` is one of ``splits`` (default :data:`SPLITS`)."""
    if split not in splits:
        raise ValueError(f"unknown split {split!r}; expected one of {splits}")


def check_index(split: str, index: Any, size: int) -> int:
    """``index`` as an int, or ``ValueError`` unless ``0 <= index < size`` (task sources use it)."""
    if isinstance(index, bool) or not isinstance(index, numbers.Integral) or not 0 <= index < size:
        raise ValueError(f"index {index!r} out of range for split {split!r}: expected 0 <= index < {size}")
    return int(index)


class ToolError(Exception):
    """A tool refused the call (bad id, business rule, division by zero...).

    Raised by tool functions; the environment turns it into an error observation for the calling
    agent. The message is shown to the agent, so it should say what was wrong and what is allowed.
    """


@dataclass
class ToolContext:
    """What a tool function can see besides its arguments.

    Attributes:
        db: the domain's live SQLite connection, or ``None`` for domains without a database.
        task: the task of the current episode (tools must not use its gold fields).
    """

    db: sqlite3.Connection | None
    task: Task | None = None


@dataclass(frozen=True)
class Tool:
    """A callable tool with a JSON schema.

    ``fn(ctx, **arguments)`` receives arguments already validated against ``parameters`` and returns
    a JSON-serialisable result, or raises :class:`ToolError`.

    Attributes:
        name: unique tool name within an agent's tool set.
        description: one-line description shown to the agent.
        parameters: JSON schema of the arguments (``{"type": "object", "properties": ..., "required": ...}``).
        fn: the implementation.
        writes: ``True`` if the tool may modify the database.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    fn: Callable[..., Any]
    writes: bool = False

    def schema(self) -> dict[str, Any]:
        """The OpenAI / Hugging Face ``tools=`` form of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@dataclass(frozen=True)
class SubTask:
    """One gold sub-agent invocation: the master calls ``agent`` with ``query``.

    Attributes:
        agent: the sub-agent the master must call (``qa``, ``ecommerce``, ``general``, ``math``).
        query: the gold sub-query (the ``query`` argument of ``call_agent``).
        turns: the expert's tool-call turns; each turn is a tuple of ``{"name", "arguments"}`` calls
            run in order. The expert answers after the last turn.
        answer: the sub-agent's gold final answer, returned to the master as the tool result.
        required_calls: calls this agent must make, in BFCL acceptable-values form
            ``{name: {arg: [acceptable values...]}}`` (``""`` in a list: the argument may be omitted).
            Checked against the calls of this agent that executed without error.
        strict_calls: if ``True`` the executed calls of this agent must match ``required_calls``
            one to one (BFCL semantics, no extra calls); otherwise extra calls are allowed and only
            cost efficiency.
    """

    agent: str
    query: str
    turns: tuple[tuple[Mapping[str, Any], ...], ...] = ()
    answer: str = ""
    required_calls: tuple[Mapping[str, Any], ...] = ()
    strict_calls: bool = False


@dataclass(frozen=True)
class Task:
    """A user query with its gold solution.

    Attributes:
        task_id: unique and stable, e.g. ``"ecommerce/test/17"``.
        domain: ``ecommerce`` | ``general`` | ``qa`` | ``math`` | ``mixed`` (or a custom name).
        query: the user's request to the master.
        answer: the master's gold final answer.
        answer_type: how the master's final answer is scored (see :func:`joy_env.rewards.score_answer`):
            ``math`` numeric equality, ``qa`` normalised EM / token F1, ``facts`` every string in
            ``facts`` must appear in the answer, ``none`` the answer is not scored; ``tau2``
            (tau2-bench tasks): R_A is the product of the checks of the task's reward basis
            (``meta["reward_basis"]``: the database, the state assertions, the gold actions, the ``facts``
            communicated), with no route or call check (see :mod:`joy_env.domains.tau2`).
        route: the gold sub-agent invocations, in order.
        facts: for ``answer_type="facts"`` or ``"tau2"``: strings the final answer must contain.
        template: name of the generator template (for analysis and split design).
        tools: per-task function schemas for an agent (``{agent: (schema, ...)}``) that replace that
            agent's own tools in this task; they have no implementation: the env records each call and
            replies with a neutral result (BFCL tasks).
        meta: free-form information (difficulty, number of steps, ...). Never shown to agents.
    """

    task_id: str
    domain: str
    query: str
    answer: str
    answer_type: str
    route: tuple[SubTask, ...]
    facts: tuple[str, ...] = ()
    template: str = ""
    tools: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def gold_turns(self) -> int:
        """Agent turns of the gold solution: master calls + final answer + each sub-agent's turns."""
        return len(self.route) + 1 + sum(len(s.turns) + 1 for s in self.route)

    @property
    def gold_calls(self) -> int:
        """Tool calls of the gold solution, ``call_agent`` included."""
        return len(self.route) + sum(len(t) for s in self.route for t in s.turns)


class TaskSource(Protocol):
    """Generates tasks by index, deterministically.

    ``size(split)`` tasks exist per split; ``task(split, index)`` builds one (``0 <= index < size``).
    ``dbs`` maps a domain name to a pristine read-only SQLite connection of that domain's database.
    :class:`TaskSourceBase` implements both with the argument checks; any object with these two methods works.
    """

    def size(self, split: str) -> int: ...

    def task(self, split: str, index: int) -> Task: ...


class TaskSourceBase(ABC):
    """A :class:`TaskSource` whose ``size`` and ``task`` check their arguments.

    A subclass sets ``sizes`` (``{split: number of tasks}`` for every split of ``splits``) and implements
    :meth:`build_task`. ``splits`` is :data:`SPLITS` unless the subclass names its own (a source with other
    split names, e.g. tau2-bench's ``train``/``test``/``all``, sets it, and its :class:`EnvSpec` names the same
    ones). ``task`` raises ``ValueError`` for an unknown split or an index out of range, so ``build_task``
    only ever sees a valid split and an ``int`` index in range.
    """

    sizes: Mapping[str, int]
    splits: tuple[str, ...] = SPLITS

    def size(self, split: str) -> int:
        """Number of tasks of ``split``."""
        check_split(split, self.splits)
        return self.sizes[split]

    def task(self, split: str, index: int) -> Task:
        """Task ``index`` of ``split`` (deterministic in the source's seed, the split and the index)."""
        return self.build_task(split, check_index(split, index, self.size(split)))

    @abstractmethod
    def build_task(self, split: str, index: int) -> Task:
        """Build task ``index`` of ``split`` (both already checked)."""


@dataclass(frozen=True)
class Domain:
    """A sub-agent's tool set, with its optional database.

    Attributes:
        agent: the sub-agent that owns the tools (one of :data:`SUB_AGENTS` or a custom name).
        tools: the tools.
        build_db: ``seed -> sqlite3.Connection`` building the pristine database, or ``None``.
        audit: ``{table: (primary key columns...)}`` of tables that tools may modify. The environment
            tracks changed rows in these tables so that comparing the final database with the gold
            one costs as much as the rows changed. Tables not listed must never be written.
        system_prompt: the agent's role description, put at the start of its conversation.
        prepare: ``prepare(conn, task)`` sets a task's starting state on a fresh copy of the pristine
            database (tau2-bench telecom's initialization actions), or ``None`` when every task starts from
            the pristine database. The env computes each task's starting image once per world and replays the
            gold solution from it.
        env_assertions: ``env_assertions(conn, assertions) -> bool`` evaluates a task's state assertions
            (``task.meta["env_assertions"]``, in tau2-bench's form) on a scratch copy of the final database:
            ``True`` when every one holds; ``None`` for domains without them.
    """

    agent: str
    tools: tuple[Tool, ...]
    build_db: Callable[[int], sqlite3.Connection] | None = None
    audit: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    system_prompt: str = ""
    prepare: Callable[[sqlite3.Connection, Task], None] | None = None
    env_assertions: Callable[[sqlite3.Connection, Sequence[Mapping[str, Any]]], bool] | None = None
