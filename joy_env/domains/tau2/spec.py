"""The env specs of ``joy/tau2-v0`` (one per domain, data directory, protocol and customer) and of the retail
alias ``joy/ecommerce-v0`` with ``source="tau2"``: the service agent's domain (tools, database, policy, starting
states, state assertions), the master's prompt, the task source and, in the interactive protocol, the dialogue
with the customer (see :mod:`joy_env.domains.tau2`)."""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from joy_env.core import Domain, Task, ToolError
from joy_env.domains import builtin_domains
from joy_env.domains.tau2.data import SPLITS, Tau2Data, check_domain, find_data, load, package, read_policy
from joy_env.domains.tau2.dialogue import (
    GREETING,
    OUT_OF_SCOPE,
    STOP,
    TRANSFER,
    customer_prompt,
    expert_turn,
    guidelines,
    scripted_customer,
)
from joy_env.domains.tau2.tasks import Tau2TaskSource
from joy_env.spec import Dialogue, EnvSpec

ENV_ID = "joy/tau2-v0"
PROTOCOLS = ("solo", "interactive")
"""How the customer takes part: ``solo``, the customer's request is one message and the service agent works
alone (the customer's own tools, where the domain has them, are the agent's); ``interactive``, the customer
converses with the team (:mod:`joy_env.domains.tau2.dialogue`)."""
CUSTOMERS = ("scripted", "team")
"""Who plays the customer of the interactive protocol: ``scripted`` (:func:`~joy_env.domains.tau2.dialogue.
scripted_customer`, inside the env), ``team`` (an agent of the env, ``"customer"``, played by the caller like any
other), or a callable ``customer(view) -> str`` (inside the env; ``view``: ``{"messages", "tools", "task"}``)."""
SOURCE_KWARGS = ("domain", "protocol", "customer", "path")

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


_SERVICES = {
    "retail": "the customer-service agent of an online retail shop",
    "airline": "the customer-service agent of an airline",
    "telecom": "the technical-support agent of a mobile carrier",
}

DIALOGUE_ROLE = (
    "You are {service}, the ecommerce member of a team. Follow the policy below. You talk with the customer: "
    "your <answer>...</answer> is your message to the customer, and their reply comes back to you; or make one "
    "tool call per turn. Before any change to the customer's records, describe it (the tool and its arguments) "
    "and get the customer's explicit confirmation (yes). When you transfer the customer to a human agent, tell "
    "them so. The customer ends the conversation when they are done.{phone}"
)
_PHONE = (
    " The customer's phone is theirs: to act on it, ask them to do one thing at a time (name the action) and to "
    "tell you what the phone shows."
)

DIALOGUE_MASTER = (
    "You are the master agent of a team. A customer starts a conversation with the team: read their first "
    "message and pass the conversation to the sub-agent who serves them, ecommerce ({what}), with "
    '<tool_call>{{"name": "call_agent", "arguments": {{"agent": "ecommerce"}}}}</tool_call>; it then talks with '
    "the customer directly. Other sub-agents: qa (general knowledge), general (weather, units, currencies, dates, "
    "time zones), math (arithmetic)."
)
_WHAT = {
    "retail": "the shop's customer service: users, orders, products, cancellations, changes, returns, exchanges",
    "airline": "the airline's customer service: users, reservations, flights, bookings, changes, baggage",
    "telecom": "the mobile carrier's technical support: customers, lines, plans, bills, and the phone's settings",
}


def role_prompt(domain: str, protocol: str = "solo") -> str:
    """The service agent's role statement in ``domain`` under ``protocol``."""
    if protocol == "interactive":
        return DIALOGUE_ROLE.format(service=_SERVICES[domain], phone=_PHONE if domain == "telecom" else "")
    if check_domain(domain) == "retail":
        return package("retail").ROLE_PROMPT
    return ROLE_PROMPTS[domain]


def system_prompt(domain: str, policy: str, protocol: str = "solo") -> str:
    """The service agent's system prompt: :func:`role_prompt`, then tau2's policy unchanged."""
    return f"{role_prompt(domain, protocol)}\n\n{policy.strip()}\n"


def tools(domain: str, protocol: str = "solo") -> tuple:
    """The service agent's tools: the domain's; in telecom's solo protocol the phone's too (in the interactive
    protocol they are the customer's)."""
    pkg = package(domain)
    if domain == "telecom":
        return (*pkg.AGENT_TOOLS, *pkg.USER_TOOLS) if protocol == "solo" else tuple(pkg.AGENT_TOOLS)
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


