"""Helpers of the shop tools: argument checks, row lookups, carts, coupon rules and return windows."""

from __future__ import annotations

import datetime as dt
import math
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from joy_env.core import ToolContext, ToolError
from joy_env.domains.ecommerce.db import RETURN_WINDOW_DAYS, TODAY, cents_str, coupon_discount

RETURN_REASONS = ("damaged", "defective", "wrong_item", "wrong_size", "not_as_described", "changed_mind")
SORTS = {
    "name": "name ASC, product_id ASC",
    "price_asc": "price_cents ASC, product_id ASC",
    "price_desc": "price_cents DESC, product_id ASC",
    "rating_desc": "rating DESC, price_cents ASC, product_id ASC",
}
STOPWORDS = frozenset({"a", "an", "the", "for", "with", "and", "or", "of", "in", "to", "by", "from", "on", "my"})
PRODUCT_COLS = (
    "product_id, model_id, name, model_name, brand, category, product_type, colour, size, price_cents, "
    "rating, stock, description"
)
PRODUCT_KEYS = tuple(c.strip() for c in PRODUCT_COLS.split(","))
ORDER_COLS = (
    "order_id, user_id, status, created_at, payment_id, coupon_code, subtotal_cents, discount_cents, "
    "total_cents, ship_address, delivered_at, cancelled_at"
)


def shop_db(ctx: ToolContext) -> sqlite3.Connection:
    if ctx.db is None:
        raise ToolError("the shop database is not available")
    return ctx.db


def echo(value: Any) -> str:
    """Agent text made safe to quote in a message: printable ASCII, at most 40 characters."""
    text = "".join(ch for ch in str(value) if 32 <= ord(ch) < 127)
    return text[:40] + ("..." if len(text) > 40 else "")


def ident(value: Any, what: str) -> str:
    text = str(value).strip().upper()
    if not text:
        raise ToolError(f"{what} must not be empty")
    return text


def money_arg(value: Any, what: str) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ToolError(f"{what} must be a number") from None
    if not math.isfinite(number) or number < 0:
        raise ToolError(f"{what} must be a non-negative number")
    return int(round(min(number, 1e9) * 100))


def int_arg(value: Any, what: str, lo: int, hi: int) -> int:
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
def atomic(conn: sqlite3.Connection) -> Iterator[None]:
    """All-or-nothing block: a savepoint released on success, rolled back on any exception."""
    conn.execute("SAVEPOINT ecommerce_tool")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK TO ecommerce_tool")
        conn.execute("RELEASE ecommerce_tool")
        raise
    conn.execute("RELEASE ecommerce_tool")


def product_row(conn: sqlite3.Connection, product_id: Any) -> dict[str, Any]:
    pid = ident(product_id, "product_id")
    row = conn.execute(f"SELECT {PRODUCT_COLS} FROM products WHERE product_id = ?", (pid,)).fetchone()
    if row is None:
        raise ToolError(f"unknown product_id '{echo(pid)}' (product ids look like P1001)")
    return dict(zip([c.strip() for c in PRODUCT_COLS.split(",")], row, strict=True))


def user_row(conn: sqlite3.Connection, user_id: Any) -> tuple:
    uid = ident(user_id, "user_id")
    row = conn.execute(
        "SELECT user_id, name, email, street, city, state, zip FROM users WHERE user_id = ?", (uid,)
    ).fetchone()
    if row is None:
        raise ToolError(f"unknown user_id '{echo(uid)}' (user ids look like U2001)")
    return row


def order_row(conn: sqlite3.Connection, order_id: Any) -> dict[str, Any]:
    oid = ident(order_id, "order_id")
    row = conn.execute(f"SELECT {ORDER_COLS} FROM orders WHERE order_id = ?", (oid,)).fetchone()
    if row is None:
        raise ToolError(f"unknown order_id '{echo(oid)}' (order ids look like O30001)")
    return dict(zip([c.strip() for c in ORDER_COLS.split(",")], row, strict=True))


def own_order(conn: sqlite3.Connection, user_id: Any, order_id: Any) -> dict[str, Any]:
    uid = user_row(conn, user_id)[0]
    order = order_row(conn, order_id)
    if order["user_id"] != uid:
        raise ToolError(f"order {order['order_id']} does not belong to user {uid}")
    return order


def summary(p: Mapping[str, Any]) -> dict[str, Any]:
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


def next_id(conn: sqlite3.Connection, table: str, column: str, prefix: str, first: int) -> str:
    """Next sequential id (ids have a fixed width, so text order is numeric order)."""
    # table / column are module constants, never agent text
    row = conn.execute(f"SELECT {column} FROM {table} ORDER BY {column} DESC LIMIT 1").fetchone()
    return f"{prefix}{max(first - 1, int(row[0][1:]) if row else 0) + 1}"


def cart_lines(conn: sqlite3.Connection, uid: str) -> list[tuple]:
    """``(product_id, name, category, quantity, price_cents, stock)`` of the cart, by product id."""
    return conn.execute(
        "SELECT c.product_id, p.name, p.category, c.quantity, p.price_cents, p.stock FROM cart_items c "
        "JOIN products p ON p.product_id = c.product_id WHERE c.user_id = ? ORDER BY c.product_id",
        (uid,),
    ).fetchall()


def cart_summary(conn: sqlite3.Connection, uid: str) -> dict[str, Any]:
    lines = cart_lines(conn, uid)
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


COUPON_COLS = "code, description, kind, value, min_spend_cents, category, expires_on, usage_limit, used_count, active"


def coupon_row(conn: sqlite3.Connection, code: Any) -> dict[str, Any]:
    text = ident(code, "coupon code")
    row = conn.execute(f"SELECT {COUPON_COLS} FROM coupons WHERE code = ?", (text,)).fetchone()
    if row is None:
        raise ToolError(f"unknown coupon code '{echo(text)}'")
    return dict(zip([c.strip() for c in COUPON_COLS.split(",")], row, strict=True))


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
    eligible = eligible_cents(coupon, lines)
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


def eligible_cents(coupon: Mapping[str, Any], lines: list[tuple[str, int, int]]) -> int:
    return sum(q * c for cat, q, c in lines if coupon["category"] in (None, cat))


def checked_discount(conn: sqlite3.Connection, code: Any, lines: list[tuple[str, int, int]]) -> tuple[dict, int, int]:
    """``(coupon, eligible_cents, discount_cents)`` or ToolError naming the first broken rule."""
    coupon = coupon_row(conn, code)
    failures = coupon_failures(coupon, lines)
    if failures:
        raise ToolError(failures[0][1])
    eligible = eligible_cents(coupon, lines)
    return coupon, eligible, coupon_discount(coupon["kind"], coupon["value"], eligible)


def window_days(conn: sqlite3.Connection, category: str) -> int:
    row = conn.execute("SELECT days FROM return_windows WHERE category = ?", (category,)).fetchone()
    return int(row[0]) if row else RETURN_WINDOW_DAYS


def return_deadline(conn: sqlite3.Connection, delivered_at: str, category: str) -> dt.date:
    """Last day to return an item of ``category`` delivered at ``delivered_at``."""
    return dt.date.fromisoformat(delivered_at[:10]) + dt.timedelta(days=window_days(conn, category))
