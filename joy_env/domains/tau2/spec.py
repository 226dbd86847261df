"""The env specs of ``joy/tau2-v0`` (one per domain and data directory) and of the retail alias
``joy/ecommerce-v0`` with ``source="tau2"``: the service agent's domain (tools, database, policy, starting
states, state assertions), the master's prompt and the task source (see :mod:`joy_env.domains.tau2`)."""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from joy_env.core import Domain, Task, ToolError
from joy_env.domains import builtin_domains
from joy_env.domains.tau2.data import SPLITS, Tau2Data, check_domain, find_data, load, package
from joy_env.domains.tau2.tasks import Tau2TaskSource
from joy_env.spec import EnvSpec

ENV_ID = "joy/tau2-v0"
PROTOCOLS = ("solo",)
"""How the customer takes part: ``solo``, the customer's request is one message and the service agent works
alone (the customer's own tools, where the domain has them, are the agent's)."""
SOURCE_KWARGS = ("domain", "protocol", "path")

ROLE_PROMPTS = {
    "airline": (
        "You are the customer-service agent of an airline, the ecommerce member of a team. Follow the airline's "
        "policy below. In this environment the customer's whole request arrives as one message (forwarded by the "
        "team's master agent) with everything the customer would tell you; the customer has already confirmed "
        "(yes) the changes their request asks for, so do not ask for confirmation: act. Make one tool call per "
        "turn. Finish with <answer>...</answer> stating what you did and every number, name or other fact the "
        "customer asked for."
    ),
    "telecom": (
        "You are the technical-support agent of a mobile carrier, the ecommerce member of a team. Follow the "
        "policy below. In this environment the customer's support ticket arrives as one message (forwarded by the "
        "team's master agent) and you work alone: the tools of the customer's phone (status bar, network, "
        "airplane mode, roaming, mobile data, APN, Wi-Fi, VPN, apps, SIM, speed test) are yours as well as the "
        "carrier's (customers, lines, plans, bills, data refuelling). Make one tool call per turn. Finish with "
        "<answer>...</answer> stating what you did."
    ),
}
"""The service agent's role statement per domain; retail's is :data:`joy_env.domains.tau2_retail.ROLE_PROMPT`."""

MASTER_PROMPTS = {
    "airline": (
        "You are the master agent of a team. Read the customer's request, decide which sub-agent to call, then give "
        "the final answer. Sub-agents: ecommerce (the airline's customer service: users, reservations, flights, "
        "bookings, changes, cancellations, baggage, certificates), qa (general knowledge), general (weather, units, "
        "currencies, dates, time zones), math (arithmetic, with a calculator). Call one with "
        '<tool_call>{"name": "call_agent", "arguments": {"agent": "...", "query": "..."}}</tool_call> '
        "(leave out the query to pass on the request as it is) and give the final answer as <answer>...</answer>."
    ),
    "telecom": (
        "You are the master agent of a team. Read the customer's support ticket, decide which sub-agent to call, "
        "then give the final answer. Sub-agents: ecommerce (the mobile carrier's technical support: customers, "
        "lines, plans, bills, data refuelling, and the customer's phone settings), qa (general knowledge), general "
        "(weather, units, currencies, dates, time zones), math (arithmetic, with a calculator). Call one with "
        '<tool_call>{"name": "call_agent", "arguments": {"agent": "...", "query": "..."}}</tool_call> '
        "(leave out the query to pass on the ticket as it is) and give the final answer as <answer>...</answer>."
    ),
}
"""The master's prompt per domain; retail keeps the default master prompt, whose ecommerce agent is a shop."""


def role_prompt(domain: str) -> str:
    """The service agent's role statement in ``domain``."""
    if check_domain(domain) == "retail":
        return package("retail").ROLE_PROMPT
    return ROLE_PROMPTS[domain]


def system_prompt(domain: str, policy: str) -> str:
    """The service agent's system prompt: :func:`role_prompt`, then tau2's policy unchanged."""
    return f"{role_prompt(domain)}\n\n{policy.strip()}\n"


def tools(domain: str) -> tuple:
    """The service agent's tools in the solo protocol: the domain's, and in telecom the phone's too."""
    pkg = package(domain)
    if domain == "telecom":
        return (*pkg.AGENT_TOOLS, *pkg.USER_TOOLS)
    return tuple(pkg.TOOLS)


