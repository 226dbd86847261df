"""The ``calculator`` tool, its schema, the agent's system prompt and :func:`domain`."""

from __future__ import annotations

from joy_env.core import Domain, Tool, ToolContext, ToolError
from joy_env.safe_math import SafeMathError, calculate


def calculator(ctx: ToolContext, expression: str) -> dict[str, str]:
    """Evaluate an arithmetic expression exactly; ``{"result": "<number>"}``."""
    try:
        return {"result": calculate(expression)}
    except SafeMathError as exc:
        raise ToolError(f"calculator: {exc}") from None


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="calculator",
        description=(
            "Evaluate an arithmetic expression exactly. Supports numbers, + - * / // % **, parentheses and "
            "round(x, n), abs, min, max, sqrt, floor, ceil. Example: (3 * 4.25 + 2) / 5"
        ),
        parameters={
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "maxLength": 500,
                    "description": "The expression, e.g. 12 * 3.5 - 4",
                }
            },
            "required": ["expression"],
        },
        fn=calculator,
    ),
)

SYSTEM_PROMPT = (
    "You are the math agent. You solve arithmetic word problems with the calculator tool. Work step by "
    "step: write one arithmetic step per calculator call, using the numbers from the problem and from "
    "earlier results; steps that do not depend on each other may be called in the same turn. Ignore "
    "details that do not matter. When done, answer with the final number, e.g. <answer>The answer is 42."
    "</answer>"
)


def domain() -> Domain:
    """The math sub-agent's tools and prompt (no database)."""
    return Domain(agent="math", tools=TOOLS, system_prompt=SYSTEM_PROMPT)
