"""The contract of a tau2-bench domain: :class:`Tau2Domain`, which each domain package (:mod:`~joy_env.domains.tau2.
retail`, :mod:`~joy_env.domains.tau2.airline`, :mod:`~joy_env.domains.tau2.telecom`) exports as ``DOMAIN``, and
the table of those packages (:data:`PACKAGES`).

The rest of :mod:`joy_env.domains.tau2` (data, tasks, prompts, the dialogue, the env specs) reads a domain only
through its ``DOMAIN``: nothing outside a domain's package asks which domain it is. A new domain is a package that
exports a ``DOMAIN`` and a line in :data:`PACKAGES`.
"""

from __future__ import annotations

import importlib
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joy_env.core import Task, Tool

PACKAGES: Mapping[str, str] = {
    "retail": "joy_env.domains.tau2.retail",
    "airline": "joy_env.domains.tau2.airline",
    "telecom": "joy_env.domains.tau2.telecom",
}
"""The package of each domain that ``joy/tau2-v0`` serves, imported on first use (:func:`domain`)."""

DOMAINS: tuple[str, ...] = tuple(PACKAGES)
"""The tau2-bench domains served by ``joy/tau2-v0``."""


def read_policy_md(root: Path, solo: bool = True) -> str:
    """``policy.md`` of the data directory ``root``: the one policy of a domain whose agent never works alone."""
    return (root / "policy.md").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Tau2Domain:
    """What a tau2 domain package provides (its ``DOMAIN``).

    The service agent is the team's ``ecommerce`` member in every domain. A domain whose customer has tools of their
    own (telecom's phone) lists them in :attr:`user_tools`: in the solo protocol they are the service agent's too,
    in the interactive protocol the customer's, on the service agent's database.
    """

    name: str
    """The domain's name in ``make("joy/tau2-v0", domain=...)`` and in task ids (``tau2/<name>/<id>``)."""
    data_files: tuple[str, ...]
    """The files a directory of the domain's data must hold (``data/tau2/domains/<name>`` of tau2-bench)."""
    splits: tuple[str, ...]
    """The splits served: tau2's ``train`` and ``test``, ``all`` (tau2's ``base`` task set), and any of its own."""
    load_db: Callable[[Path], Mapping[str, Any]]
    """Read the database of a data directory into canonical form."""
    build_db: Callable[[Mapping[str, Any]], sqlite3.Connection]
    """A fresh SQLite database holding a canonical database."""
    audit: Mapping[str, tuple[str, ...]]
    """The tables the write tools may change, with their key columns (:attr:`joy_env.core.Domain.audit`)."""
    tools: tuple[Tool, ...]
    """The service agent's own tools."""
    service: str
    """Who the service agent is, as a prompt names it: ``"the customer-service agent of an airline"``."""
    serves: str
    """What the service agent serves, as the interactive master's prompt names it."""
    solo_role: str
    """The service agent's role statement in the solo protocol (tau2's policy follows it)."""
    dialogue_note: str = ""
    """What the service agent's role statement adds in the interactive protocol (telecom: the phone is the
    customer's, to be acted on through them)."""
    policy: Callable[[Path, bool], str] = read_policy_md
    """``policy(root, solo)``: the policy the service agent follows, working alone (``solo``) or with a customer."""
    master_prompt: str = ""
    """The master's prompt in the solo protocol (empty: the default master prompt)."""
    user_tools: tuple[Tool, ...] = ()
    """The customer's own tools (none in most domains)."""
    prepare: Callable[[sqlite3.Connection, Task], None] | None = None
    """Set a task's starting state on a fresh database (:attr:`joy_env.core.Domain.prepare`)."""
    env_assertions: Callable[[sqlite3.Connection, Sequence[Mapping[str, Any]]], bool] | None = None
    """Whether a task's state assertions hold on a final database (:attr:`joy_env.core.Domain.env_assertions`)."""
    write_tools: frozenset[str] = field(init=False)
    """The names of the tools, on both sides, that may change the database (tau2's write tools)."""

    def __post_init__(self) -> None:
        names = [t.name for t in (*self.tools, *self.user_tools)]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"tau2 domain {self.name!r}: tool names {repeated} appear more than once; rename them")
        missing = [s for s in ("train", "test", "all") if s not in self.splits]
        if missing:
            raise ValueError(f"tau2 domain {self.name!r}: splits {self.splits} lack {missing}; add them")
        writes = frozenset(t.name for t in (*self.tools, *self.user_tools) if t.writes)
        object.__setattr__(self, "write_tools", writes)

    def agent_tools(self, protocol: str) -> tuple[Tool, ...]:
        """The service agent's tools under ``protocol``: its own, and in the solo protocol the customer's too."""
        return (*self.tools, *self.user_tools) if protocol == "solo" else self.tools


def check_domain(name: Any) -> str:
    """``name`` itself, or a one-line ``ValueError`` naming the valid domains."""
    if not isinstance(name, str) or name not in PACKAGES:
        raise ValueError(f"joy/tau2-v0: domain must be one of {', '.join(map(repr, DOMAINS))}, got {name!r}")
    return name


def domain(name: str) -> Tau2Domain:
    """The ``DOMAIN`` of the package serving ``name`` (imported on first use); a one-line ``ValueError`` for an
    unknown name."""
    module = importlib.import_module(PACKAGES[check_domain(name)])
    contract = getattr(module, "DOMAIN", None)
    if not isinstance(contract, Tau2Domain) or contract.name != name:
        raise TypeError(f"{module.__name__}.DOMAIN must be a Tau2Domain named {name!r}, got {contract!r}")
    return contract