def write_tools(domain: str) -> frozenset[str]:
    """The names of the tools that may change the database (tau2's write tools)."""
    return frozenset(package(domain).WRITE_TOOLS)


def _telecom_prepare(conn: sqlite3.Connection, task: Task) -> None:
    # each action then a sync, and a last sync, as tau2's set_state does
    package("telecom").run_initialization_actions(conn, task.meta.get("initialization_actions") or ())


def _telecom_assertions(conn: sqlite3.Connection, assertions: Sequence[Mapping[str, Any]]) -> bool:
    """tau2 replays the conversation into a fresh environment, whose ``set_state`` ends with a sync, then runs
    each assertion function (which only reads: the sync after each is skipped, it would change nothing). An
    assertion that fails to run (tau2's evaluation would stop with its error) does not hold."""
    pkg = package("telecom")
    try:
        pkg.sync(conn)
        return all(pkg.run_env_assertion(conn, a, then_sync=False) for a in assertions)
    except (ToolError, ValueError):
        return False


def service_domain(data: Tau2Data) -> Domain:
    """The ``ecommerce`` sub-agent's domain over ``data``: tau2's tools, database and policy, and in telecom the
    tasks' starting states (initialization actions) and state assertions."""
    pkg = package(data.domain)
    telecom = data.domain == "telecom"
    return Domain(
        agent="ecommerce",
        tools=tools(data.domain),
        build_db=lambda seed: pkg.build_db(data.db),
        audit=dict(pkg.AUDIT),
        system_prompt=system_prompt(data.domain, data.policy),
        prepare=_telecom_prepare if telecom else None,
        env_assertions=_telecom_assertions if telecom else None,
    )


def task_source(data: Tau2Data) -> Tau2TaskSource:
    """The task source over ``data``."""
    return Tau2TaskSource(data.domain, data.tasks, data.splits, write_tools(data.domain))


def _spec_of(data: Tau2Data, env_id: str, source_kwargs: tuple[str, ...], master_prompt: str) -> EnvSpec:
    domains = tuple(service_domain(data) if d.agent == "ecommerce" else d for d in builtin_domains())

    def tasks(seed: int, dbs: Mapping[str, sqlite3.Connection], **kwargs: Any) -> Tau2TaskSource:
        return task_source(data)

    return EnvSpec(
        env_id,
        domains,
        tasks,
        source_kwargs,
        f"tau2-bench {data.domain} tasks",
        splits=SPLITS[data.domain],
        master_prompt=master_prompt,
    )


@functools.lru_cache(maxsize=8)
def _tau2_spec(domain: str, root: str) -> EnvSpec:
    return _spec_of(load(domain, root), ENV_ID, SOURCE_KWARGS, MASTER_PROMPTS.get(domain, ""))


def env_spec(domain: str = "retail", path: str | os.PathLike[str] | None = None) -> EnvSpec:
    """The :class:`~joy_env.spec.EnvSpec` of ``joy/tau2-v0`` for ``domain`` (one per data directory): the built-in
    domains with tau2's service agent as ``ecommerce``."""
    return _tau2_spec(check_domain(domain), str(find_data(domain, path).resolve()))


@functools.lru_cache(maxsize=4)
def _alias_spec(root: str) -> EnvSpec:
    return _spec_of(load("retail", root), "joy/ecommerce-v0", ("source", "path"), "")


def retail_alias_spec(path: str | os.PathLike[str] | None = None) -> EnvSpec:
    """The spec of ``joy/ecommerce-v0`` with ``source="tau2"``: ``joy/tau2-v0``'s retail tasks, tools and scores
    under the shop's env id (and its default master prompt)."""
    return _alias_spec(str(find_data("retail", path).resolve()))


def check_protocol(protocol: Any) -> str:
    """``protocol`` itself, or a one-line ``ValueError``."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"joy/tau2-v0: protocol must be one of {', '.join(map(repr, PROTOCOLS))}, got {protocol!r}")
    return protocol


def variant(kwargs: Mapping[str, Any]) -> EnvSpec:
    """``make("joy/tau2-v0", **kwargs)``'s spec: the domain's (default ``"retail"``), after checking the domain
    and the protocol."""
    domain = check_domain(kwargs.get("domain", "retail"))
    check_protocol(kwargs.get("protocol", "solo"))
    return env_spec(domain, kwargs.get("path"))
