"""tau2-bench's tasks as JoyAgents tasks: the customer's request, the gold solution, the reward basis, and the
task source in tau2's splits (see :mod:`joy_env.domains.tau2`)."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from joy_env.core import SubTask, Task, TaskSourceBase, check_split
from joy_env.domains.tau2.contract import DOMAINS, check_domain
from joy_env.domains.tau2.contract import domain as contract
from joy_env.domains.tau2.dialogue import expert_script, first_person, scenario_text

REWARD_BASES = ("DB", "ENV_ASSERTION", "ACTION", "COMMUNICATE")
"""The parts of tau2's reward that ``joy/tau2-v0`` scores (R_A is the product of a task's)."""
DEFAULT_BASIS = ("DB", "COMMUNICATE")
"""tau2's reward basis when a task names none (every retail and airline task)."""


def task_prefix(domain: str) -> str:
    """``"tau2/<domain>/"``: the start of every task id of ``domain``."""
    return f"tau2/{domain}/"


def render_request(user_scenario: Mapping[str, Any]) -> str:
    """The customer's request as one message, from a tau2 task's ``user_scenario``.

    The scenario is written to the simulated customer ("You are ..."), so the message quotes it as the
    customer's brief under plain headings (persona, who they are and what they know, what they do not know,
    the reason for the contact, their other instructions), then states that the changes are confirmed.
    """
    instructions = user_scenario.get("instructions") or {}
    if isinstance(instructions, str):
        instructions = {"task_instructions": instructions}
    parts = [
        "A customer contacts the shop. Their whole request follows at once, as their own brief ('you' is the customer)."
    ]
    fields = (
        ("Persona", user_scenario.get("persona")),
        ("Who the customer is and what they know", instructions.get("known_info")),
        ("What the customer does not know", instructions.get("unknown_info")),
        ("Reason for the contact", instructions.get("reason_for_call")),
        ("The customer's other instructions", instructions.get("task_instructions")),
    )
    for heading, text in fields:
        text = " ".join(str(text).split()) if text else ""
        if text and text != ".":
            parts.append(f"{heading}: {text}")
    parts.append("The customer confirms every change this request asks for; do not ask them again.")
    return "\n".join(parts)


def request(domain: str, raw: Mapping[str, Any]) -> str:
    """The request the master receives: tau2's ``ticket`` where the task has one (telecom; what tau2's own solo
    mode gives its agent), else :func:`render_request` of the user scenario (retail, airline)."""
    ticket = raw.get("ticket")
    if isinstance(ticket, str) and ticket.strip():
        return ticket.strip()
    return render_request(raw.get("user_scenario") or {})


_TARGETS = ("order_id", "reservation_id", "user_id", "line_id", "bill_id", "customer_id")
"""The argument that names what a write changed, by preference."""


def _write_summary(action: Mapping[str, Any]) -> str:
    args = action.get("arguments") or {}
    target = next((str(args[k]) for k in _TARGETS if args.get(k)), "")
    return f"{action['name']} {target}".strip()


def gold_answer(raw: Mapping[str, Any], write_tools: Collection[str], customer_writes: bool = True) -> str:
    """The expert's final answer to a tau2 task: the writes done (tools in ``write_tools``; the customer's own
    phone actions too unless ``customer_writes`` is false), the transfer to a human agent if the gold actions
    make one, then the ``communicate_info`` verbatim."""
    criteria = raw.get("evaluation_criteria") or {}
    actions = criteria.get("actions") or []
    writes = [
        _write_summary(a)
        for a in actions
        if a["name"] in write_tools and (customer_writes or (a.get("requestor") or "assistant") != "user")
    ]
    transferred = any(a["name"] == "transfer_to_human_agents" for a in actions)
    infos = [str(i) for i in criteria.get("communicate_info") or []]
    parts = ["Done: " + "; ".join(writes) + "."] if writes else []
    if transferred:
        parts.append("I have transferred you to a human agent.")
    text = " ".join(parts) or "I have looked into your request; nothing needed changing."
    if infos:
        text += " The details you asked for: " + "; ".join(infos) + "."
    return text


