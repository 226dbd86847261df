"""Parts for collaborative tasks: ``math`` sub-tasks that the mixed tasks combine."""

from __future__ import annotations

import dataclasses
import random

from joy_env.core import SubTask
from joy_env.domains.math.gsm8k import ascii_text
from joy_env.safe_math import calculate, evaluate_exact


def calc_part(rng: random.Random, split: str, description: str, expression: str) -> tuple[SubTask, dict]:
    """A math sub-task: answer ``description`` by calling ``calculator(expression)``.

    Returns ``(SubTask, {"result": rendered result, "value": float})``.

    Raises:
        ValueError: ``expression`` is not valid for the calculator (:class:`SafeMathError`).
    """
    result = calculate(expression)
    value = float(evaluate_exact(expression))
    phrase = rng.choice(("The result is", "The answer is", "It comes to"))
    sub = SubTask(
        agent="math",
        query=ascii_text(description),
        turns=(({"name": "calculator", "arguments": {"expression": expression}},),),
        answer=f"{phrase} {result}.",
    )
    return sub, {"result": result, "value": value}


_DISCOUNTS = (5, 10, 12, 15, 20, 25, 30, 35, 40)
_SHIPPING = ("4.99", "5.99", "6.50", "7.95", "8.99", "9.99", "12.00")


def discount_part(rng: random.Random, split: str, unit_price: float, quantity: int) -> tuple[SubTask, dict]:
    """A math sub-task: the total of ``quantity`` items at ``unit_price`` with a random discount.

    Picks a discount percent and, half of the time, a shipping fee; the sub-query is
    "What is the total for Q items at $P each with a D% discount (plus $S shipping)? Round to the nearest
    cent." and the gold call is ``calculator("round(Q * P * (100 - D) / 100 + S, 2)")``.

    Returns ``(SubTask, {"result", "value", "total", "percent", "shipping", "expression", "question"})``
    where ``total`` is the rounded total as a float.

    Raises:
        ValueError: non-positive price or quantity.
    """
    if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
        raise ValueError(f"quantity must be a positive integer, got {quantity!r}")
    if not isinstance(unit_price, (int, float)) or not 0 < unit_price <= 1e9 or unit_price != unit_price:
        raise ValueError(f"unit_price must be a positive number, got {unit_price!r}")
    price = f"{unit_price:.2f}"
    percent = rng.choice(_DISCOUNTS)
    shipping = rng.choice(_SHIPPING) if rng.random() < 0.5 else None
    item = "item" if quantity == 1 else "items"
    question = f"What is the total for {quantity} {item} at ${price} each with a {percent}% discount"
    expression = f"{quantity} * {price} * (100 - {percent}) / 100"
    if shipping is not None:
        question += f" plus ${shipping} shipping"
        expression += f" + {shipping}"
    question += "? Round to the nearest cent."
    expression = f"round({expression}, 2)"
    sub, out = calc_part(rng, split, question, expression)
    total = round(out["value"], 2)
    out.update(
        total=total,
        percent=percent,
        shipping=float(shipping) if shipping is not None else 0.0,
        expression=expression,
        question=question,
    )
    answer = f"The total is ${total:.2f}."
    return dataclasses.replace(sub, answer=answer), out
