"""The shop tools' JSON schemas, the agent's system prompt, :func:`domain` and :func:`run_gold`."""

from __future__ import annotations

import sqlite3
from typing import Any

from joy_env import database
from joy_env.core import Domain, Task, Tool, ToolContext
from joy_env.domains.ecommerce.db import AUDIT, CATEGORIES, MAX_CART_QUANTITY, ORDER_STATUSES, TODAY, build_db
from joy_env.domains.ecommerce.helpers import RETURN_REASONS, SORTS
from joy_env.domains.ecommerce.tools import (
    add_to_cart,
    apply_coupon,
    cancel_order,
    check_stock,
    get_coupon,
    get_order_details,
    get_product_details,
    get_user_profile,
    list_user_orders,
    place_order,
    remove_from_cart,
    return_item,
    search_products,
    track_shipment,
    view_cart,
)

SYSTEM_PROMPT = (
    "You are the e-commerce assistant of an online shop. You act for the shopper named in the request "
    f"(user ids look like U2001, products P1001, orders O30001, payment methods PM5001). Today is {TODAY}. "
    "Use the tools to look things up and to change carts and orders; never invent ids, prices or "
    "statuses. Money amounts are dollars with two decimals. Only placed or paid orders can be "
    "cancelled; delivered items can be returned until the return_by date that get_order_details shows "
    "for each item (the window depends on the category). "
    "If a request breaks a shop rule, do not change anything and explain why. Several independent "
    "tool calls may go in one turn. Finish with <answer>...</answer> giving the ids, amounts and "
    "statuses exactly as the tools report them."
)


def _obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


_ID = {"type": "string", "maxLength": 32}
_USER = {**_ID, "description": "user id, e.g. U2001"}
_PRODUCT = {**_ID, "description": "product id, e.g. P1001"}
_ORDER = {**_ID, "description": "order id, e.g. O30001"}

