"""The shop tools: parameterised SQL on the domain's SQLite database (see :mod:`joy_env.domains.ecommerce`)."""

from __future__ import annotations

import math
import re
from typing import Any

from joy_env.core import ToolContext, ToolError
from joy_env.domains.ecommerce.db import (
    MAX_CART_QUANTITY,
    NOW,
    ORDER_STATUSES,
    TODAY,
    TODAY_DATE,
    cents_str,
    refund_cents,
)
from joy_env.domains.ecommerce.helpers import (
    ORDER_COLS,
    PRODUCT_COLS,
    PRODUCT_KEYS,
    RETURN_REASONS,
    SORTS,
    STOPWORDS,
    atomic,
    cart_lines,
    cart_summary,
    checked_discount,
    coupon_row,
    echo,
    ident,
    int_arg,
    money_arg,
    next_id,
    order_row,
    own_order,
    product_row,
    return_deadline,
    shop_db,
    summary,
    user_row,
    window_days,
)


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
    conn = shop_db(ctx)
    where: list[str] = []
    params: list[Any] = []
    tokens = [t for t in re.findall(r"[a-z0-9]+", str(query).lower()) if t not in STOPWORDS][:10]
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
        params.append(money_arg(min_price, "min_price"))
    if max_price is not None:
        where.append("price_cents <= ?")
        params.append(money_arg(max_price, "max_price"))
    if min_rating is not None:
        where.append("rating >= ?")
        params.append(float(min_rating) if math.isfinite(float(min_rating)) else 0.0)
    if in_stock:
        where.append("stock > 0")
    if sort_by not in SORTS:
        raise ToolError(f"sort_by must be one of {sorted(SORTS)}")
    limit = int_arg(limit, "limit", 1, 20)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    rows = conn.execute(  # one scan: the window count sees every match before LIMIT
        f"SELECT {PRODUCT_COLS}, COUNT(*) OVER () FROM products {clause} ORDER BY {SORTS[sort_by]} LIMIT ?",
        [*params, limit],
    ).fetchall()
    count = rows[0][-1] if rows else 0
    return {"count": count, "results": [summary(dict(zip(PRODUCT_KEYS, r[:-1], strict=True))) for r in rows]}


def get_product_details(ctx: ToolContext, product_id: str) -> dict[str, Any]:
    """The full record of one product and the other variants of its model."""
    conn = shop_db(ctx)
    p = product_row(conn, product_id)
    variants = conn.execute(
        "SELECT product_id, colour, size, stock FROM products WHERE model_id = ? AND product_id != ? "
        "ORDER BY product_id LIMIT 10",
        (p["model_id"], p["product_id"]),
    ).fetchall()
    out = summary(p)
    out.update(
        model=p["model_name"],
        product_type=p["product_type"],
        description=p["description"],
        other_variants=[{"product_id": v[0], "colour": v[1], "size": v[2], "in_stock": v[3] > 0} for v in variants],
    )
    return out


def check_stock(ctx: ToolContext, product_id: str) -> dict[str, Any]:
    """Units in stock of one product."""
    p = product_row(shop_db(ctx), product_id)
    return {"product_id": p["product_id"], "name": p["name"], "stock": p["stock"], "in_stock": p["stock"] > 0}


def get_user_profile(ctx: ToolContext, user_id: str) -> dict[str, Any]:
    """Name, shipping address and payment methods of a user."""
    conn = shop_db(ctx)
    uid, name, email, street, city, state, zipcode = user_row(conn, user_id)
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
    conn = shop_db(ctx)
    return cart_summary(conn, user_row(conn, user_id)[0])


def add_to_cart(ctx: ToolContext, user_id: str, product_id: str, quantity: int = 1) -> dict[str, Any]:
    """Add ``quantity`` units of a product to the cart (total per product <= stock and <= 10)."""
    conn = shop_db(ctx)
    uid = user_row(conn, user_id)[0]
    p = product_row(conn, product_id)
    qty = int_arg(quantity, "quantity", 1, MAX_CART_QUANTITY)
    with atomic(conn):
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
    return cart_summary(conn, uid)


def remove_from_cart(ctx: ToolContext, user_id: str, product_id: str, quantity: int | None = None) -> dict[str, Any]:
    """Remove ``quantity`` units (default: the whole line) of a product from the cart."""
    conn = shop_db(ctx)
    uid = user_row(conn, user_id)[0]
    pid = ident(product_id, "product_id")
    with atomic(conn):
        row = conn.execute(
            "SELECT quantity FROM cart_items WHERE user_id = ? AND product_id = ?", (uid, pid)
        ).fetchone()
        if row is None:
            raise ToolError(f"product '{echo(pid)}' is not in the cart of user {uid}")
        qty = row[0] if quantity is None else int_arg(quantity, "quantity", 1, 1000)
        if qty >= row[0]:
            conn.execute("DELETE FROM cart_items WHERE user_id = ? AND product_id = ?", (uid, pid))
        else:
            conn.execute(
                "UPDATE cart_items SET quantity = ? WHERE user_id = ? AND product_id = ?", (row[0] - qty, uid, pid)
            )
    return cart_summary(conn, uid)


