"""The env specs of ``joy/tau2-v0`` (one per domain, data directory, protocol and customer) and of the retail
alias ``joy/ecommerce-v0`` with ``source="tau2"``: the service agent's domain (tools, database, policy, starting
states, state assertions), the master's prompt, the task source and, in the interactive protocol, the dialogue
with the customer (see :mod:`joy_env.domains.tau2`)."""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
from collections.abc import Mapping
from typing import Any

from joy_env.core import Domain, Task
from joy_env.dialogue import check_picklable, start_method
from joy_env.domains import builtin_domains
from joy_env.domains.tau2.contract import check_domain
from joy_env.domains.tau2.contract import domain as contract
from joy_env.domains.tau2.data import Tau2Data, find_data, load, read_policy
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
from joy_env.spec import Dialogue, EnvSpec, check_customer_run

ENV_ID = "joy/tau2-v0"
PROTOCOLS = ("solo", "interactive")
"""How the customer takes part: ``solo``, the customer's request is one message and the service agent works
alone (the customer's own tools, where the domain has them, are the agent's); ``interactive``, the customer
converses with the team (:mod:`joy_env.domains.tau2.dialogue`)."""
CUSTOMERS = ("scripted", "team")
"""Who plays the customer of the interactive protocol: ``scripted`` (:func:`~joy_env.domains.tau2.dialogue.
scripted_customer`, inside the env), ``team`` (an agent of the env, ``"customer"``, played by the caller like any
other), or a callable ``customer(view) -> str`` (inside the env; ``view``: ``{"messages", "tools", "task"}``)."""
CALLABLE_OPTIONS = ("customer_isolation", "customer_timeout_s")
"""The options of a callable customer: where it runs (``"thread"``, the default, or ``"process"``) and its seconds
per turn (default 60), as :class:`~joy_env.spec.Dialogue` names them."""
SOURCE_KWARGS = ("domain", "protocol", "customer", *CALLABLE_OPTIONS, "path")

DIALOGUE_ROLE = (
    "You are {service}, the ecommerce member of a team. Follow the policy below. You talk with the customer: "
    "your <answer>...</answer> is your message to the customer, and their reply comes back to you; or make one "
    "tool call per turn. Before any change to the customer's records, describe it (the tool and its arguments) "
    "and get the customer's explicit confirmation (yes). When you transfer the customer to a human agent, tell "
    "them so. The customer ends the conversation when they are done.{note}"
)

DIALOGUE_MASTER = (
    "You are the master agent of a team. A customer starts a conversation with the team: read their first "
    "message and pass the conversation to the sub-agent who serves them, ecommerce ({what}), with "
    '<tool_call>{{"name": "call_agent", "arguments": {{"agent": "ecommerce"}}}}</tool_call>; it then talks with '
    "the customer directly. Other sub-agents: qa (general knowledge), general (weather, units, currencies, dates, "
    "time zones), math (arithmetic)."
)


def role_prompt(domain: str, protocol: str = "solo") -> str:
    """The service agent's role statement in ``domain`` under ``protocol``."""
    spec = contract(domain)
    if protocol == "interactive":
        return DIALOGUE_ROLE.format(service=spec.service, note=spec.dialogue_note)
    return spec.solo_role


def system_prompt(domain: str, policy: str, protocol: str = "solo") -> str:
    """The service agent's system prompt: :func:`role_prompt`, then tau2's policy unchanged."""
    return f"{role_prompt(domain, protocol)}\n\n{policy.strip()}\n"


def service_domain(data: Tau2Data, protocol: str = "solo") -> Domain:
    """The ``ecommerce`` sub-agent's domain over ``data``: tau2's tools, database and policy (for ``protocol``),
    and the tasks' starting states and state assertions where the domain has them (telecom)."""
    spec = contract(data.domain)
    policy = data.policy if protocol == "solo" else read_policy(data.domain, data.root, solo=False)
    return Domain(
        agent="ecommerce",
        tools=spec.agent_tools(protocol),
        build_db=lambda seed: spec.build_db(data.db),
        audit=dict(spec.audit),
        system_prompt=system_prompt(data.domain, policy, protocol),
        prepare=spec.prepare,
        env_assertions=spec.env_assertions,
    )


def task_source(data: Tau2Data, protocol: str = "solo") -> Tau2TaskSource:
    """The task source over ``data`` (tasks as ``protocol`` serves them)."""
    return Tau2TaskSource(data.domain, data.tasks, data.splits, contract(data.domain).write_tools, protocol)


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
        splits=contract(data.domain).splits,
        master_prompt=master_prompt,
        dialogue=dialogue,
    )


def _expert_service_turn(task: Task, done: int) -> str:
    return expert_turn(task.meta.get("script") or (), done)


