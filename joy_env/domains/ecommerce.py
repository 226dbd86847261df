"""E-commerce domain: an online shop backed by SQLite, its tools, and its tasks.

The ``ecommerce`` sub-agent serves shoppers of a simulated online shop. The shop is a real SQLite
database generated deterministically from a seed (:func:`build_db`, see
:mod:`joy_env.domains.ecommerce_db`): about 600 product variants in 7 categories (electronics,
clothing, shoes, home, sports, books, beauty) with look-alike distractors (same brand and line,
"Pro" or next-generation models, other colours and sizes), 250 users with shipping addresses and
payment methods (cards with expiry, gift cards and wallets with balances), carts, 1250 orders in
every state (placed, paid, shipped, delivered, cancelled, returned) with consistent totals and
discounts, shipments with tracking events, 220 coupons with rules, and returns. The shop's clock is
fixed: today is 2026-06-01 (now = 2026-06-01T12:00:00). Money is computed in integer cents and shown
as strings with two decimals (``"129.99"``).

Tools (15):

| tool | arguments | what it does |
|---|---|---|
| ``search_products`` | query, category, brand, colour, size, min_price, max_price, | catalog search; every query |
| | min_rating, in_stock, sort_by, limit | word must match name or category |
| ``get_product_details`` | product_id | product record (in stock or not) and its other variants |
| ``check_stock`` | product_id | number of units in stock (the only tool that shows it) |
| ``get_user_profile`` | user_id | name, address, payment methods (ids, card expiry, balances) |
| ``view_cart`` | user_id | cart lines with unit prices, line totals and subtotal |
| ``add_to_cart`` | user_id, product_id, quantity | adds units (cart quantity <= stock and <= 10) |
| ``remove_from_cart`` | user_id, product_id, quantity | removes some units or (no quantity) the line |
| ``get_coupon`` | code | rules: type, value, minimum spend, category, expiry, uses left, active |
| ``apply_coupon`` | user_id, coupon_code | validates a coupon on the cart: discount and total (no write) |
| ``place_order`` | user_id, payment_id, coupon_code | orders the whole cart (see below) |
| ``get_order_details`` | order_id | status, items (with return deadlines), amounts, payment, carrier |
| ``list_user_orders`` | user_id, status, limit | the user's orders, newest first, with the count |
| ``track_shipment`` | order_id | carrier, tracking number, shipment status, tracking events |
| ``cancel_order`` | user_id, order_id | cancels a placed / paid order (see below) |
| ``return_item`` | user_id, order_id, product_id, quantity, reason | returns units of a delivered order (see below) |

``sort_by`` is one of ``name``, ``price_asc``, ``price_desc``, ``rating_desc``; ``limit`` <= 20.
``place_order`` checks stock, the payment method (owner, card expiry, gift card / wallet balance) and
the coupon, then creates the order (status ``placed``), decrements stock, charges balances, counts
the coupon use and empties the cart. ``cancel_order`` restocks the items and credits gift card /
wallet balances. ``return_item`` accepts delivered orders within the return window of the item's
category (7 to 90 days, the shop policy that the QA knowledge base states; ``get_order_details``
shows each item's ``return_by``); the refund is
the units' price minus their pro-rata share of the order discount (credited to gift card / wallet
balances); the order becomes ``returned`` once every unit is returned.

Write tools are atomic (a SAVEPOINT rolled back on any error) and raise :class:`ToolError` naming the
broken rule. Coupon rules are checked in this order: active, expiry (valid through ``expires_on``),
usage limit, category restriction (the cart must hold an item of the category; the discount applies
to those items only), minimum spend (on the eligible subtotal). Percent discounts round half up to the
cent; fixed discounts are capped by the eligible subtotal. Cancelling does not give a coupon use back.

Task templates (answer type ``facts``; route = one ``ecommerce`` sub-task):

| template | kind | facts |
|---|---|---|
| ``cheapest_in_range`` | read: filtered search (brand, category, price range), stock | product id, price, stock |
| ``compare_products`` | read: two details in parallel (one may need a search) | best id, ratings, price gap |
| ``order_tracking`` | read: order details + tracking in parallel | status, carrier, tracking no., location |
| ``buy_product`` | write: profile (+ search), add to cart, place order | new order id, total |
| ``cancel_order`` | write: order details, cancel | order id, ``cancelled``, refund |
| ``cancel_denied`` | read: a shipped / delivered order must NOT be cancelled | order id, status |
| ``coupon_check`` | coupon rules + cart (add first if empty: write), apply if valid | code, discount, total / rule |
| ``return_item`` | write: order details, return | return id, refund |
| ``return_denied`` | read: return window over | order id, return deadline |
| ``count_orders`` | read: orders of a status | count, sum of totals |
| ``stock_variant`` | read: find a colour / size variant, check stock | product id, units |
| ``remove_from_cart`` | write: view cart, remove a line | new subtotal |
| ``buy_cheapest_with_coupon`` | write, **test only**: search, profile, add, order with coupon | id, order, total |
| ``latest_shipment`` | read, **test only**: list shipped orders, track the newest | order id, carrier, location |

Splits: products are partitioned by model (all variants of a model together), users (with their
carts and orders) and coupons by id, about 80/10/10 (:func:`joy_env.domains.ecommerce_db.split_of`);
a task of a split only names entities of its split (catalog searches naturally see the whole shop).
Sizes: 20000 train, 2000 validation and 2000 test tasks; test only templates make ~20% of test.

Collaborative parts for mixed tasks: :func:`price_part` and :func:`order_part`.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from joy_env import database
from joy_env.core import SPLITS, Domain, SubTask, Task, Tool, ToolContext, ToolError, check_index, check_split
from joy_env.domains.ecommerce_db import (
    AUDIT,
    CATEGORIES,
    MAX_CART_QUANTITY,
    NOW,
    ORDER_STATUSES,
    RETURN_WINDOW_DAYS,
    TODAY,
    TODAY_DATE,
    build_db,
    cents_str,
    coupon_discount,
    refund_cents,
    split_of,
)

__all__ = [
    "AUDIT",
    "SYSTEM_PROMPT",
    "TOOLS",
    "EcommerceTaskSource",
    "build_db",
    "domain",
    "order_part",
    "price_part",
    "run_gold",
    "task_source",
]

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

RETURN_REASONS = ("damaged", "defective", "wrong_item", "wrong_size", "not_as_described", "changed_mind")
_SORTS = {
    "name": "name ASC, product_id ASC",
    "price_asc": "price_cents ASC, product_id ASC",
    "price_desc": "price_cents DESC, product_id ASC",
    "rating_desc": "rating DESC, price_cents ASC, product_id ASC",
}
_STOPWORDS = frozenset({"a", "an", "the", "for", "with", "and", "or", "of", "in", "to", "by", "from", "on", "my"})
_PRODUCT_COLS = (
    "product_id, model_id, name, model_name, brand, category, product_type, colour, size, price_cents, "
    "rating, stock, description"
)
_PRODUCT_KEYS = tuple(c.strip() for c in _PRODUCT_COLS.split(","))
_ORDER_COLS = (
    "order_id, user_id, status, created_at, payment_id, coupon_code, subtotal_cents, discount_cents, "
    "total_cents, ship_address, delivered_at, cancelled_at"
)

# ---------------------------------------------------------------------------------------------------------
# helpers


def _conn(ctx: ToolContext) -> sqlite3.Connection:
    if ctx.db is None:
        raise ToolError("the shop database is not available")
    return ctx.db


def _echo(value: Any) -> str:
    """Agent text made safe to quote in a message: printable ASCII, at most 40 characters."""
    text = "".join(ch for ch in str(value) if 32 <= ord(ch) < 127)
    return text[:40] + ("..." if len(text) > 40 else "")


def _ident(value: Any, what: str) -> str:
    text = str(value).strip().upper()
    if not text:
        raise ToolError(f"{what} must not be empty")
    return text


def _money_arg(value: Any, what: str) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ToolError(f"{what} must be a number") from None
    if not math.isfinite(number) or number < 0:
        raise ToolError(f"{what} must be a non-negative number")
    return int(round(min(number, 1e9) * 100))


def _int_arg(value: Any, what: str, lo: int, hi: int) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value != int(value)
    ):
        raise ToolError(f"{what} must be an integer between {lo} and {hi}")
    number = int(value)
    if not lo <= number <= hi:
        raise ToolError(f"{what} must be between {lo} and {hi}, got {number}")
    return number


@contextmanager
def _atomic(conn: sqlite3.Connection) -> Iterator[None]:
    """All-or-nothing block: a savepoint released on success, rolled back on any exception."""
    conn.execute("SAVEPOINT ecommerce_tool")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK TO ecommerce_tool")
        conn.execute("RELEASE ecommerce_tool")
        raise
    conn.execute("RELEASE ecommerce_tool")


def _product_row(conn: sqlite3.Connection, product_id: Any) -> dict[str, Any]:
    pid = _ident(product_id, "product_id")
    row = conn.execute(f"SELECT {_PRODUCT_COLS} FROM products WHERE product_id = ?", (pid,)).fetchone()
    if row is None:
        raise ToolError(f"unknown product_id '{_echo(pid)}' (product ids look like P1001)")
    return dict(zip([c.strip() for c in _PRODUCT_COLS.split(",")], row, strict=True))


def _user_row(conn: sqlite3.Connection, user_id: Any) -> tuple:
    uid = _ident(user_id, "user_id")
    row = conn.execute(
        "SELECT user_id, name, email, street, city, state, zip FROM users WHERE user_id = ?", (uid,)
    ).fetchone()
    if row is None:
        raise ToolError(f"unknown user_id '{_echo(uid)}' (user ids look like U2001)")
    return row


def _order_row(conn: sqlite3.Connection, order_id: Any) -> dict[str, Any]:
    oid = _ident(order_id, "order_id")
    row = conn.execute(f"SELECT {_ORDER_COLS} FROM orders WHERE order_id = ?", (oid,)).fetchone()
    if row is None:
        raise ToolError(f"unknown order_id '{_echo(oid)}' (order ids look like O30001)")
    return dict(zip([c.strip() for c in _ORDER_COLS.split(",")], row, strict=True))


def _own_order(conn: sqlite3.Connection, user_id: Any, order_id: Any) -> dict[str, Any]:
    uid = _user_row(conn, user_id)[0]
    order = _order_row(conn, order_id)
    if order["user_id"] != uid:
        raise ToolError(f"order {order['order_id']} does not belong to user {uid}")
    return order


def _summary(p: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "product_id": p["product_id"],
        "name": p["name"],
        "brand": p["brand"],
        "category": p["category"],
        "colour": p["colour"],
        "size": p["size"],
        "price": cents_str(p["price_cents"]),
        "rating": p["rating"],
        "in_stock": p["stock"] > 0,
    }


def _next_id(conn: sqlite3.Connection, table: str, column: str, prefix: str, first: int) -> str:
    """Next sequential id (ids have a fixed width, so text order is numeric order)."""
    # table / column are module constants, never agent text
    row = conn.execute(f"SELECT {column} FROM {table} ORDER BY {column} DESC LIMIT 1").fetchone()
    return f"{prefix}{max(first - 1, int(row[0][1:]) if row else 0) + 1}"


def _cart_lines(conn: sqlite3.Connection, uid: str) -> list[tuple]:
    """``(product_id, name, category, quantity, price_cents, stock)`` of the cart, by product id."""
    return conn.execute(
        "SELECT c.product_id, p.name, p.category, c.quantity, p.price_cents, p.stock FROM cart_items c "
        "JOIN products p ON p.product_id = c.product_id WHERE c.user_id = ? ORDER BY c.product_id",
        (uid,),
    ).fetchall()


def _cart_summary(conn: sqlite3.Connection, uid: str) -> dict[str, Any]:
    lines = _cart_lines(conn, uid)
    return {
        "user_id": uid,
        "items": [
            {
                "product_id": pid,
                "name": name,
                "category": cat,
                "quantity": qty,
                "unit_price": cents_str(price),
                "line_total": cents_str(price * qty),
                "in_stock": stock,
            }
            for pid, name, cat, qty, price, stock in lines
        ],
        "item_count": sum(line[3] for line in lines),
        "subtotal": cents_str(sum(line[3] * line[4] for line in lines)),
    }


_COUPON_COLS = "code, description, kind, value, min_spend_cents, category, expires_on, usage_limit, used_count, active"


def _coupon_row(conn: sqlite3.Connection, code: Any) -> dict[str, Any]:
    text = _ident(code, "coupon code")
    row = conn.execute(f"SELECT {_COUPON_COLS} FROM coupons WHERE code = ?", (text,)).fetchone()
    if row is None:
        raise ToolError(f"unknown coupon code '{_echo(text)}'")
    return dict(zip([c.strip() for c in _COUPON_COLS.split(",")], row, strict=True))


def coupon_failures(coupon: Mapping[str, Any], lines: list[tuple[str, int, int]]) -> list[tuple[str, str]]:
    """Every rule that ``coupon`` breaks on cart ``lines`` of ``(category, quantity, unit_cents)``.

    Returns ``(keyword, message)`` pairs in checking order; keywords: ``inactive``, ``expired``,
    ``usage limit``, ``category``, ``minimum spend``. Empty when the coupon applies.
    """
    code = coupon["code"]
    out = []
    if not coupon["active"]:
        out.append(("inactive", f"coupon {code} is inactive"))
    if coupon["expires_on"] < TODAY:
        out.append(("expired", f"coupon {code} expired on {coupon['expires_on']} (today is {TODAY})"))
    if coupon["used_count"] >= coupon["usage_limit"]:
        out.append(("usage limit", f"coupon {code} has reached its usage limit of {coupon['usage_limit']} uses"))
    eligible = _eligible_cents(coupon, lines)
    if coupon["category"] is not None and eligible == 0:
        out.append(
            (
                "category",
                f"coupon {code} is restricted to the {coupon['category']} category and the cart has no "
                f"{coupon['category']} items",
            )
        )
    elif eligible < coupon["min_spend_cents"]:
        scope = f"{coupon['category']} items" if coupon["category"] else "the cart"
        out.append(
            (
                "minimum spend",
                f"coupon {code} requires a minimum spend of {cents_str(coupon['min_spend_cents'])} "
                f"on {scope}; the eligible subtotal is {cents_str(eligible)}",
            )
        )
    return out


def _eligible_cents(coupon: Mapping[str, Any], lines: list[tuple[str, int, int]]) -> int:
    return sum(q * c for cat, q, c in lines if coupon["category"] in (None, cat))


def _checked_discount(conn: sqlite3.Connection, code: Any, lines: list[tuple[str, int, int]]) -> tuple[dict, int, int]:
    """``(coupon, eligible_cents, discount_cents)`` or ToolError naming the first broken rule."""
    coupon = _coupon_row(conn, code)
    failures = coupon_failures(coupon, lines)
    if failures:
        raise ToolError(failures[0][1])
    eligible = _eligible_cents(coupon, lines)
    return coupon, eligible, coupon_discount(coupon["kind"], coupon["value"], eligible)


def _window_days(conn: sqlite3.Connection, category: str) -> int:
    row = conn.execute("SELECT days FROM return_windows WHERE category = ?", (category,)).fetchone()
    return int(row[0]) if row else RETURN_WINDOW_DAYS


def _return_deadline(conn: sqlite3.Connection, delivered_at: str, category: str) -> dt.date:
    """Last day to return an item of ``category`` delivered at ``delivered_at``."""
    return dt.date.fromisoformat(delivered_at[:10]) + dt.timedelta(days=_window_days(conn, category))


# ---------------------------------------------------------------------------------------------------------
# tools


def search_products(
    ctx: ToolContext,
    query: str = "",
    category: str = "",
    brand: str = "",
    colour: str = "",
    size: str = "",
    min_price: float | None = None,
    max_price: float | None = None,
    min_rating: float | None = None,
    in_stock: bool = False,
    sort_by: str = "name",
    limit: int = 10,
) -> dict[str, Any]:
    """Filtered catalog search; ``count`` is the number of matches, ``results`` the first ``limit``."""
    conn = _conn(ctx)
    where: list[str] = []
    params: list[Any] = []
    tokens = [t for t in re.findall(r"[a-z0-9]+", str(query).lower()) if t not in _STOPWORDS][:10]
    for token in tokens:
        where.append("instr(search_text, ?) > 0")  # search_text is lower-case name and category
        params.append(token)
    for column, value in (("category", category), ("brand", brand), ("colour", colour), ("size", size)):
        text = str(value).strip()
        if text:
            where.append(f"lower({column}) = lower(?)")  # column from the fixed tuple above
            params.append(text)
    if min_price is not None:
        where.append("price_cents >= ?")
        params.append(_money_arg(min_price, "min_price"))
    if max_price is not None:
        where.append("price_cents <= ?")
        params.append(_money_arg(max_price, "max_price"))
    if min_rating is not None:
        where.append("rating >= ?")
        params.append(float(min_rating) if math.isfinite(float(min_rating)) else 0.0)
    if in_stock:
        where.append("stock > 0")
    if sort_by not in _SORTS:
        raise ToolError(f"sort_by must be one of {sorted(_SORTS)}")
    limit = _int_arg(limit, "limit", 1, 20)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    rows = conn.execute(  # one scan: the window count sees every match before LIMIT
        f"SELECT {_PRODUCT_COLS}, COUNT(*) OVER () FROM products {clause} ORDER BY {_SORTS[sort_by]} LIMIT ?",
        [*params, limit],
    ).fetchall()
    count = rows[0][-1] if rows else 0
    return {"count": count, "results": [_summary(dict(zip(_PRODUCT_KEYS, r[:-1], strict=True))) for r in rows]}


def get_product_details(ctx: ToolContext, product_id: str) -> dict[str, Any]:
    """The full record of one product and the other variants of its model."""
    conn = _conn(ctx)
    p = _product_row(conn, product_id)
    variants = conn.execute(
        "SELECT product_id, colour, size, stock FROM products WHERE model_id = ? AND product_id != ? "
        "ORDER BY product_id LIMIT 10",
        (p["model_id"], p["product_id"]),
    ).fetchall()
    out = _summary(p)
    out.update(
        model=p["model_name"],
        product_type=p["product_type"],
        description=p["description"],
        other_variants=[{"product_id": v[0], "colour": v[1], "size": v[2], "in_stock": v[3] > 0} for v in variants],
    )
    return out


def check_stock(ctx: ToolContext, product_id: str) -> dict[str, Any]:
    """Units in stock of one product."""
    p = _product_row(_conn(ctx), product_id)
    return {"product_id": p["product_id"], "name": p["name"], "stock": p["stock"], "in_stock": p["stock"] > 0}


def get_user_profile(ctx: ToolContext, user_id: str) -> dict[str, Any]:
    """Name, shipping address and payment methods of a user."""
    conn = _conn(ctx)
    uid, name, email, street, city, state, zipcode = _user_row(conn, user_id)
    methods = []
    for pmid, kind, label, exp, bal in conn.execute(
        "SELECT payment_id, kind, label, expires, balance_cents FROM payment_methods WHERE user_id = ? "
        "ORDER BY payment_id",
        (uid,),
    ):
        item: dict[str, Any] = {"payment_id": pmid, "type": kind, "label": label}
        if exp is not None:
            item["expires"] = exp
        if bal is not None:
            item["balance"] = cents_str(bal)
        methods.append(item)
    return {
        "user_id": uid,
        "name": name,
        "email": email,
        "shipping_address": f"{street}, {city}, {state} {zipcode}",
        "payment_methods": methods,
    }


def view_cart(ctx: ToolContext, user_id: str) -> dict[str, Any]:
    """The user's cart with line totals and subtotal."""
    conn = _conn(ctx)
    return _cart_summary(conn, _user_row(conn, user_id)[0])


