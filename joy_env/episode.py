"""The running state of one :class:`~joy_env.env.JoyEnv` episode, and the snapshot that captures it.

An :class:`Episode` holds the task, the stack of conversation :class:`Frame` s (the master's at the bottom, the
sub-agent it called on top), every agent's context, the per-turn node records and the calls made so far;
``copy()`` is what :meth:`JoyEnv.snapshot <joy_env.env.JoyEnv.snapshot>` keeps. An :class:`EnvSnapshot` adds
the PettingZoo bookkeeping, the episode random generator and the databases.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from joy_env.core import Task

__all__ = ["EnvSnapshot", "Episode", "Frame"]


@dataclass
class Frame:
    agent: str
    messages: list[dict[str, Any]]
    invocation: int = -1  # index of the call_agent that opened this frame (-1: master)
    turns: int = 0
    node: int = -1  # master: node index of the turn whose calls are running
    pending: list[dict[str, Any]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)

    def copy(self) -> Frame:
        return replace(self, messages=list(self.messages), pending=list(self.pending), results=list(self.results))


@dataclass
class Episode:
    task: Task
    index: int
    stack: list[Frame]
    contexts: dict[str, list[dict[str, Any]]]
    agent_turns: dict[str, int]
    turn: int = 0
    nodes: list[dict[str, Any]] = field(default_factory=list)
    executed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Each sub-agent's calls that ran without error (name and arguments)."""
    attempted: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Each sub-agent's calls to its tools, whatever became of them (tau2-bench's action check reads these)."""
    called: list[str] = field(default_factory=list)
    n_calls: int = 0
    log: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    final_answer: str | None = None
    breakdown: dict[str, Any] | None = None
    # a dialogue (EnvSpec.dialogue): the customer's opening message, every message the service side sent the
    # customer, how the conversation ended, tool errors so far and the customer's turns since its last message
    request: str | None = None
    said: list[str] = field(default_factory=list)
    termination: str | None = None
    errors: int = 0
    customer_streak: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    """The conversation as tau2 records it: each message between the service side and the customer
    (``kind="message"``) and each call that reached a tool (``kind="tool"``, whole result text), in order."""
    turn_id: int = 0
    """Counts every turn taken, the in-env customer's too (groups the calls of one turn in :attr:`events`)."""

    def copy(self) -> Episode:
        stack = [f.copy() for f in self.stack]
        contexts = {agent: list(messages) for agent, messages in self.contexts.items()}
        for f in stack:  # the live context of an agent is the messages list of its frame
            contexts[f.agent] = f.messages
        return replace(
            self,
            stack=stack,
            contexts=contexts,
            agent_turns=dict(self.agent_turns),
            nodes=[dict(n, errors=list(n["errors"])) for n in self.nodes],
            executed={a: list(c) for a, c in self.executed.items()},
            attempted={a: list(c) for a, c in self.attempted.items()},
            called=list(self.called),
            log=list(self.log),
            said=list(self.said),
            events=list(self.events),
        )


@dataclass(frozen=True)
class EnvSnapshot:
    """An opaque, immutable capture of a :class:`JoyEnv`'s whole state (see :meth:`JoyEnv.snapshot`)."""

    episode: Episode | None
    pz: tuple
    rng: dict[str, Any]
    db_images: dict[str, bytes]
    world_id: int