def service_domain(data: Tau2Data, protocol: str = "solo") -> Domain:
    """The ``ecommerce`` sub-agent's domain over ``data``: tau2's tools, database and policy (for ``protocol``),
    and in telecom the tasks' starting states (initialization actions) and state assertions."""
    pkg = package(data.domain)
    telecom = data.domain == "telecom"
    policy = data.policy if protocol == "solo" else read_policy(data.domain, data.root, solo=False)
    return Domain(
        agent="ecommerce",
        tools=tools(data.domain, protocol),
        build_db=lambda seed: pkg.build_db(data.db),
        audit=dict(pkg.AUDIT),
        system_prompt=system_prompt(data.domain, policy, protocol),
        prepare=_telecom_prepare if telecom else None,
        env_assertions=_telecom_assertions if telecom else None,
    )


def task_source(data: Tau2Data, protocol: str = "solo") -> Tau2TaskSource:
    """The task source over ``data`` (tasks as ``protocol`` serves them)."""
    return Tau2TaskSource(data.domain, data.tasks, data.splits, write_tools(data.domain), protocol)


def _spec_of(
    data: Tau2Data,
    env_id: str,
    source_kwargs: tuple[str, ...],
    master_prompt: str,
    protocol: str = "solo",
    dialogue: Dialogue | None = None,
) -> EnvSpec:
    service = service_domain(data, protocol)
    domains = tuple(service if d.agent == "ecommerce" else d for d in builtin_domains())

    def tasks(seed: int, dbs: Mapping[str, sqlite3.Connection], **kwargs: Any) -> Tau2TaskSource:
        return task_source(data, protocol)

    return EnvSpec(
        env_id,
        domains,
        tasks,
        source_kwargs,
        f"tau2-bench {data.domain} tasks ({protocol})",
        splits=SPLITS[data.domain],
        master_prompt=master_prompt,
        dialogue=dialogue,
    )


def _expert_service_turn(task: Task, done: int) -> str:
    return expert_turn(task.meta.get("script") or (), done)


def dialogue_of(data: Tau2Data, customer: Any) -> Dialogue:
    """The interactive protocol's :class:`~joy_env.spec.Dialogue` over ``data``: tau2's greeting and stop
    signals, the customer's guidelines and scenario, the phone's tools in telecom (on the service agent's
    database), and who plays the customer (:data:`CUSTOMERS`)."""
    telecom = data.domain == "telecom"
    guidance = guidelines(data.root, with_tools=telecom)
    return Dialogue(
        system_prompt=lambda task: customer_prompt(guidance, task.meta.get("scenario") or ""),
        tools=tuple(package("telecom").USER_TOOLS) if telecom else (),
        db_agent="ecommerce" if telecom else None,
        policy=scripted_customer if customer == "scripted" else None if customer == "team" else customer,
        greeting=GREETING,
        user_stops=(STOP, TRANSFER, OUT_OF_SCOPE),
        agent_stop=STOP,
        expert=scripted_customer,
        service_expert=_expert_service_turn,
    )


@functools.lru_cache(maxsize=32)
def _interactive_spec(domain: str, root: str, customer: Any) -> EnvSpec:
    data = load(domain, root)
    master = DIALOGUE_MASTER.format(what=_WHAT[domain])
    return _spec_of(data, ENV_ID, SOURCE_KWARGS, master, "interactive", dialogue_of(data, customer))


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
    if not isinstance(protocol, str) or protocol not in PROTOCOLS:
        raise ValueError(f"joy/tau2-v0: protocol must be one of {', '.join(map(repr, PROTOCOLS))}, got {protocol!r}")
    return protocol


def check_customer(customer: Any) -> Any:
    """``customer`` itself (one of :data:`CUSTOMERS` or a callable), or a one-line ``ValueError``."""
    if callable(customer) or (isinstance(customer, str) and customer in CUSTOMERS):
        return customer
    raise ValueError(
        f"joy/tau2-v0: customer must be one of {', '.join(map(repr, CUSTOMERS))} or a callable customer(view) -> str, "
        f"got {customer!r}"
    )


def variant(kwargs: Mapping[str, Any]) -> EnvSpec:
    """``make("joy/tau2-v0", **kwargs)``'s spec: the domain's (default ``"retail"``) under its protocol (default
    ``"solo"``) and customer (default ``"scripted"``, interactive only), after checking them."""
    domain = check_domain(kwargs.get("domain", "retail"))
    protocol = check_protocol(kwargs.get("protocol", "solo"))
    customer = kwargs.get("customer")
    if protocol == "solo":
        if customer is not None:
            raise ValueError(
                f"joy/tau2-v0: customer={customer!r} applies to protocol='interactive' only (in the solo protocol the "
                "request is one message); pass protocol='interactive' or leave out customer"
            )
        return env_spec(domain, kwargs.get("path"))
    customer = check_customer("scripted" if customer is None else customer)
    return _interactive_spec(domain, str(find_data(domain, kwargs.get("path")).resolve()), customer)