def add_to_cart(ctx: ToolContext, user_id: str, product_id: str, quantity: int = 1) -> dict[str, Any]:
    """Add ``quantity`` units of a product to the cart (total per product <= stock and <= 10)."""
    conn = _conn(ctx)
    uid = _user_row(conn, user_id)[0]
    p = _product_row(conn, product_id)
    qty = _int_arg(quantity, "quantity", 1, MAX_CART_QUANTITY)
    with _atomic(conn):
        row = conn.execute(
            "SELECT quantity FROM cart_items WHERE user_id = ? AND product_id = ?", (uid, p["product_id"])
        ).fetchone()
        current = row[0] if row else 0
        if p["stock"] == 0:
            raise ToolError(f"product {p['product_id']} is out of stock")
        if current + qty > p["stock"]:
            raise ToolError(
                f"insufficient stock for {p['product_id']}: {p['stock']} in stock, the cart would hold {current + qty}"
            )
        if current + qty > MAX_CART_QUANTITY:
            raise ToolError(f"at most {MAX_CART_QUANTITY} units of one product per cart (cart has {current})")
        if row:
            conn.execute(
                "UPDATE cart_items SET quantity = ? WHERE user_id = ? AND product_id = ?",
                (current + qty, uid, p["product_id"]),
            )
        else:
            conn.execute("INSERT INTO cart_items VALUES (?, ?, ?, ?)", (uid, p["product_id"], qty, NOW))
    return _cart_summary(conn, uid)