def _copy(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _scorable_basis(domain: str, tid: str, raw: Mapping[str, Any]) -> tuple[str, ...]:
    """The task's reward basis, or a ``ValueError`` for a task this env cannot score as tau2 does."""
    basis = tuple((raw.get("evaluation_criteria") or {}).get("reward_basis") or DEFAULT_BASIS)
    unsupported = [b for b in basis if b not in REWARD_BASES]
    if unsupported:
        raise ValueError(
            f"tau2 task {domain}/{tid}: reward basis {unsupported} cannot be scored here (NL_ASSERTION needs an LLM "
            f"judge); joy/tau2-v0 scores {', '.join(REWARD_BASES)}"
        )
    state = raw.get("initial_state") or {}
    if state.get("initialization_data") or state.get("message_history"):
        raise ValueError(
            f"tau2 task {domain}/{tid}: a starting state given as initialization_data or message_history is not "
            "supported (only initialization_actions)"
        )
    return basis


def _gold_actions(criteria: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            "name": str(a["name"]),
            "arguments": _copy(a.get("arguments") or {}),
            "requestor": str(a.get("requestor") or "assistant"),
            "compare_args": None if a.get("compare_args") is None else tuple(a["compare_args"]),
        }
        for a in criteria.get("actions") or []
    )


def _dialogue(
    raw: Mapping[str, Any], actions: tuple[dict[str, Any], ...], write_tools: Collection[str]
) -> tuple[str, str, dict[str, Any]]:
    """The interactive protocol's query (the customer's opening), gold answer and ``meta`` additions."""
    scenario = raw.get("user_scenario") or {}
    instructions = scenario.get("instructions") or {}
    instructions = instructions if isinstance(instructions, Mapping) else {"task_instructions": str(instructions)}
    reason = str(instructions.get("reason_for_call") or "")
    answer = gold_answer(raw, write_tools, customer_writes=False)
    script = expert_script({"actions": actions}, answer, write_tools)
    extra = {
        "scenario": scenario_text(scenario),
        "known_info": str(instructions.get("known_info") or ""),
        "unknown_info": str(instructions.get("unknown_info") or ""),
        "reason_for_call": reason,
        "script": tuple(script),
        "gold_turns": 1 + len(script),
        "gold_calls": 1 + sum("call" in step for step in script),
    }
    return first_person(reason) or "I need help.", answer, extra


def to_task(domain: str, raw: Mapping[str, Any], write_tools: Collection[str], protocol: str = "solo") -> Task:
    """One tau2 task of ``domain`` as a :class:`~joy_env.core.Task` (answer type ``tau2``).

    The gold route is one ``ecommerce`` sub-task that forwards the request; its turns are tau2's gold actions,
    one call per turn, in order (the customer's own actions too: the service agent makes them, as in tau2's
    solo mode). ``meta`` holds what scoring needs: ``reward_basis``, the gold ``actions`` (with their
    ``compare_args``), the ``env_assertions`` and the ``initialization_actions`` of the starting state.
    With ``protocol="interactive"`` the customer tells the request in a conversation: the task's ``query`` is
    the scripted customer's opening message, the route's turns are the service agent's own gold calls, and
    ``meta`` adds the customer's scenario (``scenario``, ``known_info``, ``unknown_info``, ``reason_for_call``), the
    expert's side
    of the conversation (``script``: :func:`~joy_env.domains.tau2.dialogue.expert_script`) and its turn and call
    counts (``gold_turns``, ``gold_calls``: the master's routing and the script).

    Raises ``ValueError`` for a task this env cannot score as tau2 does (an LLM-judged basis, a starting
    state given as data or as a conversation).
    """
    tid = str(raw["id"])
    criteria = raw.get("evaluation_criteria") or {}
    basis = _scorable_basis(domain, tid, raw)
    state = raw.get("initial_state") or {}
    actions = _gold_actions(criteria)
    extra: dict[str, Any] = {}
    if protocol == "interactive":
        query, answer, extra = _dialogue(raw, actions, write_tools)
        own = [a for a in actions if a["requestor"] != "user"]
    else:
        query = request(domain, raw)
        answer = gold_answer(raw, write_tools)
        own = list(actions)
    description = raw.get("description") or {}
    nl_assertions = tuple(criteria.get("nl_assertions") or ())
    turns = tuple(({"name": a["name"], "arguments": _copy(a["arguments"])},) for a in own)
    return Task(
        task_id=task_prefix(domain) + tid,
        domain="ecommerce",
        query=query,
        answer=answer,
        answer_type="tau2",
        route=(SubTask(agent="ecommerce", query=query, turns=turns, answer=answer),),
        facts=tuple(str(i) for i in criteria.get("communicate_info") or []),
        template=f"tau2/{domain}",
        meta={
            "source": "tau2",
            "tau2_domain": domain,
            "tau2_id": tid,
            "purpose": description.get("purpose"),
            "reward_basis": basis,
            "actions": actions,
            "env_assertions": tuple(_copy(a) for a in criteria.get("env_assertions") or ()),
            "initialization_actions": tuple(_copy(a) for a in state.get("initialization_actions") or ()),
            "nl_assertions": nl_assertions,
            "not_scored": ("nl_assertions",) if nl_assertions else (),
            "write_tools": tuple(sorted(write_tools)),
            "protocol": protocol,
            **extra,
        },
    )


