"""Parts for collaborative tasks: ``qa`` sub-tasks that the mixed tasks combine."""

from __future__ import annotations

import random
import re

from joy_env.core import SubTask, check_split
from joy_env.domains.qa.retrieval import stem
from joy_env.domains.qa.tasks import (
    MEMBERSHIP,
    free_shipping,
    gift_card,
    installments,
    membership,
    payment_accepted,
    return_window,
    search_call,
    shipping_fee,
    shipping_time,
    warranty,
)
from joy_env.domains.qa.tools import DEFAULT_SEED
from joy_env.domains.qa.world import CATEGORIES, TOPICS, world_of


def _normal_category(category: str) -> str:
    key = " ".join(category.lower().replace("&", "and").split())
    for c in CATEGORIES:
        if key in (c, stem(c), c + "s") or stem(key) == stem(c):
            return c
    raise ValueError(f"unknown category {category!r}; known categories: {', '.join(CATEGORIES)}")


def policy_part(
    rng: random.Random, split: str, topic: str, category: str | None = None, seed: int = DEFAULT_SEED
) -> tuple[SubTask, dict]:
    """A ``qa`` sub-task asking one shop-policy fact, with its gold search and short answer.

    ``topic`` is one of :data:`TOPICS`: ``returns`` (return window of ``category``), ``warranty`` (shop
    warranty of ``category``), ``shipping`` (fee or delivery time of an option, or the free-shipping
    threshold), ``membership`` (a tier's fee, discount, points or extra return days) or ``payment``
    (accepted method, installments, gift cards). ``category`` is needed for returns and warranty (a random
    category of ``split`` when ``None``) and ignored otherwise. ``seed`` selects the KB (the env's seed).

    Returns ``(SubTask, {"answer", "question", "topic", "category", "query", "passage_id", "value",
    "unit"})``; ``value`` is the number in the answer (days, months, dollars...) or ``None``.

    Raises:
        ValueError: unknown topic, split or category.
    """
    if topic not in TOPICS:
        raise ValueError(f"unknown topic {topic!r}; expected one of {TOPICS}")
    check_split(split)
    world = world_of(seed)
    cat = _normal_category(category) if category is not None else None
    if topic == "returns":
        q = return_window(world, rng, split, cat)
    elif topic == "warranty":
        q = warranty(world, rng, split, cat)
    elif topic == "shipping":
        q = rng.choice((shipping_fee, shipping_time, shipping_time, free_shipping))(world, rng, split)
    elif topic == "membership":
        q = membership(rng.choice(list(MEMBERSHIP)))(world, rng, split)
    else:
        q = rng.choice((payment_accepted, installments, gift_card))(world, rng, split)
    sub = SubTask(
        agent="qa",
        query=q.question,
        turns=tuple((search_call(query),) for query in q.queries),
        answer=q.answer,
    )
    value = q.meta.get("value")
    if value is None:
        number = re.search(r"\d+(?:\.\d+)?", q.answer)
        value = float(number.group(0)) if number else None
    info = {
        "answer": q.answer,
        "question": q.question,
        "topic": topic,
        "category": q.meta.get("category"),
        "query": q.queries[0],
        "passage_id": q.passages[0],
        "value": value,
        "unit": q.meta.get("unit"),
    }
    return sub, info
