"""What the tau2-bench tests share: playing given calls through an env, our tool messages in tau2's text, and
pausing the garbage collector around tau2's own (object-heavy) code."""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterator

from joy_env.expert import expert_action
from joy_env.protocol import format_turn


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """tau2's databases are many small objects: the cyclic collector, not the work, would dominate."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def tau2_content(content: str) -> str:
    """Our tool message as tau2 writes it: ``{"error": m}`` -> ``Error: m``; a string result unquoted."""
    value = json.loads(content)
    if isinstance(value, dict) and set(value) == {"error"}:
        return "Error: " + value["error"]
    return value if isinstance(value, str) else json.dumps(value)


def play(env, task_id: str, calls: list[dict], answer: str) -> tuple[dict, list[str]]:
    """An episode where the master forwards the request, ecommerce makes ``calls`` (one per turn) and both
    answer ``answer``; returns the breakdown and ecommerce's tool messages."""
    env.reset(options={"task_id": task_id})
    made = 0
    for agent in env.agent_iter():
        _, _, term, trunc, _ = env.last(observe=False)
        if term or trunc:
            env.step(None)
            continue
        if agent == "master":
            action = expert_action(env) if not env.invocations else format_turn(answer=answer)
        elif made < len(calls):
            action, made = format_turn([calls[made]]), made + 1
        else:
            action = format_turn(answer=answer)
        env.step(action)
    contents = [m["content"] for a, m in env.transcript() if a == "ecommerce" and m["role"] == "tool"]
    return env.episode_breakdown, contents