def dialogue_of(data: Tau2Data, customer: Any, options: Mapping[str, Any] | None = None) -> Dialogue:
    """The interactive protocol's :class:`~joy_env.spec.Dialogue` over ``data``: tau2's greeting and stop
    signals, the customer's guidelines and scenario, the customer's own tools where the domain has them (telecom's
    phone, on the service agent's database), who plays the customer (:data:`CUSTOMERS`) and, for a callable one,
    its :data:`CALLABLE_OPTIONS`."""
    user_tools = contract(data.domain).user_tools
    guidance = guidelines(data.root, with_tools=bool(user_tools))
    return Dialogue(
        system_prompt=lambda task: customer_prompt(guidance, task.meta.get("scenario") or ""),
        tools=user_tools,
        db_agent="ecommerce" if user_tools else None,
        policy=scripted_customer if customer == "scripted" else None if customer == "team" else customer,
        greeting=GREETING,
        user_stops=(STOP, TRANSFER, OUT_OF_SCOPE),
        agent_stop=STOP,
        expert=scripted_customer,
        service_expert=_expert_service_turn,
        **dict(options or {}),
    )


_INTERACTIVE: dict[tuple[Any, ...], tuple[Any, EnvSpec]] = {}
"""The interactive specs made so far: (domain, data directory, the customer's name or a callable's ``id``, its
options) -> (the customer, its spec). A callable is keyed by identity, never by equality or hash: two equal
customers are two customers, and one that cannot be hashed is one like any other. Each entry holds its customer,
so its ``id`` names no other object while the entry lasts."""
_INTERACTIVE_MAX = 32
_INTERACTIVE_LOCK = threading.Lock()


def _interactive_spec(domain: str, root: str, customer: Any, options: Mapping[str, Any]) -> EnvSpec:
    key = (domain, root, customer if isinstance(customer, str) else id(customer), *sorted(options.items()))
    with _INTERACTIVE_LOCK:
        held = _INTERACTIVE.get(key)
        if held is not None:
            return held[1]
        data = load(domain, root)
        master = DIALOGUE_MASTER.format(what=contract(domain).serves)
        spec = _spec_of(data, ENV_ID, SOURCE_KWARGS, master, "interactive", dialogue_of(data, customer, options))
        while len(_INTERACTIVE) >= _INTERACTIVE_MAX:
            del _INTERACTIVE[next(iter(_INTERACTIVE))]  # the oldest
        _INTERACTIVE[key] = (customer, spec)
        return spec


@functools.lru_cache(maxsize=8)
def _tau2_spec(domain: str, root: str) -> EnvSpec:
    return _spec_of(load(domain, root), ENV_ID, SOURCE_KWARGS, contract(domain).master_prompt)


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


def check_customer_options(customer: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`CALLABLE_OPTIONS` given in ``kwargs``, checked (a one-line ``ValueError`` otherwise): they apply
    to a callable ``customer`` only."""
    options = {k: kwargs[k] for k in CALLABLE_OPTIONS if kwargs.get(k) is not None}
    if options and not callable(customer):
        named = ", ".join(f"{k}={v!r}" for k, v in options.items())
        raise ValueError(
            f"joy/tau2-v0: {named} applies to a callable customer only (customer={customer!r} runs no code of "
            "yours); pass customer=your_function or leave it out"
        )
    isolation = options.get("customer_isolation", Dialogue.customer_isolation)
    try:
        check_customer_run(isolation, options.get("customer_timeout_s", Dialogue.customer_timeout_s))
        if isolation == "process":
            check_picklable(customer, start_method())
    except ValueError as exc:
        raise ValueError(f"joy/tau2-v0: {exc}") from None
    return options


def variant(kwargs: Mapping[str, Any]) -> EnvSpec:
    """``make("joy/tau2-v0", **kwargs)``'s spec: the domain's (default ``"retail"``) under its protocol (default
    ``"solo"``) and customer (default ``"scripted"``, interactive only; a callable one with its
    :data:`CALLABLE_OPTIONS`), after checking them."""
    domain = check_domain(kwargs.get("domain", "retail"))
    protocol = check_protocol(kwargs.get("protocol", "solo"))
    customer = kwargs.get("customer")
    if protocol == "solo":
        named = [f"{k}={kwargs[k]!r}" for k in ("customer", *CALLABLE_OPTIONS) if kwargs.get(k) is not None]
        if named:
            raise ValueError(
                f"joy/tau2-v0: {', '.join(named)} applies to protocol='interactive' only (in the solo protocol the "
                "request is one message); pass protocol='interactive' or leave it out"
            )
        return env_spec(domain, kwargs.get("path"))
    customer = check_customer("scripted" if customer is None else customer)
    options = check_customer_options(customer, kwargs)
    return _interactive_spec(domain, str(find_data(domain, kwargs.get("path")).resolve()), customer, options)
