"""Parts for collaborative tasks: ``general`` sub-tasks that other domains' tasks combine."""

from __future__ import annotations

import math
import random

from joy_env.core import SubTask, check_split
from joy_env.domains.general.lookups import _fmt, _num, _tables
from joy_env.domains.general.splits import _pools
from joy_env.domains.general.templates import _convert_call, _Plan, _weather_call


def currency_part(rng: random.Random, split: str, amount: float, from_currency: str) -> tuple[SubTask, dict]:
    """A general sub-task converting ``amount`` of ``from_currency`` to another currency of ``split``.

    The target currency is paired with ``from_currency`` in ``split`` (see the split design). Returns
    ``(SubTask, {"amount", "from_currency", "to_currency", "converted", "rate"})`` where ``converted`` is
    rounded to 2 decimals and ``rate`` to 6, exactly as the tool returns them.
    """
    check_split(split)
    code = str(from_currency).strip().upper()
    pool = _pools()[split]
    if code not in pool.partners:
        raise ValueError(f"unknown currency {from_currency!r}; expected one of {sorted(pool.partners)}")
    x = float(amount)
    if not math.isfinite(x) or not 0 <= x <= 1e12:
        raise ValueError(f"amount must be a finite number between 0 and 1e12, got {amount!r}")
    value = _num(x, 2)
    to = rng.choice(pool.partners[code])
    plan = _Plan()
    conv = plan.one(*_convert_call(value, code, to))
    name = _tables()["currency_by_code"][to].plural
    sub = SubTask(
        agent="general",
        query=f"Convert {_fmt(value)} {code} to {name} ({to}).",
        turns=tuple(plan.turns),
        answer=f"{_fmt(value)} {code} is {_fmt(conv['converted'])} {to} (rate {_fmt(conv['rate'])}).",
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
    pool = _pools()[split]
    c, d = rng.choice(pool.cities), rng.choice(pool.dates)
    plan = _Plan()
    w = plan.one(*_weather_call(c, d))
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