TOOLS: tuple[Tool, ...] = (
    Tool(
        "search_products",
        "Search the catalog; every word of query must appear in the product name or category. Filters are "
        "optional; prices in dollars.",
        _obj(
            {
                "query": {"type": "string", "maxLength": 200, "description": "words of the product name"},
                "category": {"type": "string", "enum": list(CATEGORIES)},
                "brand": {"type": "string", "maxLength": 60},
                "colour": {"type": "string", "maxLength": 40},
                "size": {"type": "string", "maxLength": 40, "description": "e.g. M, 42, 50ml, Paperback"},
                "min_price": {"type": "number", "minimum": 0, "maximum": 100000},
                "max_price": {"type": "number", "minimum": 0, "maximum": 100000},
                "min_rating": {"type": "number", "minimum": 1, "maximum": 5},
                "in_stock": {"type": "boolean", "default": False, "description": "only products with stock > 0"},
                "sort_by": {"type": "string", "enum": list(SORTS), "default": "name"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 10},
            },
            [],
        ),
        search_products,
    ),
    Tool(
        "get_product_details",
        "Full details of a product (price, rating, in stock or not, brand, colour, size) and its other variants.",
        _obj({"product_id": _PRODUCT}, ["product_id"]),
        get_product_details,
    ),
    Tool(
        "check_stock",
        "Number of units of a product in stock.",
        _obj({"product_id": _PRODUCT}, ["product_id"]),
        check_stock,
    ),
    Tool(
        "get_user_profile",
        "A user's name, shipping address and payment methods (payment ids, card expiry, balances).",
        _obj({"user_id": _USER}, ["user_id"]),
        get_user_profile,
    ),
    Tool(
        "view_cart",
        "A user's shopping cart with unit prices, line totals and subtotal.",
        _obj({"user_id": _USER}, ["user_id"]),
        view_cart,
    ),
    Tool(
        "add_to_cart",
        f"Add units of a product to a user's cart (cart quantity at most the stock and at most {MAX_CART_QUANTITY}).",
        _obj(
            {
                "user_id": _USER,
                "product_id": _PRODUCT,
                "quantity": {"type": "integer", "minimum": 1, "maximum": MAX_CART_QUANTITY, "default": 1},
            },
            ["user_id", "product_id"],
        ),
        add_to_cart,
        writes=True,
    ),
    Tool(
        "remove_from_cart",
        "Remove units of a product from a user's cart; without quantity the whole line is removed.",
        _obj(
            {
                "user_id": _USER,
                "product_id": _PRODUCT,
                "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
            },
            ["user_id", "product_id"],
        ),
        remove_from_cart,
        writes=True,
    ),
    Tool(
        "get_coupon",
        "The rules of a coupon: type, value, minimum spend, category, expiry date, uses left, active.",
        _obj({"code": {"type": "string", "maxLength": 40}}, ["code"]),
        get_coupon,
    ),
    Tool(
        "apply_coupon",
        "Check a coupon against a user's cart and return the discount and discounted total (places nothing).",
        _obj({"user_id": _USER, "coupon_code": {"type": "string", "maxLength": 40}}, ["user_id", "coupon_code"]),
        apply_coupon,
    ),
    Tool(
        "place_order",
        "Order everything in the user's cart, paid with one of the user's payment methods, with an optional coupon.",
        _obj(
            {
                "user_id": _USER,
                "payment_id": {**_ID, "description": "payment method id, e.g. PM5001"},
                "coupon_code": {"type": "string", "maxLength": 40, "default": ""},
            },
            ["user_id", "payment_id"],
        ),
        place_order,
        writes=True,
    ),
    Tool(
        "get_order_details",
        "An order's status, items, amounts, payment, carrier, delivery date and return deadline.",
        _obj({"order_id": _ORDER}, ["order_id"]),
        get_order_details,
    ),
    Tool(
        "list_user_orders",
        "A user's orders, newest first, optionally only one status; count is the number of all matches.",
        _obj(
            {
                "user_id": _USER,
                "status": {"type": "string", "enum": list(ORDER_STATUSES)},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 10},
            },
            ["user_id"],
        ),
        list_user_orders,
    ),
    Tool(
        "track_shipment",
        "Carrier, tracking number, shipment status and tracking events of an order.",
        _obj({"order_id": _ORDER}, ["order_id"]),
        track_shipment,
    ),
    Tool(
        "cancel_order",
        "Cancel a user's order; only placed or paid orders can be cancelled. Restocks and refunds.",
        _obj({"user_id": _USER, "order_id": _ORDER}, ["user_id", "order_id"]),
        cancel_order,
        writes=True,
    ),
    Tool(
        "return_item",
        "Return units of a product from a delivered order, within its category's return window.",
        _obj(
            {
                "user_id": _USER,
                "order_id": _ORDER,
                "product_id": _PRODUCT,
                "quantity": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 1},
                "reason": {"type": "string", "enum": list(RETURN_REASONS)},
            },
            ["user_id", "order_id", "product_id", "reason"],
        ),
        return_item,
        writes=True,
    ),
)

TOOL_MAP: dict[str, Tool] = {t.name: t for t in TOOLS}


def domain() -> Domain:
    """The e-commerce sub-agent's tools, database builder, audit tables and system prompt."""
    return Domain(agent="ecommerce", tools=TOOLS, build_db=build_db, audit=AUDIT, system_prompt=SYSTEM_PROMPT)


def run_gold(db_image: bytes, task: Task) -> sqlite3.Connection:
    """Execute every gold ``ecommerce`` call of ``task`` on a fresh copy of ``db_image`` and return it.

    Raises :class:`ToolError` if a gold call fails (which would be a bug in the task generator).
    """
    conn = database.load(db_image)
    ctx = ToolContext(conn, task)
    for sub in task.route:
        if sub.agent != "ecommerce":
            continue
        for turn in sub.turns:
            for call in turn:
                TOOL_MAP[call["name"]].fn(ctx, **call["arguments"])
    return conn
