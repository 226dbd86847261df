"""Parts for collaborative (mixed) tasks: ``ecommerce`` sub-tasks that the mixed tasks combine."""

from __future__ import annotations

import random
import sqlite3
from typing import Any

from joy_env.core import SubTask, ToolContext, check_split
from joy_env.domains.ecommerce.db import split_of
from joy_env.domains.ecommerce.task_helpers import facts_distinct, gold_call
from joy_env.domains.ecommerce.tools import get_order_details, get_product_details, search_products


def price_part(db: sqlite3.Connection, rng: random.Random, split: str) -> tuple[SubTask, dict[str, Any]]:
    """A read-only sub-task: look up one product's unit price by its name (search + details).

    Returns the sub-task and ``{"product_id", "product_name", "price" (float), "price_str", "category"}``.
    """
    check_split(split)
    ctx = ToolContext(db)
    rows = [
        r
        for r in db.execute("SELECT product_id, model_id, name, category FROM products ORDER BY product_id")
        if split_of(r[1]) == split
    ]
    for _attempt in range(100):
        pid, _mid, name, category = rng.choice(rows)
        search = gold_call("search_products", query=name, limit=5)
        found = search_products(ctx, **search["arguments"])
        details = get_product_details(ctx, pid)
        if any(r["product_id"] == pid for r in found["results"]) and facts_distinct(
            f"{name} ({pid}) ${details['price']}", (pid, details["price"])
        ):
            break
    sub = SubTask(
        agent="ecommerce",
        query=f"What is the current unit price of the {name}? Look it up in the shop catalog.",
        turns=((search,), (gold_call("get_product_details", product_id=pid),)),
        answer=f"The {name} ({pid}) costs ${details['price']} per unit.",
        required_calls=({"get_product_details": {"product_id": [pid]}},),
    )
    info = {
        "product_id": pid,
        "product_name": name,
        "price": float(details["price"]),
        "price_str": details["price"],
        "category": category,
    }
    return sub, info


def order_part(db: sqlite3.Connection, rng: random.Random, split: str) -> tuple[SubTask, dict[str, Any]]:
    """A read-only sub-task: look up an order of a user (status, first item's category, total, delivery).

    Returns the sub-task and ``{"order_id", "user_id", "status", "category", "total" (float),
    "total_str", "delivered_on" (ISO date or None), "product_id", "product_name"}`` (first item).
    """
    check_split(split)
    rows = [r for r in db.execute("SELECT order_id, user_id FROM orders ORDER BY order_id") if split_of(r[1]) == split]
    for _attempt in range(100):
        oid, uid = rng.choice(rows)
        details = get_order_details(ToolContext(db), oid)
        first = details["items"][0]
        delivered = details.get("delivered_at")
        facts = (oid, uid, details["total"], *([delivered[:10]] if delivered else []))
        if facts_distinct(f"{oid} {uid} {first['name']} {details['total']} {delivered or ''}", facts):
            break
    call = gold_call("get_order_details", order_id=oid)
    when = f"; it was delivered on {delivered[:10]}" if delivered else ""
    sub = SubTask(
        agent="ecommerce",
        query=(
            f"Look up order {oid} of user {uid}: its status, the category of its first item, its total and its "
            "delivery date if it was delivered."
        ),
        turns=((call,),),
        answer=(
            f"Order {oid} of user {uid} is {details['status']}; its first item, the {first['name']}, is in the "
            f"{first['category']} category; the order total is ${details['total']}{when}."
        ),
        required_calls=({"get_order_details": {"order_id": [oid]}},),
    )
    info = {
        "order_id": oid,
        "user_id": uid,
        "status": details["status"],
        "category": first["category"],
        "total": float(details["total"]),
        "total_str": details["total"],
        "delivered_on": delivered[:10] if delivered else None,
        "product_id": first["product_id"],
        "product_name": first["name"],
    }
    return sub, info