def remove_from_cart(ctx: ToolContext, user_id: str, product_id: str, quantity: int | None = None) -> dict[str, Any]:
    """Remove ``quantity`` units (default: the whole line) of a product from the cart."""
    conn = _conn(ctx)
    uid = _user_row(conn, user_id)[0]
    pid = _ident(product_id, "product_id")
    with _atomic(conn):
        row = conn.execute(
            "SELECT quantity FROM cart_items WHERE user_id = ? AND product_id = ?", (uid, pid)
        ).fetchone()
        if row is None:
            raise ToolError(f"product '{_echo(pid)}' is not in the cart of user {uid}")
        qty = row[0] if quantity is None else _int_arg(quantity, "quantity", 1, 1000)
        if qty >= row[0]:
            conn.execute("DELETE FROM cart_items WHERE user_id = ? AND product_id = ?", (uid, pid))
        else:
            conn.execute(
                "UPDATE cart_items SET quantity = ? WHERE user_id = ? AND product_id = ?", (row[0] - qty, uid, pid)
            )
    return _cart_summary(conn, uid)


def get_coupon(ctx: ToolContext, code: str) -> dict[str, Any]:
    """The rules of a coupon."""
    c = _coupon_row(_conn(ctx), code)
    return {
        "code": c["code"],
        "description": c["description"],
        "type": c["kind"],
        "value": f"{c['value']}%" if c["kind"] == "percent" else cents_str(c["value"]),
        "min_spend": cents_str(c["min_spend_cents"]),
        "category": c["category"] or "any",
        "expires_on": c["expires_on"],
        "active": bool(c["active"]),
        "usage_limit": c["usage_limit"],
        "times_used": c["used_count"],
        "uses_left": max(0, c["usage_limit"] - c["used_count"]),
    }


def apply_coupon(ctx: ToolContext, user_id: str, coupon_code: str) -> dict[str, Any]:
    """Validate a coupon against the user's cart and price the cart with it (nothing is written)."""
    conn = _conn(ctx)
    uid = _user_row(conn, user_id)[0]
    lines = _cart_lines(conn, uid)
    if not lines:
        raise ToolError(f"the cart of user {uid} is empty")
    coupon, eligible, discount = _checked_discount(conn, coupon_code, [(x[2], x[3], x[4]) for x in lines])
    subtotal = sum(x[3] * x[4] for x in lines)
    return {
        "user_id": uid,
        "coupon_code": coupon["code"],
        "subtotal": cents_str(subtotal),
        "eligible_subtotal": cents_str(eligible),
        "discount": cents_str(discount),
        "total": cents_str(subtotal - discount),
    }


def place_order(ctx: ToolContext, user_id: str, payment_id: str, coupon_code: str = "") -> dict[str, Any]:
    """Order the whole cart with a payment method and an optional coupon."""
    conn = _conn(ctx)
    user = _user_row(conn, user_id)
    uid = user[0]
    pmid = _ident(payment_id, "payment_id")
    with _atomic(conn):
        lines = _cart_lines(conn, uid)
        if not lines:
            raise ToolError(f"the cart of user {uid} is empty; add products before placing an order")
        pm = conn.execute(
            "SELECT user_id, kind, label, expires, balance_cents FROM payment_methods WHERE payment_id = ?", (pmid,)
        ).fetchone()
        if pm is None or pm[0] != uid:
            raise ToolError(
                f"payment method '{_echo(pmid)}' is not one of user {uid}'s payment methods (see get_user_profile)"
            )
        if pm[1] == "card" and pm[3] < TODAY[:7]:
            raise ToolError(f"the card {pm[2]} ({pmid}) expired in {pm[3]}")
        for pid, _name, _cat, qty, _price, stock in lines:
            if qty > stock:
                raise ToolError(f"insufficient stock for {pid}: {qty} in the cart, only {stock} in stock")
        subtotal = sum(x[3] * x[4] for x in lines)
        code, discount = None, 0
        if str(coupon_code).strip():
            coupon, _eligible, discount = _checked_discount(conn, coupon_code, [(x[2], x[3], x[4]) for x in lines])
            code = coupon["code"]
        total = subtotal - discount
        if pm[4] is not None and pm[4] < total:
            raise ToolError(
                f"insufficient balance on {pm[2]} ({pmid}): balance {cents_str(pm[4])}, order total {cents_str(total)}"
            )
        oid = _next_id(conn, "orders", "order_id", "O", 30001)
        address = f"{user[3]}, {user[4]}, {user[5]} {user[6]}"
        conn.execute(
            f"INSERT INTO orders ({_ORDER_COLS}) VALUES (?, ?, 'placed', ?, ?, ?, ?, ?, ?, ?, NULL, NULL)",
            (oid, uid, NOW, pmid, code, subtotal, discount, total, address),
        )
        for pid, _name, _cat, qty, price, _stock in lines:
            conn.execute("INSERT INTO order_items VALUES (?, ?, ?, ?, 0)", (oid, pid, qty, price))
            conn.execute("UPDATE products SET stock = stock - ? WHERE product_id = ?", (qty, pid))
        if pm[4] is not None:
            conn.execute("UPDATE payment_methods SET balance_cents = ? WHERE payment_id = ?", (pm[4] - total, pmid))
        if code is not None:
            conn.execute("UPDATE coupons SET used_count = used_count + 1 WHERE code = ?", (code,))
        conn.execute("DELETE FROM cart_items WHERE user_id = ?", (uid,))
    return {
        "order_id": oid,
        "status": "placed",
        "items": [{"product_id": x[0], "name": x[1], "quantity": x[3], "unit_price": cents_str(x[4])} for x in lines],
        "subtotal": cents_str(subtotal),
        "discount": cents_str(discount),
        "total": cents_str(total),
        "payment_id": pmid,
        "coupon_code": code,
    }


def get_order_details(ctx: ToolContext, order_id: str) -> dict[str, Any]:
    """Status, items, amounts, payment, shipping and return deadline of an order."""
    conn = _conn(ctx)
    o = _order_row(conn, order_id)
    items = conn.execute(
        "SELECT i.product_id, p.name, p.category, i.quantity, i.unit_price_cents, i.returned_quantity "
        "FROM order_items i JOIN products p ON p.product_id = i.product_id WHERE i.order_id = ? "
        "ORDER BY i.product_id",
        (o["order_id"],),
    ).fetchall()
    label = conn.execute("SELECT label FROM payment_methods WHERE payment_id = ?", (o["payment_id"],)).fetchone()
    ship = conn.execute(
        "SELECT carrier, tracking_number FROM shipments WHERE order_id = ?", (o["order_id"],)
    ).fetchone()
    out: dict[str, Any] = {
        "order_id": o["order_id"],
        "user_id": o["user_id"],
        "status": o["status"],
        "created_at": o["created_at"],
        "items": [
            {
                "product_id": pid,
                "name": name,
                "category": cat,
                "quantity": qty,
                "unit_price": cents_str(price),
                "returned_quantity": ret,
            }
            for pid, name, cat, qty, price, ret in items
        ],
        "subtotal": cents_str(o["subtotal_cents"]),
        "coupon_code": o["coupon_code"],
        "discount": cents_str(o["discount_cents"]),
        "total": cents_str(o["total_cents"]),
        "payment": {"payment_id": o["payment_id"], "label": label[0] if label else None},
        "shipping_address": o["ship_address"],
    }
    if ship:
        out["carrier"], out["tracking_number"] = ship
    if o["delivered_at"]:
        out["delivered_at"] = o["delivered_at"]
        for item in out["items"]:  # the return window depends on the item's category
            item["return_by"] = _return_deadline(conn, o["delivered_at"], item["category"]).isoformat()
    if o["cancelled_at"]:
        out["cancelled_at"] = o["cancelled_at"]
    return out