class Tau2TaskSource(TaskSourceBase):
    """One domain's tau2 tasks in its splits (:attr:`~joy_env.domains.tau2.contract.Tau2Domain.splits`), built on first
    use; task ids are ``"tau2/<domain>/<tau2 id>"`` (:meth:`index_of`)."""

    def __init__(
        self,
        domain: str,
        tasks: Mapping[str, Mapping[str, Any]],
        splits: Mapping[str, tuple[str, ...]],
        write_tools: Collection[str],
        protocol: str = "solo",
    ) -> None:
        self.domain = check_domain(domain)
        self.protocol = protocol
        self.splits = contract(domain).splits
        self._raw = tasks
        self._ids = {split: tuple(splits[split]) for split in self.splits}
        self._write_tools = frozenset(write_tools)
        self._cache: dict[str, Task] = {}
        self.sizes = {split: len(ids) for split, ids in self._ids.items()}

    def build_task(self, split: str, index: int) -> Task:
        tid = self._ids[split][index]
        task = self._cache.get(tid)
        if task is None:
            task = self._cache[tid] = to_task(self.domain, self._raw[tid], self._write_tools, self.protocol)
        return task

    def index_of(self, split: str, task_id: str) -> int:
        """The index in ``split`` of ``"tau2/<domain>/<tau2 id>"``."""
        check_split(split, self.splits)
        prefix = task_prefix(self.domain)
        if not task_id.startswith(prefix):
            other = next((d for d in DOMAINS if task_id.startswith(task_prefix(d))), None)
            if other is not None:
                raise ValueError(
                    f"task {task_id[:80]!r} belongs to tau2's {other} domain, but this env serves {self.domain}; "
                    f"make the env with domain={other!r}"
                )
            raise ValueError(
                f"unknown tau2 task id {task_id[:80]!r}; expected '{prefix}<tau2 task id>', e.g. "
                f"'{prefix}{next(iter(self._raw), '0')}'"
            )
        tid = task_id[len(prefix) :]
        if tid not in self._raw:
            raise ValueError(
                f"unknown tau2 task id {task_id[:80]!r}: tau2's {self.domain} tasks have no id {tid[:60]!r}"
            )
        ids = self._ids[split]
        if tid not in ids:
            where = [s for s in self.splits if s != split and tid in self._ids[s]]
            raise ValueError(
                f"task {task_id[:80]!r} is not in split {split!r} (it is in {where or 'no split'}); make the env with "
                f"{' or '.join(map(repr, where)) if where else 'another split'}"
            )
        return ids.index(tid)
