"""A finished tau2-bench episode as tau2 records a simulation, so that tau2's own evaluator can score it (see
:mod:`joy_env.domains.tau2`, "Exporting episodes")."""

from __future__ import annotations

import time
from typing import Any

TERMINATIONS = {
    "agent_stop": "agent_stop",
    "user_stop": "user_stop",
    "max_steps": "max_steps",
    "too_many_errors": "too_many_errors",
    "customer_error": "user_error",
}
"""The env's ``termination`` -> tau2's ``TerminationReason`` value."""


def tau2_simulation(env: Any, simulation_id: str = "joy") -> dict[str, Any]:
    """The finished episode of ``env`` (a ``joy/tau2-v0`` env) as a dict that tau2's
    ``SimulationRun.model_validate`` accepts: the conversation in tau2's roles and the termination reason.

    * A dialogue (``protocol="interactive"``): tau2's greeting from the service side, then in order every
      message between the service side and the customer (``assistant`` / ``user``), every turn's calls that
      reached a tool as one message with its ``tool_calls`` (requestor ``assistant`` for the team's agents,
      ``user`` for the customer's phone) and their results as ``tool`` messages (``error`` set for a refusal).
    * The solo protocol: the service agent's calls and their results, then the master's final answer as the last
      ``assistant`` message (tau2's solo mode: no user messages).

    Calls the env refused before they reached a tool (an unknown tool, arguments that do not fit its schema) are
    left out: tau2 would answer them with its own messages, and they change nothing. Results are the whole text
    tau2's tools give (never the env's 4,000-character cut). The master's routing is the team's own business and
    is left out too. Raises ``ValueError`` when the episode has not ended or the env does not serve tau2 tasks.
    """
    ep = getattr(env, "_ep", None)
    if ep is None or ep.breakdown is None:
        raise ValueError("tau2_simulation needs a finished episode: play the env's episode to its end first")
    task = ep.task
    if task.meta.get("source") != "tau2":
        raise ValueError(f"tau2_simulation exports tau2-bench episodes; task {task.task_id!r} is not one")
    messages: list[dict[str, Any]] = []
    dialogue = env.dialogue
    if dialogue is not None:
        messages.append({"role": "assistant", "content": dialogue.greeting})
    calls = 0
    group: tuple[int, str] | None = None
    pending: list[dict[str, Any]] = []

    def flush() -> None:
        messages.extend(pending)
        pending.clear()

    for event in ep.events:
        if event["kind"] == "message":
            flush()
            group = None
            messages.append({"role": event["role"], "content": event["content"]})
            continue
        key = (event["turn"], event["requestor"])
        call_id = f"call_{calls}"
        calls += 1
        call = {"id": call_id, "name": event["name"], "arguments": event["arguments"], "requestor": event["requestor"]}
        if key != group:  # a new turn: its own message holding the calls
            flush()
            group = key
            role = "user" if event["requestor"] == "user" else "assistant"
            messages.append({"role": role, "content": None, "tool_calls": []})
        messages[-1]["tool_calls"].append(call)
        pending.append(
            {
                "id": call_id,
                "role": "tool",
                "content": event["content"],
                "requestor": event["requestor"],
                "error": bool(event["error"]),
            }
        )
    flush()
    for i, message in enumerate(messages):
        message["turn_idx"] = i
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    return {
        "id": simulation_id,
        "task_id": str(task.meta["tau2_id"]),
        "timestamp": now,
        "start_time": now,
        "end_time": now,
        "duration": 0.0,
        "termination_reason": TERMINATIONS.get(ep.termination or "", "max_steps"),
        "messages": messages,
    }