def list_user_orders(ctx: ToolContext, user_id: str, status: str = "", limit: int = 10) -> dict[str, Any]:
    """The user's orders (optionally of one status), newest first; ``count`` counts all matches."""
    conn = _conn(ctx)
    uid = _user_row(conn, user_id)[0]
    status = str(status).strip().lower()
    if status and status not in ORDER_STATUSES:
        raise ToolError(f"status must be one of {list(ORDER_STATUSES)}")
    limit = _int_arg(limit, "limit", 1, 20)
    where, params = "user_id = ?", [uid]
    if status:
        where += " AND status = ?"
        params.append(status)
    count = conn.execute(f"SELECT COUNT(*) FROM orders WHERE {where}", params).fetchone()[0]
    rows = conn.execute(
        "SELECT o.order_id, o.status, o.created_at, o.total_cents, "
        "(SELECT SUM(quantity) FROM order_items i WHERE i.order_id = o.order_id) "
        f"FROM orders o WHERE {where} ORDER BY o.created_at DESC, o.order_id DESC LIMIT ?",
        [*params, limit],
    ).fetchall()
    return {
        "user_id": uid,
        "status": status or "any",
        "count": count,
        "orders": [
            {"order_id": oid, "status": st, "created_at": created, "total": cents_str(total), "units": units}
            for oid, st, created, total, units in rows
        ],
    }


def track_shipment(ctx: ToolContext, order_id: str) -> dict[str, Any]:
    """Carrier, tracking number, status and tracking events of an order's shipment."""
    conn = _conn(ctx)
    o = _order_row(conn, order_id)
    ship = conn.execute(
        "SELECT shipment_id, carrier, tracking_number, status, shipped_at, estimated_delivery, delivered_at "
        "FROM shipments WHERE order_id = ?",
        (o["order_id"],),
    ).fetchone()
    if ship is None:
        raise ToolError(f"order {o['order_id']} has no shipment (order status: {o['status']})")
    events = conn.execute(
        "SELECT ts, location, description FROM tracking_events WHERE shipment_id = ? ORDER BY seq", (ship[0],)
    ).fetchall()
    listed = [{"time": t, "location": loc, "description": d} for t, loc, d in events[-10:]]
    return {
        "order_id": o["order_id"],
        "shipment_id": ship[0],
        "carrier": ship[1],
        "tracking_number": ship[2],
        "status": ship[3],
        "shipped_at": ship[4],
        "estimated_delivery": ship[5],
        "delivered_at": ship[6],
        "events": listed,
        "latest_event": listed[-1] if listed else None,
    }


def cancel_order(ctx: ToolContext, user_id: str, order_id: str) -> dict[str, Any]:
    """Cancel a placed or paid order of the user: restock items, credit gift card / wallet balances."""
    conn = _conn(ctx)
    with _atomic(conn):
        o = _own_order(conn, user_id, order_id)
        if o["status"] not in ("placed", "paid"):
            raise ToolError(
                f"order {o['order_id']} cannot be cancelled: it is {o['status']}; only placed or paid orders "
                "can be cancelled"
            )
        conn.execute(
            "UPDATE orders SET status = 'cancelled', cancelled_at = ? WHERE order_id = ?", (NOW, o["order_id"])
        )
        items = conn.execute(
            "SELECT product_id, quantity FROM order_items WHERE order_id = ? ORDER BY product_id", (o["order_id"],)
        ).fetchall()
        for pid, qty in items:
            conn.execute("UPDATE products SET stock = stock + ? WHERE product_id = ?", (qty, pid))
        pm = conn.execute(
            "SELECT label, balance_cents FROM payment_methods WHERE payment_id = ?", (o["payment_id"],)
        ).fetchone()
        if pm is not None and pm[1] is not None:
            conn.execute(
                "UPDATE payment_methods SET balance_cents = balance_cents + ? WHERE payment_id = ?",
                (o["total_cents"], o["payment_id"]),
            )
    return {
        "order_id": o["order_id"],
        "status": "cancelled",
        "refund_amount": cents_str(o["total_cents"]),
        "refunded_to": pm[0] if pm else o["payment_id"],
        "restocked": [{"product_id": pid, "quantity": qty} for pid, qty in items],
    }


def return_item(
    ctx: ToolContext, user_id: str, order_id: str, product_id: str, reason: str, quantity: int = 1
) -> dict[str, Any]:
    """Return units of a delivered order within the return window; refunds their discounted price."""
    conn = _conn(ctx)
    if reason not in RETURN_REASONS:
        raise ToolError(f"reason must be one of {list(RETURN_REASONS)}")
    qty = _int_arg(quantity, "quantity", 1, 1000)
    with _atomic(conn):
        o = _own_order(conn, user_id, order_id)
        if o["status"] != "delivered":
            raise ToolError(f"order {o['order_id']} is {o['status']}; only delivered orders can be returned")
        pid = _ident(product_id, "product_id")
        item = conn.execute(
            "SELECT i.quantity, i.unit_price_cents, i.returned_quantity, p.category FROM order_items i "
            "JOIN products p ON p.product_id = i.product_id WHERE i.order_id = ? AND i.product_id = ?",
            (o["order_id"], pid),
        ).fetchone()
        if item is None:
            raise ToolError(f"product '{_echo(pid)}' is not part of order {o['order_id']}")
        deadline = _return_deadline(conn, o["delivered_at"], item[3])
        if TODAY_DATE > deadline:
            raise ToolError(
                f"the {_window_days(conn, item[3])}-day return window for {item[3]} items of order {o['order_id']} "
                f"ended on {deadline.isoformat()} (delivered {o['delivered_at'][:10]}, today is {TODAY})"
            )
        left = item[0] - item[2]
        if qty > left:
            raise ToolError(f"only {left} unit(s) of {pid} in order {o['order_id']} can still be returned")
        refund = refund_cents(item[1], qty, o["subtotal_cents"], o["discount_cents"])
        rid = _next_id(conn, "returns", "return_id", "R", 70001)
        conn.execute(
            "INSERT INTO returns VALUES (?, ?, ?, ?, ?, ?, 'approved', ?, ?)",
            (rid, o["order_id"], pid, o["user_id"], qty, reason, refund, NOW),
        )
        conn.execute(
            "UPDATE order_items SET returned_quantity = returned_quantity + ? WHERE order_id = ? AND product_id = ?",
            (qty, o["order_id"], pid),
        )
        remaining = conn.execute(
            "SELECT SUM(quantity - returned_quantity) FROM order_items WHERE order_id = ?", (o["order_id"],)
        ).fetchone()[0]
        status = "returned" if remaining == 0 else "delivered"
        if status == "returned":
            conn.execute("UPDATE orders SET status = 'returned' WHERE order_id = ?", (o["order_id"],))
        pm = conn.execute(
            "SELECT label, balance_cents FROM payment_methods WHERE payment_id = ?", (o["payment_id"],)
        ).fetchone()
        if pm is not None and pm[1] is not None:
            conn.execute(
                "UPDATE payment_methods SET balance_cents = balance_cents + ? WHERE payment_id = ?",
                (refund, o["payment_id"]),
            )
    return {
        "return_id": rid,
        "order_id": o["order_id"],
        "product_id": pid,
        "quantity": qty,
        "reason": reason,
        "status": "approved",
        "refund_amount": cents_str(refund),
        "refunded_to": pm[0] if pm else o["payment_id"],
        "order_status": status,
    }


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
                "sort_by": {"type": "string", "enum": list(_SORTS), "default": "name"},
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

_TOOL_MAP: dict[str, Tool] = {t.name: t for t in TOOLS}


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
                _TOOL_MAP[call["name"]].fn(ctx, **call["arguments"])
    return conn


# ---------------------------------------------------------------------------------------------------------
# tasks


_INTROS = ("", "Hi!", "Hello!", "Hey there.", "Good morning.", "Hi, quick question.", "Hi, hope you are well.")
_CATEGORY_PHRASES = {
    "electronics": "electronics",
    "clothing": "clothing",
    "shoes": "shoes",
    "home": "home products",
    "sports": "sports gear",
    "books": "books",
    "beauty": "beauty products",
}
_REASON_PHRASES = {
    "damaged": "it arrived damaged",
    "defective": "it stopped working after two days, it's defective",
    "wrong_item": "you sent me the wrong item",
    "wrong_size": "it's the wrong size",
    "not_as_described": "it is not as described on the product page",
    "changed_mind": "I changed my mind",
}
_CANCEL_REASONS = (
    "I found it cheaper elsewhere.",
    "I ordered it by mistake.",
    "I don't need it anymore.",
    "My plans changed.",
    "I'd rather buy it in store.",
)


def _fact_form(text: str) -> str:
    """Text as fact matching sees it: lowercase, no ``$`` / thousands commas, ``129.50`` -> ``129.5``."""
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text.lower().replace("$", " "))
    return " ".join(re.sub(r"\d+\.\d+", lambda m: m.group(0).rstrip("0").rstrip(".") or "0", text).split())


def _facts_distinct(answer: str, facts: tuple[str, ...]) -> bool:
    """Whether every fact with a digit occurs exactly once in ``answer`` (on loose word boundaries).

    A numeric fact that also matches elsewhere (``"2"`` in a model name, ``"5.00"`` inside ``"187.50"``)
    could be satisfied by a wrong answer; such drafts are regenerated.
    """
    text = _fact_form(answer)
    for fact in facts:
        if any(ch.isdigit() for ch in fact):
            pattern = r"(?<![a-z0-9])" + re.escape(_fact_form(fact)) + r"(?![a-z0-9])"
            if len(re.findall(pattern, text)) != 1:
                return False
    return True


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _exec(conn: sqlite3.Connection, turns: list[list[dict[str, Any]]]) -> list[list[Any]]:
    """Run gold turns on ``conn`` and return the results (ToolError propagates)."""
    ctx = ToolContext(conn)
    return [[_TOOL_MAP[c["name"]].fn(ctx, **c["arguments"]) for c in turn] for turn in turns]


