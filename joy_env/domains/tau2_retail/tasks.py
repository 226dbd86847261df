"""tau2's retail tasks as JoyAgents tasks: the customer's request (:func:`render_request`), the gold answer,
the task source in tau2's splits and the env spec of ``source="tau2"`` (see
:mod:`joy_env.domains.tau2_retail`)."""

from __future__ import annotations

import functools
import json
import os
import sqlite3
from collections.abc import Mapping
from typing import Any

from joy_env.core import SubTask, Task, TaskSourceBase, check_split
from joy_env.domains import builtin_domains
from joy_env.domains.tau2_retail.data import SPLITS, RetailData, _load, find_tau2_data
from joy_env.domains.tau2_retail.schemas import WRITE_TOOLS, domain
from joy_env.spec import EnvSpec

TASK_PREFIX = "tau2/retail/"


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


def _write_summary(action: Mapping[str, Any]) -> str:
    args = action["arguments"]
    target = args.get("order_id") or args.get("user_id") or ""
    return f"{action['name']} {target}".strip()


def gold_answer(task: Mapping[str, Any]) -> str:
    """The expert's final answer to a tau2 task: the writes done, then the ``communicate_info`` verbatim."""
    criteria = task.get("evaluation_criteria") or {}
    actions = criteria.get("actions") or []
    writes = [_write_summary(a) for a in actions if a["name"] in WRITE_TOOLS]
    infos = [str(i) for i in criteria.get("communicate_info") or []]
    text = "Done: " + "; ".join(writes) + "." if writes else "I have looked into your request; nothing needed changing."
    if infos:
        text += " The details you asked for: " + "; ".join(infos) + "."
    return text


def _task(raw: Mapping[str, Any]) -> Task:
    tid = str(raw["id"])
    criteria = raw.get("evaluation_criteria") or {}
    actions = [
        {"name": str(a["name"]), "arguments": json.loads(json.dumps(a.get("arguments") or {}))}
        for a in criteria.get("actions") or []
    ]
    query = render_request(raw.get("user_scenario") or {})
    answer = gold_answer(raw)
    description = raw.get("description") or {}
    return Task(
        task_id=TASK_PREFIX + tid,
        domain="ecommerce",
        query=query,
        answer=answer,
        answer_type="communicate",
        route=(SubTask(agent="ecommerce", query=query, turns=tuple((a,) for a in actions), answer=answer),),
        facts=tuple(str(i) for i in criteria.get("communicate_info") or []),
        template="tau2/retail",
        meta={
            "source": "tau2",
            "tau2_id": tid,
            "purpose": description.get("purpose"),
            "nl_assertions": tuple(criteria.get("nl_assertions") or ()),
            "reward_basis": tuple(criteria.get("reward_basis") or ("DB", "COMMUNICATE")),
        },
    )


class Tau2TaskSource(TaskSourceBase):
    """tau2's retail tasks in tau2's splits (``train``, ``test``, ``all``), built on first use."""

    splits = SPLITS

    def __init__(self, data: RetailData) -> None:
        self._data = data
        self._raw = {str(t["id"]): t for t in data.tasks}
        self._cache: dict[str, Task] = {}
        self.sizes = {split: len(data.splits[split]) for split in SPLITS}

    def build_task(self, split: str, index: int) -> Task:
        tid = self._data.splits[split][index]
        task = self._cache.get(tid)
        if task is None:
            task = self._cache[tid] = _task(self._raw[tid])
        return task

    def index_of(self, split: str, task_id: str) -> int:
        """The index in ``split`` of ``"tau2/retail/<tau2 id>"``."""
        check_split(split, self.splits)
        ids = self._data.splits[split]
        tid = task_id[len(TASK_PREFIX) :] if task_id.startswith(TASK_PREFIX) else None
        if tid is None or tid not in self._raw:
            raise ValueError(
                f"unknown tau2 task id {task_id[:80]!r}; expected '{TASK_PREFIX}<tau2 task id>', e.g. '{TASK_PREFIX}3'"
            )
        if tid not in ids:
            where = [s for s in SPLITS if s != "all" and tid in self._data.splits[s]]
            raise ValueError(
                f"task {task_id!r} is not in split {split!r} (it is in {where or 'no split'}); make the env with "
                "that split or 'all'"
            )
        return ids.index(tid)


def task_source(data: RetailData) -> Tau2TaskSource:
    """The task source over ``data``."""
    return Tau2TaskSource(data)


@functools.lru_cache(maxsize=4)
def _spec(root: str) -> EnvSpec:
    data = _load(root)
    domains = tuple(domain(data) if d.agent == "ecommerce" else d for d in builtin_domains())

    def tasks(
        seed: int, dbs: Mapping[str, sqlite3.Connection], source: str = "tau2", path: Any = None
    ) -> Tau2TaskSource:
        return Tau2TaskSource(data)

    return EnvSpec(
        "joy/ecommerce-v0",
        domains,
        tasks,
        ("source", "path"),
        "tau2-bench retail tasks",
        splits=SPLITS,
    )


def env_spec(path: str | os.PathLike[str] | None = None) -> EnvSpec:
    """The :class:`~joy_env.spec.EnvSpec` of ``joy/ecommerce-v0`` with ``source="tau2"`` (one per data
    directory): the built-in domains with tau2's ``ecommerce`` in place of the generated shop's."""
    return _spec(str(find_tau2_data(path).resolve()))
