"""The customer's side of a dialogue (:class:`~joy_env.spec.Dialogue`): who acts next, the service side's
messages to the customer, the customer's turns and the in-env customer. :class:`~joy_env.env.JoyEnv` holds one
:class:`Conversation` when its spec has a dialogue; the rules are documented in :mod:`joy_env.env`, "Dialogue"."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from joy_env.episode import Episode
from joy_env.protocol import clip, parse_action
from joy_env.spec import Dialogue

__all__ = ["Conversation", "action_content", "call_before"]


def call_before(fn: Callable[[Any], Any], arg: Any, deadline: float, seconds: float) -> Any:
    """``fn(arg)`` in a worker thread, waited for until ``deadline`` (``time.monotonic()``; ``seconds``: the
    allowance it ends, for the message): its result, or its exception, or a ``TimeoutError`` once the deadline
    passes (the thread, which cannot be stopped, is left to end on its own; it is a daemon)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"no answer within {seconds:g} s (its re-asks included)")
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(arg)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=run, name="joy-env-customer", daemon=True)
    worker.start()
    worker.join(left)
    if worker.is_alive():
        raise TimeoutError(f"no answer within {seconds:g} s (its re-asks included)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def action_content(action: Any, limit: int) -> str:
    """What an agent wrote, as kept in its conversation (cut past ``limit`` characters; a non-string action as
    its repr)."""
    if isinstance(action, str):
        return action if len(action) <= limit else clip(action, 2000)
    return clip(repr(action), 200)


class Conversation:
    """The customer's side of one env's dialogues.

    ``run_tool(agent, call, node)`` runs one of the customer's calls (``node``: its turn's record, ``None`` for
    an in-env customer) and returns the tool message; ``schemas(agent)`` gives its tool schemas;
    ``max_chars`` caps what is kept of a turn."""

    def __init__(
        self,
        dialogue: Dialogue,
        run_tool: Callable[[str, dict[str, Any], dict[str, Any] | None], dict[str, Any]],
        schemas: Callable[[str], list[dict[str, Any]]],
        max_chars: int,
    ) -> None:
        self.dialogue = dialogue
        self.customer = dialogue.agent
        self._run_tool = run_tool
        self._schemas = schemas
        self._max_chars = max_chars

    def start(self, ep: Episode) -> None:
        """The customer's conversation at the start: its instructions, then the service side's greeting."""
        greeting = {"role": "user", "content": self.dialogue.greeting}
        ep.contexts[self.customer] = [{"role": "system", "content": self.dialogue.system_prompt(ep.task)}, greeting]
        ep.log.append((self.customer, greeting))

    def next_agent(self, ep: Episode) -> str:
        """Who acts next: the customer when it has something to answer (a message, tool results, a format
        error), else the agent holding the conversation (the top of the stack)."""
        if ep.contexts[self.customer][-1]["role"] != "assistant":
            return self.customer
        return ep.stack[-1].agent

    def to_customer(self, ep: Episode, text: str) -> None:
        """The service side's message to the customer (the ``<answer>`` of the agent holding the conversation):
        an agent stop when it holds ``Dialogue.agent_stop``; else the customer answers (inside the env when
        ``Dialogue.policy`` plays it)."""
        ep.said.append(text)
        ep.events.append({"kind": "message", "role": "assistant", "content": text})
        ep.final_answer = text
        message = {"role": "user", "content": text}
        ep.contexts[self.customer].append(message)
        ep.log.append((self.customer, message))
        if self.dialogue.agent_stop in text:
            ep.termination = "agent_stop"
        elif self.dialogue.policy is not None:
            self.play(ep)

    def customer_turn(self, ep: Episode, action: Any, node: dict[str, Any] | None) -> None:
        """One turn of the customer: tool calls on its own tools, or a message to the agent holding the
        conversation (a user stop when it holds one of ``Dialogue.user_stops``); a malformed turn, or one with both,
        gets a format error, as an agent's does."""
        if node is None:
            ep.turn_id += 1
        messages = ep.contexts[self.customer]
        parsed = parse_action(action)
        said = {"role": "assistant", "content": action_content(action, self._max_chars)}
        messages.append(said)
        ep.log.append((self.customer, said))
        errors = list(parsed.errors)
        if parsed.answer is not None and parsed.calls:
            errors.append("a turn is either tool calls or one <answer>...</answer> message to the agent, not both")
        elif parsed.answer is None and not parsed.calls and not errors:
            errors.append("write tool calls or one <answer>...</answer> message to the agent")
        if errors and node is not None:
            node["format_ok"] = False
            node["errors"].extend(errors)
        if parsed.answer is not None and not parsed.calls:
            if node is not None:
                node["answer"] = True
            ep.customer_streak = 0
            ep.events.append({"kind": "message", "role": "user", "content": parsed.answer})
            if any(stop in parsed.answer for stop in self.dialogue.user_stops):
                ep.termination = "user_stop"
                return
            if ep.request is None:  # the opening message: the master's request
                ep.request = parsed.answer
            frame = ep.stack[-1]
            message = {"role": "user", "content": parsed.answer}
            frame.messages.append(message)
            ep.log.append((frame.agent, message))
            return
        ep.customer_streak += 1
        if parsed.answer is None:
            for call in parsed.calls:
                result = self._run_tool(self.customer, call, node)
                messages.append(result)
                ep.log.append((self.customer, result))
        if errors:
            feedback = {"role": "user", "content": "Format error: " + " | ".join(errors)}
            messages.append(feedback)
            ep.log.append((self.customer, feedback))

    def play(self, ep: Episode) -> None:
        """The in-env customer (``Dialogue.policy``) takes its turns until it sends a message. One that fails,
        or keeps calling tools or writing malformed turns past ``max_customer_turns``, ends the conversation
        prematurely (``customer_error``); so do ``max_errors`` tool errors (``too_many_errors``)."""
        dialogue = self.dialogue
        ep.customer_streak = 0
        deadline = time.monotonic() + dialogue.customer_timeout_s  # the turn's, its re-asks included
        while ep.termination is None:
            if ep.customer_streak >= dialogue.max_customer_turns:
                ep.termination = "customer_error"
                return
            view = {
                "messages": list(ep.contexts[self.customer]),
                "tools": self._schemas(self.customer),
                "task": ep.task,
            }
            try:
                if dialogue.policy is dialogue.expert:  # the env's own customer: a plain function
                    action = dialogue.policy(view)
                else:
                    action = call_before(dialogue.policy, view, deadline, dialogue.customer_timeout_s)
            except Exception as exc:  # a customer's failure ends the conversation, it never crashes the env
                ep.termination = "customer_error"
                failure = {"role": "assistant", "content": clip(f"[the customer failed: {exc!r}]", 300)}
                ep.log.append((self.customer, failure))
                return
            self.customer_turn(ep, action, None)
            if ep.customer_streak == 0 or ep.termination is not None:
                return
            if ep.errors >= dialogue.max_errors:
                ep.termination = "too_many_errors"
                return
