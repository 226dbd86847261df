"""Parts for collaborative tasks: ``general`` sub-tasks that other domains' tasks combine."""

from __future__ import annotations

import math
import random

from joy_env.core import SubTask, check_split
from joy_env.domains.general.lookups import fmt, rounded, world_tables
from joy_env.domains.general.splits import split_pools
from joy_env.domains.general.templates import Plan, convert_call, weather_call


def currency_part(rng: random.Random, split: str, amount: float, from_currency: str) -> tuple[SubTask, dict]:
    """A general sub-task converting ``amount`` of ``from_currency`` to another currency of ``split``.

    The target currency is paired with ``from_currency`` in ``split`` (see the split design). Returns
    ``(SubTask, {"amount", "from_currency", "to_currency", "converted", "rate"})`` where ``converted`` is
    rounded to 2 decimals and ``rate`` to 6, exactly as the tool returns them.
    """
    check_split(split)
    code = str(from_currency).strip().upper()
    pool = split_pools()[split]
    if code not in pool.partners:
        raise ValueError(f"unknown currency {from_currency!r}; expected one of {sorted(pool.partners)}")
    x = float(amount)
    if not math.isfinite(x) or not 0 <= x <= 1e12:
        raise ValueError(f"amount must be a finite number between 0 and 1e12, got {amount!r}")
    value = rounded(x, 2)
    to = rng.choice(pool.partners[code])
    plan = Plan()
    conv = plan.one(*convert_call(value, code, to))
    name = world_tables()["currency_by_code"][to].plural
    sub = SubTask(
        agent="general",
        query=f"Convert {fmt(value)} {code} to {name} ({to}).",
        turns=tuple(plan.turns),
        answer=f"{fmt(value)} {code} is {fmt(conv['converted'])} {to} (rate {fmt(conv['rate'])}).",
        required_calls=tuple(plan.required),
    )
    return sub, {
        "amount": value,
        "from_currency": code,
        "to_currency": to,
        "converted": float(conv["converted"]),
        "rate": float(conv["rate"]),
    }


def weather_part(rng: random.Random, split: str) -> tuple[SubTask, dict]:
    """A general sub-task asking the forecast for a city and date of ``split``.

    Returns ``(SubTask, {"city", "date", "condition", "high_c", "low_c"})`` (``date`` ISO; temperatures
    are ints and may be negative).
    """
    check_split(split)
    pool = split_pools()[split]
    c, d = rng.choice(pool.cities), rng.choice(pool.dates)
    plan = Plan()
    w = plan.one(*weather_call(c, d))
    sub = SubTask(
        agent="general",
        query=f"What is the weather forecast for {c.name} on {d.isoformat()}?",
        turns=tuple(plan.turns),
        answer=(
            f"The forecast for {c.name} on {d.isoformat()} is {w['condition']}, with a high of "
            f"{w['high_c']} C and a low of {w['low_c']} C."
        ),
        required_calls=tuple(plan.required),
    )
    return sub, {
        "city": c.name,
        "date": d.isoformat(),
        "condition": w["condition"],
        "high_c": w["high_c"],
        "low_c": w["low_c"],
    }