def get_coupon(ctx: ToolContext, code: str) -> dict[str, Any]:
    """The rules of a coupon."""
    c = coupon_row(shop_db(ctx), code)
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
    conn = shop_db(ctx)
    uid = user_row(conn, user_id)[0]
    lines = cart_lines(conn, uid)
    if not lines:
        raise ToolError(f"the cart of user {uid} is empty")
    coupon, eligible, discount = checked_discount(conn, coupon_code, [(x[2], x[3], x[4]) for x in lines])
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
    conn = shop_db(ctx)
    user = user_row(conn, user_id)
    uid = user[0]
    pmid = ident(payment_id, "payment_id")
    with atomic(conn):
        lines = cart_lines(conn, uid)
        if not lines:
            raise ToolError(f"the cart of user {uid} is empty; add products before placing an order")
        pm = conn.execute(
            "SELECT user_id, kind, label, expires, balance_cents FROM payment_methods WHERE payment_id = ?", (pmid,)
        ).fetchone()
        if pm is None or pm[0] != uid:
            raise ToolError(
                f"payment method '{echo(pmid)}' is not one of user {uid}'s payment methods (see get_user_profile)"
            )
        if pm[1] == "card" and pm[3] < TODAY[:7]:
            raise ToolError(f"the card {pm[2]} ({pmid}) expired in {pm[3]}")
        for pid, _name, _cat, qty, _price, stock in lines:
            if qty > stock:
                raise ToolError(f"insufficient stock for {pid}: {qty} in the cart, only {stock} in stock")
        subtotal = sum(x[3] * x[4] for x in lines)
        code, discount = None, 0
        if str(coupon_code).strip():
            coupon, _eligible, discount = checked_discount(conn, coupon_code, [(x[2], x[3], x[4]) for x in lines])
            code = coupon["code"]
        total = subtotal - discount
        if pm[4] is not None and pm[4] < total:
            raise ToolError(
                f"insufficient balance on {pm[2]} ({pmid}): balance {cents_str(pm[4])}, order total {cents_str(total)}"
            )
        oid = next_id(conn, "orders", "order_id", "O", 30001)
        address = f"{user[3]}, {user[4]}, {user[5]} {user[6]}"
        conn.execute(
            f"INSERT INTO orders ({ORDER_COLS}) VALUES (?, ?, 'placed', ?, ?, ?, ?, ?, ?, ?, NULL, NULL)",
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
    conn = shop_db(ctx)
    o = order_row(conn, order_id)
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
            item["return_by"] = return_deadline(conn, o["delivered_at"], item["category"]).isoformat()
    if o["cancelled_at"]:
        out["cancelled_at"] = o["cancelled_at"]
    return out


def list_user_orders(ctx: ToolContext, user_id: str, status: str = "", limit: int = 10) -> dict[str, Any]:
    """The user's orders (optionally of one status), newest first; ``count`` counts all matches."""
    conn = shop_db(ctx)
    uid = user_row(conn, user_id)[0]
    status = str(status).strip().lower()
    if status and status not in ORDER_STATUSES:
        raise ToolError(f"status must be one of {list(ORDER_STATUSES)}")
    limit = int_arg(limit, "limit", 1, 20)
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
    conn = shop_db(ctx)
    o = order_row(conn, order_id)
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
    conn = shop_db(ctx)
    with atomic(conn):
        o = own_order(conn, user_id, order_id)
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
    conn = shop_db(ctx)
    if reason not in RETURN_REASONS:
        raise ToolError(f"reason must be one of {list(RETURN_REASONS)}")
    qty = int_arg(quantity, "quantity", 1, 1000)
    with atomic(conn):
        o = own_order(conn, user_id, order_id)
        if o["status"] != "delivered":
            raise ToolError(f"order {o['order_id']} is {o['status']}; only delivered orders can be returned")
        pid = ident(product_id, "product_id")
        item = conn.execute(
            "SELECT i.quantity, i.unit_price_cents, i.returned_quantity, p.category FROM order_items i "
            "JOIN products p ON p.product_id = i.product_id WHERE i.order_id = ? AND i.product_id = ?",
            (o["order_id"], pid),
        ).fetchone()
        if item is None:
            raise ToolError(f"product '{echo(pid)}' is not part of order {o['order_id']}")
        deadline = return_deadline(conn, o["delivered_at"], item[3])
        if TODAY_DATE > deadline:
            raise ToolError(
                f"the {window_days(conn, item[3])}-day return window for {item[3]} items of order {o['order_id']} "
                f"ended on {deadline.isoformat()} (delivered {o['delivered_at'][:10]}, today is {TODAY})"
            )
        left = item[0] - item[2]
        if qty > left:
            raise ToolError(f"only {left} unit(s) of {pid} in order {o['order_id']} can still be returned")
        refund = refund_cents(item[1], qty, o["subtotal_cents"], o["discount_cents"])
        rid = next_id(conn, "returns", "return_id", "R", 70001)
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