def _their(phrase: str) -> str:
    """'my Visa card ending in 1234' -> "the user's Visa card ending in 1234"."""
    return phrase.replace("my ", "the user's ", 1)


def _opt(value: Any) -> list[Any]:
    """Acceptable values of an argument whose gold value equals its default (may be omitted)."""
    return ["", value]


@dataclass
class _Draft:
    query: str
    sub_query: str
    turns: list[list[dict[str, Any]]]
    answer: str
    facts: tuple[str, ...]
    required: list[dict[str, Any]]


class EcommerceTaskSource:
    """Tasks of the e-commerce domain for one seed (see the module docstring for the templates)."""

    SIZES: Mapping[str, int] = {"train": 20000, "validation": 2000, "test": 2000}

    def __init__(self, seed: int, db: sqlite3.Connection) -> None:
        self.seed = seed
        self.db = db
        self._image: bytes | None = None
        self._scratch: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._ctx = ToolContext(db)
        self._index()
        # (name, generator, test only, weight)
        self._templates: tuple[tuple[str, Callable[[random.Random, str], _Draft | None], bool, float], ...] = (
            ("cheapest_in_range", self._t_cheapest, False, 1.0),
            ("compare_products", self._t_compare, False, 1.0),
            ("order_tracking", self._t_tracking, False, 1.0),
            ("buy_product", self._t_buy, False, 1.2),
            ("cancel_order", self._t_cancel, False, 1.0),
            ("cancel_denied", self._t_cancel_denied, False, 0.8),
            ("coupon_check", self._t_coupon, False, 1.2),
            ("return_item", self._t_return, False, 1.0),
            ("return_denied", self._t_return_denied, False, 0.8),
            ("count_orders", self._t_count, False, 0.8),
            ("stock_variant", self._t_stock_variant, False, 1.0),
            ("remove_from_cart", self._t_remove, False, 0.8),
            ("buy_cheapest_with_coupon", self._t_buy_cheapest_coupon, True, 1.4),
            ("latest_shipment", self._t_latest_shipment, True, 1.4),
        )

    # -- public API -----------------------------------------------------------------------------------------

    def size(self, split: str) -> int:
        """Number of tasks of ``split``."""
        check_split(split)
        return self.SIZES[split]

    def task(self, split: str, index: int) -> Task:
        """Task ``index`` of ``split`` (deterministic in seed, split and index)."""
        index = check_index(split, index, self.size(split))
        rng = random.Random(f"ecommerce-task/{self.seed}/{split}/{index}")
        templates = [t for t in self._templates if split == "test" or not t[2]]
        first = rng.choices(range(len(templates)), weights=[t[3] for t in templates])[0]
        for k in range(len(templates)):
            name, make, test_only, _weight = templates[(first + k) % len(templates)]
            for _attempt in range(60):
                draft = make(rng, split)
                if draft is not None and _facts_distinct(draft.answer, draft.facts):
                    sub = SubTask(
                        agent="ecommerce",
                        query=draft.sub_query,
                        turns=tuple(tuple(turn) for turn in draft.turns),
                        answer=draft.answer,
                        required_calls=tuple(draft.required),
                    )
                    return Task(
                        task_id=f"ecommerce/{split}/{index}",
                        domain="ecommerce",
                        query=draft.query,
                        answer=draft.answer,
                        answer_type="facts",
                        route=(sub,),
                        facts=draft.facts,
                        template=name,
                        meta={
                            "test_only_template": test_only,
                            "writes": any(_TOOL_MAP[c["name"]].writes for t in draft.turns for c in t),
                            "calls": sum(len(t) for t in draft.turns),
                        },
                    )
        raise RuntimeError(f"no e-commerce template could generate task {split}/{index}")  # pragma: no cover

    @property
    def image(self) -> bytes:
        """Image of the pristine database (computed once)."""
        if self._image is None:
            self._image = database.image(self.db)
        return self._image

    # -- indexes --------------------------------------------------------------------------------------------

    def _index(self) -> None:
        db = self.db
        keys = [c.strip() for c in _PRODUCT_COLS.split(",")]
        self.products: dict[str, dict[str, Any]] = {}
        self.products_by_split: dict[str, list[str]] = {s: [] for s in SPLITS}
        self.in_stock_by_split: dict[str, list[str]] = {s: [] for s in SPLITS}
        self.by_type: dict[tuple, list[str]] = {}
        self.models: dict[str, list[str]] = {}
        self.brand_cat_in_stock: dict[tuple[str, str], list[tuple[int, str]]] = {}
        for row in db.execute(f"SELECT {_PRODUCT_COLS} FROM products ORDER BY product_id"):
            p = dict(zip(keys, row, strict=True))
            p["split"] = split_of(p["model_id"])
            pid = p["product_id"]
            self.products[pid] = p
            self.products_by_split[p["split"]].append(pid)
            self.by_type.setdefault((p["split"], p["category"], p["product_type"]), []).append(pid)
            self.models.setdefault(p["model_id"], []).append(pid)
            if p["stock"] > 0:
                self.in_stock_by_split[p["split"]].append(pid)
                self.brand_cat_in_stock.setdefault((p["brand"], p["category"]), []).append((p["price_cents"], pid))
        for v in self.brand_cat_in_stock.values():
            v.sort()
        self.models_by_split: dict[str, list[str]] = {s: [] for s in SPLITS}
        for mid, pids in self.models.items():
            if len(pids) >= 2 and any(self.products[p]["colour"] or self.products[p]["size"] for p in pids):
                self.models_by_split[split_of(mid)].append(mid)
        self.users: dict[str, tuple] = {}
        self.users_by_split: dict[str, list[str]] = {s: [] for s in SPLITS}
        for row in db.execute("SELECT user_id, name FROM users ORDER BY user_id"):
            self.users[row[0]] = row
            self.users_by_split[split_of(row[0])].append(row[0])
        self.payments: dict[str, list[dict[str, Any]]] = {}
        for pmid, uid, kind, label, last4, exp, bal in db.execute(
            "SELECT payment_id, user_id, kind, label, last4, expires, balance_cents FROM payment_methods "
            "ORDER BY payment_id"
        ):
            self.payments.setdefault(uid, []).append(
                {"payment_id": pmid, "kind": kind, "label": label, "last4": last4, "expires": exp, "balance": bal}
            )
        self.carts: dict[str, list[tuple[str, int]]] = {}
        for uid, pid, qty in db.execute("SELECT user_id, product_id, quantity FROM cart_items ORDER BY 1, 2"):
            self.carts.setdefault(uid, []).append((pid, qty))
        okeys = [c.strip() for c in _ORDER_COLS.split(",")]
        self.orders: dict[str, dict[str, Any]] = {}
        self.orders_by: dict[tuple[str, str], list[str]] = {}
        self.orders_by_user: dict[str, list[str]] = {}
        for row in db.execute(f"SELECT {_ORDER_COLS} FROM orders ORDER BY order_id"):
            o = dict(zip(okeys, row, strict=True))
            self.orders[o["order_id"]] = o
            self.orders_by.setdefault((split_of(o["user_id"]), o["status"]), []).append(o["order_id"])
            self.orders_by_user.setdefault(o["user_id"], []).append(o["order_id"])
        self.items: dict[str, list[tuple[str, int, int, int]]] = {}
        for oid, pid, qty, unit, ret in db.execute(
            "SELECT order_id, product_id, quantity, unit_price_cents, returned_quantity FROM order_items ORDER BY 1, 2"
        ):
            self.items.setdefault(oid, []).append((pid, qty, unit, ret))
        self.coupons: dict[str, dict[str, Any]] = {}
        self.coupons_by_split: dict[str, list[str]] = {s: [] for s in SPLITS}
        ckeys = [c.strip() for c in _COUPON_COLS.split(",")]
        for row in db.execute(f"SELECT {_COUPON_COLS} FROM coupons ORDER BY code"):
            c = dict(zip(ckeys, row, strict=True))
            self.coupons[c["code"]] = c
            self.coupons_by_split[split_of(c["code"])].append(c["code"])
        # (order, product) pairs clearly inside / outside the product category's return window
        windows = dict(db.execute("SELECT category, days FROM return_windows"))
        self.recent_delivered: dict[str, list[tuple[str, str]]] = {s: [] for s in SPLITS}
        self.old_delivered: dict[str, list[tuple[str, str]]] = {s: [] for s in SPLITS}
        for s in SPLITS:
            for oid in self.orders_by.get((s, "delivered"), []):
                age = (TODAY_DATE - dt.date.fromisoformat(self.orders[oid]["delivered_at"][:10])).days
                for pid, *_ in self.items[oid]:
                    days = windows.get(self.products[pid]["category"], RETURN_WINDOW_DAYS)
                    if age <= days - 3:
                        self.recent_delivered[s].append((oid, pid))
                    elif age >= days + 5:
                        self.old_delivered[s].append((oid, pid))

    # -- phrasing helpers -----------------------------------------------------------------------------------

    def _distractor(self, rng: random.Random, split: str) -> str:
        other = self.products[rng.choice(self.products_by_split[split])]["name"]
        return rng.choice(
            (
                "",
                "",
                "I'm in a bit of a hurry, thanks.",
                f"A friend recommended the {other}, but that's not what I'm asking about.",
                "I've been a customer for years, by the way.",
                "My email address changed recently, but that doesn't matter here.",
                f"Last month I looked at the {other} too, ignore that one.",
                "I'm comparing a few shops this week.",
            )
        )

    def _intro(self, rng: random.Random) -> str:
        return rng.choice(_INTROS)

    @staticmethod
    def _join(*parts: str) -> str:
        return " ".join(p for p in parts if p)

    def _run_write(self, turns: list[list[dict[str, Any]]]) -> list[list[Any]]:
        """Run gold turns with writes on a private copy of the database, then undo them.

        The copy is loaded once; each run is one transaction that is rolled back, so every task starts
        from the pristine state (as a fresh copy per task would, without the copying cost).
        """
        with self._lock:
            if self._scratch is None:
                self._scratch = database.load(self.image)
            self._scratch.execute("BEGIN")
            try:
                return _exec(self._scratch, turns)
            finally:
                self._scratch.execute("ROLLBACK")

    def _found_by_search(self, name: str, pid: str) -> bool:
        res = search_products(self._ctx, query=name, limit=5)
        return any(r["product_id"] == pid for r in res["results"])

    def _usable_payments(self, uid: str, total: int) -> list[dict[str, Any]]:
        out = []
        for pm in self.payments.get(uid, []):
            if pm["kind"] == "card" and pm["expires"] >= TODAY[:7]:
                out.append(pm)
            elif pm["balance"] is not None and pm["balance"] >= total:
                out.append(pm)
        return out

    @staticmethod
    def _pay_phrase(pm: Mapping[str, Any]) -> str:
        if pm["kind"] == "wallet":
            return "my JoyPay wallet"
        if pm["kind"] == "gift_card":
            return f"my gift card ending in {pm['last4']}"
        return f"my {pm['label'].replace(' ending ', ' card ending in ')}"

    def _price_range(self, p: Mapping[str, Any], rng: random.Random) -> tuple[int, int] | None:
        """A price range (cents) in which ``p`` is the unique cheapest in-stock product of its brand+category."""
        peers = self.brand_cat_in_stock[(p["brand"], p["category"])]
        i = peers.index((p["price_cents"], p["product_id"]))
        price = p["price_cents"]
        prev = peers[i - 1][0] if i > 0 else None
        if prev == price or (i + 1 < len(peers) and peers[i + 1][0] == price):
            return None
        lo = price // 1000 * 1000
        if prev is not None and lo <= prev:
            lo = price // 100 * 100
            if lo <= prev:
                return None
        hi = (price // 1000 + rng.randint(2, 8)) * 1000
        return lo, hi

    # -- templates --------------------------------------------------------------------------------------------

    def _t_cheapest(self, rng: random.Random, split: str) -> _Draft | None:
        p = self.products[rng.choice(self.in_stock_by_split[split])]
        rng_range = self._price_range(p, rng)
        if rng_range is None:
            return None
        lo, hi = rng_range
        args: dict[str, Any] = {"category": p["category"], "brand": p["brand"]}
        if lo:
            args["min_price"] = lo // 100
        args.update(max_price=hi // 100, in_stock=True, sort_by="price_asc", limit=5)
        turns = [[_call("search_products", **args)], [_call("check_stock", product_id=p["product_id"])]]
        found, details = (r[0] for r in _exec(self.db, turns))
        if found["results"][0]["product_id"] != p["product_id"]:
            return None
        what = _CATEGORY_PHRASES[p["category"]]
        span = f"between ${lo // 100} and ${hi // 100}" if lo else f"under ${hi // 100}"
        query = self._join(
            self._intro(rng),
            f"I'm looking for {what} from {p['brand']}, priced {span}, and it has to be in stock.",
            self._distractor(rng, split),
            "Which one is the cheapest, what does it cost, and how many units do you have?",
        )
        sub_query = (
            f"Find the cheapest in-stock {p['brand']} product in the {p['category']} category priced {span}; "
            "report its product id, price and units in stock."
        )
        answer = (
            f"The cheapest in-stock {p['brand']} {p['category']} item priced {span} is the {details['name']} "
            f"({details['product_id']}) at ${cents_str(p['price_cents'])}, with {details['stock']} units in stock."
        )
        return _Draft(
            query,
            sub_query,
            turns,
            answer,
            (details["product_id"], cents_str(p["price_cents"]), str(details["stock"])),
            [{"check_stock": {"product_id": [p["product_id"]]}}],
        )

    def _t_compare(self, rng: random.Random, split: str) -> _Draft | None:
        p1 = self.products[rng.choice(self.products_by_split[split])]
        peers = [
            self.products[q]
            for q in self.by_type[(split, p1["category"], p1["product_type"])]
            if self.products[q]["model_id"] != p1["model_id"]
            and self.products[q]["rating"] != p1["rating"]
            and self.products[q]["price_cents"] != p1["price_cents"]
        ]
        if not peers:
            return None
        same_brand = [q for q in peers if q["brand"] == p1["brand"]]
        p2 = rng.choice(same_brand if same_brand and rng.random() < 0.6 else peers)
        by_name = rng.random() < 0.4
        if by_name and not self._found_by_search(p2["name"], p2["product_id"]):
            by_name = False
        d1 = _call("get_product_details", product_id=p1["product_id"])
        d2 = _call("get_product_details", product_id=p2["product_id"])
        if by_name:
            turns = [[d1, _call("search_products", query=p2["name"], limit=5)], [d2]]
        else:
            turns = [[d1, d2]]
        _exec(self.db, turns)
        win, lose = (p1, p2) if p1["rating"] > p2["rating"] else (p2, p1)
        diff = cents_str(abs(p1["price_cents"] - p2["price_cents"]))
        cheaper = "more" if win["price_cents"] > lose["price_cents"] else "less"
        second = p2["name"] if by_name else f"{p2['name']} ({p2['product_id']})"
        query = self._join(
            self._intro(rng),
            f"I can't decide between the {p1['name']} ({p1['product_id']}) and the {second}.",
            self._distractor(rng, split),
            "Which one has the better customer rating, and how much more or less does it cost than the other?",
        )
        sub_query = (
            f"Compare the {p1['name']} ({p1['product_id']}) with the {second}: which has the higher rating, "
            "and what is the price difference?"
        )
        answer = (
            f"The {win['name']} ({win['product_id']}) has the better rating, {win['rating']:.1f} versus "
            f"{lose['rating']:.1f} for the {lose['name']} ({lose['product_id']}). It costs "
            f"${cents_str(win['price_cents'])} versus ${cents_str(lose['price_cents'])}, so it is ${diff} {cheaper} "
            "expensive."
        )
        facts = (win["product_id"], f"{win['rating']:.1f}", f"{lose['rating']:.1f}", diff)
        required = [
            {"get_product_details": {"product_id": [p1["product_id"]]}},
            {"get_product_details": {"product_id": [p2["product_id"]]}},
        ]
        return _Draft(query, sub_query, turns, answer, facts, required)

    def _t_tracking(self, rng: random.Random, split: str) -> _Draft | None:
        pool = self.orders_by.get((split, "shipped" if rng.random() < 0.6 else "delivered"), [])
        if not pool:
            return None
        oid = rng.choice(pool)
        uid = self.orders[oid]["user_id"]
        turns = [[_call("get_order_details", order_id=oid), _call("track_shipment", order_id=oid)]]
        ((details, track),) = _exec(self.db, turns)
        latest = track["latest_event"]
        others = [o for o in self.orders_by_user[uid] if o != oid]
        aside = (
            f"(I also have order {rng.choice(others)}, but that one is fine.)" if others and rng.random() < 0.6 else ""
        )
        query = self._join(
            self._intro(rng),
            f"This is {self.users[uid][1]}, customer id {uid}. Could you check on my order {oid}?",
            aside,
            "I'd like its status, which carrier has it and the latest tracking update.",
            self._distractor(rng, split),
        )
        sub_query = (
            f"User {uid} asks about order {oid}: report the order status, the carrier, the tracking number "
            "and the latest tracking event."
        )
        answer = (
            f"Order {oid} is {details['status']}; the latest update ({latest['time'][:10]}) is "
            f"'{latest['description']}' in {latest['location']}. It is with {track['carrier']}, tracking number "
            f"{track['tracking_number']}."
        )
        facts = (details["status"], track["carrier"], track["tracking_number"], latest["location"])
        required = [{"get_order_details": {"order_id": [oid]}}, {"track_shipment": {"order_id": [oid]}}]
        return _Draft(query, sub_query, turns, answer, facts, required)

    def _t_buy(self, rng: random.Random, split: str) -> _Draft | None:
        uid = rng.choice(self.users_by_split[split])
        cart = self.carts.get(uid, [])
        if any(q > self.products[c]["stock"] for c, q in cart):
            return None
        p = self.products[rng.choice(self.in_stock_by_split[split])]
        n = rng.choice((1, 1, 2, 3))
        if dict(cart).get(p["product_id"], 0) + n > min(p["stock"], MAX_CART_QUANTITY):
            return None
        expected = sum(self.products[c]["price_cents"] * q for c, q in cart) + n * p["price_cents"]
        usable = self._usable_payments(uid, expected)
        if not usable:
            return None
        pm = rng.choice(usable)
        by_name = rng.random() < 0.5 and self._found_by_search(p["name"], p["product_id"])
        profile = _call("get_user_profile", user_id=uid)
        add = _call("add_to_cart", user_id=uid, product_id=p["product_id"], quantity=n)
        order = _call("place_order", user_id=uid, payment_id=pm["payment_id"])
        if by_name:
            turns = [[_call("search_products", query=p["name"], limit=5), profile], [add], [order]]
            desc = f"the {p['name']}"
        else:
            turns = [[profile, add], [order]]
            desc = f"the {p['name']} ({p['product_id']})"
        try:
            placed = self._run_write(turns)[-1][0]
        except ToolError:
            return None
        note = ", together with everything that is already in my cart," if cart else ""
        query = self._join(
            self._intro(rng),
            f"I'm {self.users[uid][1]}, user {uid}. Please add {n} x {desc} to my cart and check out{note} "
            f"paying with {self._pay_phrase(pm)}.",
            self._distractor(rng, split),
            "What's the order number and the total?",
        )
        sub_query = (
            f"For user {uid}: add {n} x {desc} to the cart, then place the order for the whole cart paid with "
            f"{_their(self._pay_phrase(pm))}. Report the order id and total."
        )
        extra = " plus the items already in the cart" if cart else ""
        answer = (
            f"Order {placed['order_id']} has been placed: {n} x {p['name']}{extra}, paid with {pm['label']}; "
            f"the total is ${placed['total']}."
        )
        required = [
            {
                "add_to_cart": {
                    "user_id": [uid],
                    "product_id": [p["product_id"]],
                    "quantity": _opt(n) if n == 1 else [n],
                }
            },
            {"place_order": {"user_id": [uid], "payment_id": [pm["payment_id"]], "coupon_code": [""]}},
        ]
        return _Draft(query, sub_query, turns, answer, (placed["order_id"], placed["total"]), required)

    def _t_cancel(self, rng: random.Random, split: str) -> _Draft | None:
        pool = self.orders_by.get((split, "placed"), []) + self.orders_by.get((split, "paid"), [])
        if not pool:
            return None
        oid = rng.choice(pool)
        uid = self.orders[oid]["user_id"]
        turns = [[_call("get_order_details", order_id=oid)], [_call("cancel_order", user_id=uid, order_id=oid)]]
        try:
            result = self._run_write(turns)[-1][0]
        except ToolError:
            return None
        query = self._join(
            self._intro(rng),
            f"I'm {self.users[uid][1]} ({uid}) and I'd like to cancel my order {oid}.",
            rng.choice(_CANCEL_REASONS),
            "How much will I get back?",
        )
        sub_query = f"User {uid} wants to cancel order {oid}. Cancel it if the shop allows it and report the refund."
        answer = (
            f"Order {oid} has been cancelled and {result['refunded_to']} will be refunded ${result['refund_amount']}."
        )
        required = [{"cancel_order": {"user_id": [uid], "order_id": [oid]}}]
        return _Draft(query, sub_query, turns, answer, (oid, "cancelled", result["refund_amount"]), required)

    def _t_cancel_denied(self, rng: random.Random, split: str) -> _Draft | None:
        pool = self.orders_by.get((split, "shipped" if rng.random() < 0.6 else "delivered"), [])
        if not pool:
            return None
        oid = rng.choice(pool)
        uid = self.orders[oid]["user_id"]
        turns = [[_call("get_order_details", order_id=oid)]]
        status = _exec(self.db, turns)[0][0]["status"]
        query = self._join(
            self._intro(rng),
            f"I'm {self.users[uid][1]} ({uid}). Please cancel my order {oid}.",
            rng.choice(_CANCEL_REASONS),
            self._distractor(rng, split),
        )
        sub_query = f"User {uid} wants to cancel order {oid}. Cancel it if the shop allows it and report the result."
        answer = (
            f"Order {oid} cannot be cancelled: it has already been {status}, and only placed or paid orders "
            "can be cancelled. Nothing was changed."
        )
        return _Draft(query, sub_query, turns, answer, (oid, status), [{"get_order_details": {"order_id": [oid]}}])

    def _t_coupon(self, rng: random.Random, split: str) -> _Draft | None:
        uid = rng.choice(self.users_by_split[split])
        cart = self.carts.get(uid, [])
        adding = not cart
        if adding:
            p = self.products[rng.choice(self.in_stock_by_split[split])]
            n = rng.choice((1, 1, 2))
            if n > p["stock"]:
                return None
            lines = [(p["category"], n, p["price_cents"])]
        else:
            lines = [(self.products[c]["category"], q, self.products[c]["price_cents"]) for c, q in cart]
        want_valid = rng.random() < 0.55
        codes = list(self.coupons_by_split[split])
        rng.shuffle(codes)
        chosen, failures = None, []
        for code in codes:
            c = self.coupons[code]
            failures = coupon_failures(c, lines)
            if want_valid and not failures and coupon_discount(c["kind"], c["value"], _eligible_cents(c, lines)) > 0:
                chosen = c
                break
            if not want_valid and len(failures) == 1:
                chosen = c
                break
        if chosen is None:
            return None
        code = chosen["code"]
        first = (
            _call("add_to_cart", user_id=uid, product_id=p["product_id"], quantity=n)
            if adding
            else _call("view_cart", user_id=uid)
        )
        turns = [[first, _call("get_coupon", code=code)]]
        if want_valid:
            turns.append([_call("apply_coupon", user_id=uid, coupon_code=code)])
        try:
            results = self._run_write(turns) if adding else _exec(self.db, turns)
        except ToolError:
            return None
        cart_now = results[0][0]
        add_text = f"Please add {n} x the {p['name']} ({p['product_id']}) to my cart first." if adding else ""
        query = self._join(
            self._intro(rng),
            f"I'm {uid}.",
            add_text,
            f"Can I use coupon {code} on my cart? If it works, what's the discount and the new total?",
            self._distractor(rng, split),
        )
        sub_query = self._join(
            f"User {uid}:" if not adding else f"User {uid}: add {n} x {p['product_id']} to the cart, then",
            f"check whether coupon {code} can be used on the cart and, if so, report the discount and total.",
        )
        required: list[dict[str, Any]] = []
        if adding:
            qty = _opt(n) if n == 1 else [n]
            required.append({"add_to_cart": {"user_id": [uid], "product_id": [p["product_id"]], "quantity": qty}})
        if want_valid:
            applied = results[1][0]
            answer = (
                f"Coupon {code} applies: the discount is ${applied['discount']}, so your cart goes from "
                f"${applied['subtotal']} to ${applied['total']}."
            )
            facts: tuple[str, ...] = (code, applied["discount"], applied["total"])
            required.append({"apply_coupon": {"user_id": [uid], "coupon_code": [code]}})
        else:
            keyword = failures[0][0]
            eligible = cents_str(_eligible_cents(chosen, lines))
            minimum = cents_str(chosen["min_spend_cents"])
            why, value = {
                "inactive": ("it is inactive", None),
                "expired": (f"it expired on {chosen['expires_on']}", chosen["expires_on"]),
                "usage limit": ("it has reached its usage limit", None),
                "category": (
                    f"its category restriction limits it to {chosen['category']} items and your cart has none",
                    None,
                ),
                "minimum spend": (
                    f"your eligible subtotal of ${eligible} is below its minimum spend of ${minimum}",
                    minimum,
                ),
            }[keyword]
            answer = f"Your cart subtotal is ${cart_now['subtotal']}, but coupon {code} cannot be used: {why}."
            facts = (code, keyword) if value is None else (code, keyword, value)
            required.append({"get_coupon": {"code": [code]}})
        return _Draft(query, sub_query, turns, answer, facts, required)

    def _t_return(self, rng: random.Random, split: str) -> _Draft | None:
        pool = self.recent_delivered[split]
        if not pool:
            return None
        oid, chosen = rng.choice(pool)
        uid = self.orders[oid]["user_id"]
        lines = [line for line in self.items[oid] if line[0] == chosen and line[1] > line[3]]
        if not lines:
            return None
        pid, qty, _unit, ret = rng.choice(lines)
        q = rng.randint(1, qty - ret)
        reason = rng.choice(RETURN_REASONS)
        name = self.products[pid]["name"]
        call = _call("return_item", user_id=uid, order_id=oid, product_id=pid, reason=reason, quantity=q)
        turns = [[_call("get_order_details", order_id=oid)], [call]]
        try:
            result = self._run_write(turns)[-1][0]
        except ToolError:
            return None
        amount = f"{q} of " if qty > 1 else ""
        query = self._join(
            self._intro(rng),
            f"I'm {self.users[uid][1]} ({uid}). I want to return {amount}the {name} from order {oid} because "
            f"{_REASON_PHRASES[reason]}.",
            self._distractor(rng, split),
            "How much will be refunded?",
        )
        sub_query = (
            f"User {uid} wants to return {q} unit(s) of the {name} from order {oid} (reason: {reason}). "
            "Process the return if allowed and report the return id and refund."
        )
        answer = (
            f"Return {result['return_id']} is approved for {q} x {name} from order {oid}, refunded to "
            f"{result['refunded_to']}: the refund is ${result['refund_amount']}."
        )
        required = [
            {
                "return_item": {
                    "user_id": [uid],
                    "order_id": [oid],
                    "product_id": [pid],
                    "quantity": _opt(q) if q == 1 else [q],
                    "reason": [reason],
                }
            }
        ]
        return _Draft(query, sub_query, turns, answer, (result["return_id"], result["refund_amount"]), required)

    def _t_return_denied(self, rng: random.Random, split: str) -> _Draft | None:
        late = rng.random() < 0.7
        pool = self.old_delivered[split] if late else self.orders_by.get((split, "shipped"), [])
        if not pool:
            return None
        if late:
            oid, pid = rng.choice(pool)
        else:
            oid = rng.choice(pool)
            pid = rng.choice(self.items[oid])[0]
        uid = self.orders[oid]["user_id"]
        name = self.products[pid]["name"]
        reason = rng.choice(RETURN_REASONS)
        turns = [[_call("get_order_details", order_id=oid)]]
        details = _exec(self.db, turns)[0][0]
        item = next((i for i in details["items"] if i["product_id"] == pid), {})
        query = self._join(
            self._intro(rng),
            f"I'm {self.users[uid][1]} ({uid}). I'd like to return the {name} from order {oid} because "
            f"{_REASON_PHRASES[reason]}.",
            self._distractor(rng, split),
        )
        sub_query = (
            f"User {uid} wants to return the {name} from order {oid} (reason: {reason}). Process the return if "
            "allowed and report the result."
        )
        if late:
            answer = (
                f"The {name} from order {oid} can no longer be returned: it was delivered on "
                f"{details['delivered_at'][:10]} and its return window ended on {item['return_by']}."
            )
            facts: tuple[str, ...] = (oid, item["return_by"])
        else:
            answer = (
                f"The {name} from order {oid} cannot be returned yet: the order is still shipped and not delivered, "
                "and only delivered orders can be returned."
            )
            facts = (oid, "shipped")
        return _Draft(query, sub_query, turns, answer, facts, [{"get_order_details": {"order_id": [oid]}}])

    def _t_count(self, rng: random.Random, split: str) -> _Draft | None:
        uid = rng.choice(self.users_by_split[split])
        status = rng.choice(("delivered", "delivered", "delivered", "cancelled", "returned", "shipped"))
        turns = [[_call("list_user_orders", user_id=uid, status=status)]]
        listing = _exec(self.db, turns)[0][0]
        count = listing["count"]
        if count == 0 or count > 10:  # all of them fit in the default page
            return None
        total = cents_str(sum(self.orders[o["order_id"]]["total_cents"] for o in listing["orders"]))
        query = self._join(
            self._intro(rng),
            f"How many of my orders are {status}, and how much did those orders come to in total? My user id is {uid}.",
            self._distractor(rng, split),
        )
        sub_query = f"Count user {uid}'s orders with status {status} and add up their totals."
        ids = ", ".join(o["order_id"] for o in listing["orders"])
        answer = f"You have {count} {status} order{'s' if count != 1 else ''} ({ids}), totalling ${total}."
        pages: list[Any] = ["", *range(count, 21)]  # any limit that lists every order
        required = [{"list_user_orders": {"user_id": [uid], "status": [status], "limit": pages}}]
        return _Draft(query, sub_query, turns, answer, (str(count), total), required)

    def _t_stock_variant(self, rng: random.Random, split: str) -> _Draft | None:
        models = self.models_by_split[split]
        if not models:
            return None
        p = self.products[rng.choice(self.models[rng.choice(models)])]
        args: dict[str, Any] = {"query": p["model_name"]}
        bits = []
        if p["colour"]:
            args["colour"] = p["colour"]
            bits.append(p["colour"])
        if p["size"]:
            args["size"] = p["size"]
            bits.append(
                p["size"]
                if p["size"] in ("Paperback", "Hardcover") or p["size"].endswith("ml")
                else f"size {p['size']}"
            )
        args["limit"] = 10
        turns = [[_call("search_products", **args)], [_call("check_stock", product_id=p["product_id"])]]
        found, stock = (r[0] for r in _exec(self.db, turns))
        if not any(r["product_id"] == p["product_id"] for r in found["results"]):
            return None
        variant = " in " + ", ".join(bits)
        query = self._join(
            self._intro(rng),
            f"Do you have the {p['model_name']}{variant}? How many are in stock?",
            self._distractor(rng, split),
        )
        sub_query = f"Find the {p['model_name']}{variant} and check how many units are in stock."
        if stock["stock"] > 0:
            answer = f"Yes, the {p['name']} ({p['product_id']}) is in stock: {stock['stock']} units available."
        else:
            answer = f"Sorry, the {p['name']} ({p['product_id']}) is out of stock (0 units)."
        required = [{"check_stock": {"product_id": [p["product_id"]]}}]
        return _Draft(query, sub_query, turns, answer, (p["product_id"], str(stock["stock"])), required)

    def _t_remove(self, rng: random.Random, split: str) -> _Draft | None:
        uid = rng.choice(self.users_by_split[split])
        cart = self.carts.get(uid, [])
        if len(cart) < 2:
            return None
        pid, qty = rng.choice(cart)
        name = self.products[pid]["name"]
        turns = [[_call("view_cart", user_id=uid)], [_call("remove_from_cart", user_id=uid, product_id=pid)]]
        try:
            after = self._run_write(turns)[-1][0]
        except ToolError:
            return None
        query = self._join(
            self._intro(rng),
            f"Please take the {name} out of my cart, I'm {uid}.",
            self._distractor(rng, split),
            "What's my cart subtotal after that?",
        )
        sub_query = f"Remove the {name} completely from user {uid}'s cart and report the new cart subtotal."
        answer = (
            f"The {name} has been removed from your cart; it now holds {after['item_count']} item(s) with a "
            f"subtotal of ${after['subtotal']}."
        )
        whole: list[Any] = ["", *range(qty, MAX_CART_QUANTITY + 1)]  # any quantity that removes the line
        required = [{"remove_from_cart": {"user_id": [uid], "product_id": [pid], "quantity": whole}}]
        return _Draft(query, sub_query, turns, answer, (after["subtotal"],), required)

    def _t_buy_cheapest_coupon(self, rng: random.Random, split: str) -> _Draft | None:
        uid = rng.choice(self.users_by_split[split])
        if self.carts.get(uid):
            return None
        p = self.products[rng.choice(self.in_stock_by_split[split])]
        rng_range = self._price_range(p, rng)
        if rng_range is None:
            return None
        lo, hi = rng_range
        lines = [(p["category"], 1, p["price_cents"])]
        valid = []
        for code in self.coupons_by_split[split]:
            c = self.coupons[code]
            if not coupon_failures(c, lines) and coupon_discount(c["kind"], c["value"], p["price_cents"]) > 0:
                valid.append(c)
        if not valid:
            return None
        coupon = rng.choice(valid)
        total = p["price_cents"] - coupon_discount(coupon["kind"], coupon["value"], p["price_cents"])
        usable = self._usable_payments(uid, total)
        if not usable:
            return None
        pm = rng.choice(usable)
        args: dict[str, Any] = {"category": p["category"], "brand": p["brand"]}
        if lo:
            args["min_price"] = lo // 100
        args.update(max_price=hi // 100, in_stock=True, sort_by="price_asc", limit=5)
        turns = [
            [_call("search_products", **args), _call("get_user_profile", user_id=uid)],
            [_call("add_to_cart", user_id=uid, product_id=p["product_id"], quantity=1)],
            [_call("place_order", user_id=uid, payment_id=pm["payment_id"], coupon_code=coupon["code"])],
        ]
        try:
            results = self._run_write(turns)
        except ToolError:
            return None
        if results[0][0]["results"][0]["product_id"] != p["product_id"]:
            return None
        placed = results[-1][0]
        what = _CATEGORY_PHRASES[p["category"]]
        span = f"between ${lo // 100} and ${hi // 100}" if lo else f"under ${hi // 100}"
        query = self._join(
            self._intro(rng),
            f"I'm {self.users[uid][1]} ({uid}). Please buy me the cheapest in-stock {what} from {p['brand']} priced "
            f"{span}, just one unit, using coupon {coupon['code']} and paying with {self._pay_phrase(pm)}.",
            self._distractor(rng, split),
            "Tell me which product you picked, the order number and the total.",
        )
        sub_query = (
            f"For user {uid}: find the cheapest in-stock {p['brand']} product in the {p['category']} category "
            f"priced {span}, add one unit to the cart and place the order with coupon {coupon['code']}, paid "
            f"with {_their(self._pay_phrase(pm))}."
        )
        answer = (
            f"I ordered the {p['name']} ({p['product_id']}) with coupon {coupon['code']}, paid with {pm['label']}: "
            f"order {placed['order_id']}, total ${placed['total']}."
        )
        required = [
            {"add_to_cart": {"user_id": [uid], "product_id": [p["product_id"]], "quantity": _opt(1)}},
            {
                "place_order": {
                    "user_id": [uid],
                    "payment_id": [pm["payment_id"]],
                    "coupon_code": [coupon["code"]],
                }
            },
        ]
        return _Draft(query, sub_query, turns, answer, (p["product_id"], placed["order_id"], placed["total"]), required)

    def _t_latest_shipment(self, rng: random.Random, split: str) -> _Draft | None:
        pool = self.orders_by.get((split, "shipped"), [])
        if not pool:
            return None
        uid = self.orders[rng.choice(pool)]["user_id"]
        turns = [[_call("list_user_orders", user_id=uid, status="shipped")]]
        listing = _exec(self.db, turns)[0][0]
        oid = listing["orders"][0]["order_id"]
        turns.append([_call("track_shipment", order_id=oid)])
        track = _exec(self.db, turns[1:])[0][0]
        latest = track["latest_event"]
        query = self._join(
            self._intro(rng),
            f"I'm {uid}. I have a package on the way but lost the confirmation email.",
            "Where is my most recent order that has shipped, and which carrier has it?",
            self._distractor(rng, split),
        )
        sub_query = (
            f"Find user {uid}'s most recent order with status shipped and report its carrier and latest tracking event."
        )
        answer = (
            f"Your most recent shipped order is {oid}; it is with {track['carrier']} (tracking number "
            f"{track['tracking_number']}) and the latest update is '{latest['description']}' in {latest['location']}."
        )
        facts = (oid, track["carrier"], latest["location"], track["tracking_number"])
        return _Draft(query, sub_query, turns, answer, facts, [{"track_shipment": {"order_id": [oid]}}])


def task_source(seed: int, db: sqlite3.Connection) -> EcommerceTaskSource:
    """The e-commerce task source of ``seed``; ``db`` is the pristine ``build_db(seed)`` (only read)."""
    return EcommerceTaskSource(seed, db)


# ---------------------------------------------------------------------------------------------------------
# parts for collaborative (mixed) tasks


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
        search = _call("search_products", query=name, limit=5)
        found = search_products(ctx, **search["arguments"])
        details = get_product_details(ctx, pid)
        if any(r["product_id"] == pid for r in found["results"]) and _facts_distinct(
            f"{name} ({pid}) ${details['price']}", (pid, details["price"])
        ):
            break
    sub = SubTask(
        agent="ecommerce",
        query=f"What is the current unit price of the {name}? Look it up in the shop catalog.",
        turns=((search,), (_call("get_product_details", product_id=pid),)),
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
        if _facts_distinct(f"{oid} {uid} {first['name']} {details['total']} {delivered or ''}", facts):
            break
    call = _call("get_order_details", order_id=oid)
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
