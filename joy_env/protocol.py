"""The text action protocol (Qwen2.5 / Hermes style) and its parser.

An agent turn is free text containing, after an optional ``<think>...</think>``, either

* one or more tool calls ``<tool_call>{"name": "...", "arguments": {...}}</tool_call>`` (run in order), or
* a final answer ``<answer>...</answer>``.

:func:`parse_action` never raises: everything it cannot accept is reported in ``ParsedAction.errors``
(the environment turns those into an error observation and a format penalty). Agent text is only ever
parsed as JSON, never executed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

ANSWER_END = "</answer>"
"""The closing tag of a final answer: the stop text of a whole agent turn (a turn may hold several tool calls
before it, so generation runs on past ``</tool_call>``)."""
TOOL_CALL_END = "</tool_call>"
"""The closing tag of one tool call."""
TURN_STOP: tuple[str, ...] = (ANSWER_END,)
"""The stop texts of a whole agent turn in rollouts and evaluation (with the end-of-turn token)."""

MAX_ACTION_CHARS = 16_000
"""Longer actions are rejected whole (nothing is executed)."""
MAX_CALLS_PER_TURN = 8
"""Tool calls beyond this number in one turn are ignored and reported."""
MAX_JSON_DEPTH = 20
"""Tool-call JSON nested deeper than this is rejected."""
MAX_ECHO_CHARS = 200
"""Agent text quoted back in an error message is cut to this length."""

_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_NON_PRINTABLE = re.compile(r"[^\t\n\r\x20-\x7e]")


@dataclass
class ParsedAction:
    """What one agent turn asked for.

    Attributes:
        calls: the parsed tool calls ``{"name": str, "arguments": dict}``, in order.
        answer: the text inside ``<answer>`` or ``None``.
        errors: format problems; empty for a well-formed turn.
    """

    calls: list[dict[str, Any]] = field(default_factory=list)
    answer: str | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors


def clip(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """``text`` cut to ``limit`` characters, made printable ASCII, with a marker when cut."""
    text = to_printable(text)
    if len(text) <= limit:
        return text
    return text[:limit] + f"...[{len(text) - limit} more chars]"


def to_printable(text: str) -> str:
    """Replace characters outside printable ASCII by ``?`` (the observation space's charset)."""
    if _NON_PRINTABLE.search(text) is None:
        return text
    return _NON_PRINTABLE.sub("?", text)


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of a parsed JSON value, stopping early past ``limit``."""
    stack = [(value, 1)]
    deepest = 0
    while stack:
        item, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        if isinstance(item, dict):
            stack.extend((v, d + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, d + 1) for v in item)
    return deepest


def _parse_call(body: str) -> tuple[dict[str, Any] | None, str | None]:
    body = body.strip()
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return None, f"tool call is not valid JSON ({clip(str(exc), 80)}): {clip(body)}"
    brackets = body.count("{") + body.count("[")
    if brackets > MAX_JSON_DEPTH and _depth(obj, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        return None, f"tool call JSON is nested deeper than {MAX_JSON_DEPTH} levels"
    if not isinstance(obj, dict):
        return (
            None,
            f'tool call must be a JSON object {{"name": ..., "arguments": {{...}}}}, got {clip(body)}',
        )
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None, f'tool call needs a string "name", got {clip(repr(name))}'
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models emit the arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            return None, f'"arguments" of {clip(name, 60)} is a string that is not JSON: {clip(args)}'
    if not isinstance(args, dict):
        return None, f'"arguments" of {clip(name, 60)} must be a JSON object, got {clip(repr(args))}'
    extra = set(obj) - {"name", "arguments"}
    if extra:
        return (
            None,
            f'tool call has unknown keys {sorted(clip(k, 40) for k in extra)}; use "name" and "arguments"',
        )
    return {"name": name, "arguments": args}, None


def parse_action(text: Any) -> ParsedAction:
    """Parse one agent turn. Never raises; problems go to ``errors``."""
    out = ParsedAction()
    if not isinstance(text, str):
        out.errors.append(f"an action must be a string, got {type(text).__name__}")
        return out
    if len(text) > MAX_ACTION_CHARS:
        out.errors.append(f"action is {len(text)} characters long; the limit is {MAX_ACTION_CHARS}")
        return out
    body = _THINK.sub("", text)
    bodies = _TOOL_CALL.findall(body)
    answers = _ANSWER.findall(body)
    if (bodies or answers) and (
        body.count("<tool_call>") > len(bodies) or body.count("<answer>") > len(answers)
    ):  # an opening tag without its closing tag beside complete ones: the complete ones still count
        out.errors.append("unclosed <tool_call> or <answer> tag")
    if len(bodies) > MAX_CALLS_PER_TURN:
        out.errors.append(f"{len(bodies)} tool calls in one turn; only the first {MAX_CALLS_PER_TURN} run")
        bodies = bodies[:MAX_CALLS_PER_TURN]
    for b in bodies:
        call, err = _parse_call(b)
        if err:
            out.errors.append(err)
        else:
            out.calls.append(call)
    if answers:
        if bodies:
            out.errors.append("a turn must contain tool calls or an <answer>, not both; the answer was ignored")
        else:
            if len(answers) > 1:
                out.errors.append("more than one <answer> in a turn; the first was used")
            out.answer = answers[0].strip()
    if not bodies and not answers:
        if "<tool_call>" in body or "<answer>" in body:
            out.errors.append("unclosed <tool_call> or <answer> tag")
        else:
            out.errors.append(
                'no action found: write <tool_call>{"name": ..., "arguments": {...}}</tool_call> '
                "or <answer>...</answer>"
            )
    return out


def format_call(call: dict[str, Any]) -> str:
    """The canonical text of one tool call (what the expert policy writes)."""
    return (
        "<tool_call>"
        + json.dumps({"name": call["name"], "arguments": call["arguments"]}, ensure_ascii=True)
        + "</tool_call>"
    )


def format_turn(calls: list[dict[str, Any]] | tuple = (), answer: str | None = None) -> str:
    """The canonical text of a turn: tool calls, one per line, or an answer."""
    if answer is not None:
        return f"<answer>{answer}</answer>"
    return "\n".join(format_call(c) for c in calls)
