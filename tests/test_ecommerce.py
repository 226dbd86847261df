"""The e-commerce domain: database generator, tools and their business rules, tasks, splits, parts."""

from __future__ import annotations

import inspect
import json
import random
import re
import sqlite3
import time

import pytest

from joy_env import database
from joy_env.core import SPLITS, Domain, SubTask, ToolContext, ToolError
from joy_env.domains import ecommerce as E
from joy_env.domains.ecommerce.db import ORDER_STATUSES, split_of
from joy_env.rewards import call_matches, score_facts
from joy_env.schema import validate

SEED = 0
TOOLS = {t.name: t for t in E.TOOLS}
SQL_TEXT = "'; DROP TABLE products; --"


@pytest.fixture(scope="module")
def pristine() -> sqlite3.Connection:
    return E.build_db(SEED)


@pytest.fixture(scope="module")
def image(pristine: sqlite3.Connection) -> bytes:
    return database.image(pristine)


@pytest.fixture(scope="module")
def source(pristine: sqlite3.Connection) -> E.EcommerceTaskSource:
    return E.task_source(SEED, pristine)


@pytest.fixture()
def db(image: bytes) -> sqlite3.Connection:
    """A fresh writable copy of the shop for one test."""
    return database.load(image)


def call(conn: sqlite3.Connection, name: str, _schema_valid: bool = True, **arguments):
    """Call a tool as the env does (arguments valid for its schema) or, with ``_schema_valid=False``,
    with arguments the env would have refused (defence in depth)."""
    tool = TOOLS[name]
    assert bool(validate(arguments, tool.parameters)) != _schema_valid, (name, arguments)
    return tool.fn(ToolContext(conn), **arguments)


def one(conn: sqlite3.Connection, sql: str, params: tuple = ()):
    return conn.execute(sql, params).fetchone()


def state(conn: sqlite3.Connection) -> bytes:
    """Everything in the database, the audit log included (a rolled-back write leaves no trace)."""
    return database.image(conn)


def cents(text: str) -> int:
    whole, frac = text.split(".")
    return int(whole) * 100 + int(frac)


# ---------------------------------------------------------------------------------------------------
# database


def test_db_sizes_and_contents(pristine: sqlite3.Connection):
    assert one(pristine, "SELECT COUNT(*) FROM products")[0] >= 500
    assert one(pristine, "SELECT COUNT(DISTINCT category) FROM products")[0] >= 6
    assert one(pristine, "SELECT COUNT(*) FROM users")[0] >= 200
    assert one(pristine, "SELECT COUNT(*) FROM orders")[0] >= 1000
    statuses = {r[0] for r in pristine.execute("SELECT DISTINCT status FROM orders")}
    assert statuses == set(ORDER_STATUSES)
    assert one(pristine, "SELECT COUNT(*) FROM products WHERE stock = 0")[0] > 0
    assert one(pristine, "SELECT MIN(rating), MAX(rating) FROM products") >= (1.0, 0)
    assert one(pristine, "SELECT MAX(rating) FROM products")[0] <= 5.0
    kinds = {r[0] for r in pristine.execute("SELECT DISTINCT kind FROM payment_methods")}
    assert kinds == {"card", "wallet", "gift_card"}
    for table in ("cart_items", "coupons", "shipments", "tracking_events", "returns", "order_items"):
        assert one(pristine, f"SELECT COUNT(*) FROM {table}")[0] > 0, table
    # look-alike distractors: several models share a brand and a line
    assert one(pristine, "SELECT COUNT(*) FROM products WHERE model_name LIKE '% Pro %'")[0] > 0
    # no audit rows in a pristine database
    assert one(pristine, "SELECT COUNT(*) FROM _audit")[0] == 0


def test_db_is_ascii_and_ids_are_well_formed(pristine: sqlite3.Connection):
    for table in ("products", "users", "payment_methods", "orders", "coupons", "tracking_events", "returns"):
        for row in pristine.execute(f"SELECT * FROM {table}"):
            for value in row:
                if isinstance(value, str):
                    assert value.isascii() and value.isprintable(), (table, value)
    assert all(re.fullmatch(r"P\d{4}", r[0]) for r in pristine.execute("SELECT product_id FROM products"))
    assert all(re.fullmatch(r"U\d{4}", r[0]) for r in pristine.execute("SELECT user_id FROM users"))
    assert all(re.fullmatch(r"O\d{5}", r[0]) for r in pristine.execute("SELECT order_id FROM orders"))


def test_order_amounts_are_consistent(pristine: sqlite3.Connection):
    bad = pristine.execute(
        "SELECT o.order_id FROM orders o JOIN (SELECT order_id, SUM(quantity * unit_price_cents) s "
        "FROM order_items GROUP BY order_id) i ON i.order_id = o.order_id "
        "WHERE o.subtotal_cents != i.s OR o.total_cents != o.subtotal_cents - o.discount_cents "
        "OR o.discount_cents < 0 OR o.discount_cents > o.subtotal_cents"
    ).fetchall()
    assert bad == []
    # shipped / delivered / returned orders have a shipment, the others none
    assert (
        one(
            pristine,
            "SELECT COUNT(*) FROM orders o LEFT JOIN shipments s ON s.order_id = o.order_id "
            "WHERE (o.status IN ('shipped', 'delivered', 'returned')) != (s.order_id IS NOT NULL)",
        )[0]
        == 0
    )
    # events never lie in the future of the simulated clock
    assert one(pristine, "SELECT MAX(ts) FROM tracking_events")[0] <= E.NOW
    assert one(pristine, "SELECT COUNT(*) FROM orders WHERE status = 'delivered' AND delivered_at IS NULL")[0] == 0


def test_build_db_is_deterministic_and_fast():
    start = time.process_time()  # CPU time: robust to a busy machine
    a = E.build_db(7)
    assert time.process_time() - start < 1.0
    b = E.build_db(7)
    assert database.image(a) == database.image(b)
    assert database.image(a) != database.image(E.build_db(8))


def test_audit_covers_written_tables(pristine: sqlite3.Connection):
    triggers = {r[0] for r in pristine.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    for table, pk in E.AUDIT.items():
        cols = {r[1] for r in pristine.execute(f"PRAGMA table_info({table})")}
        assert set(pk) <= cols
        assert f"_audit_{table}_insert" in triggers


def test_domain_object():
    d = E.domain()
    assert isinstance(d, Domain)
    assert d.agent == "ecommerce" and d.tools == E.TOOLS and d.audit == E.AUDIT
    assert d.build_db is E.build_db and "2026-06-01" in d.system_prompt


# ---------------------------------------------------------------------------------------------------
# tools


def test_tool_schemas_are_valid():
    allowed = {"type", "properties", "required", "enum", "items", "minimum", "maximum", "maxLength", "default"}
    assert len(E.TOOLS) >= 12 and len(TOOLS) == len(E.TOOLS)
    assert any(t.writes for t in E.TOOLS) and any(not t.writes for t in E.TOOLS)
    for tool in E.TOOLS:
        schema = tool.parameters
        assert schema["type"] == "object"
        assert set(schema["required"]) <= set(schema["properties"])
        params = inspect.signature(tool.fn).parameters
        assert list(params)[0] == "ctx"
        assert set(params) - {"ctx"} == set(schema["properties"]), tool.name
        for name, prop in schema["properties"].items():
            assert set(prop) - {"description"} <= allowed, (tool.name, name)
            assert prop["type"] in ("string", "integer", "number", "boolean")
            has_default = params[name].default is not inspect.Parameter.empty
            assert has_default == (name not in schema["required"]), (tool.name, name)
        json.dumps(tool.schema())
        assert tool.description.isascii()


def test_read_tools_happy_path(pristine: sqlite3.Connection):
    found = call(pristine, "search_products", category="shoes", in_stock=True, sort_by="price_asc", limit=20)
    assert 0 < len(found["results"]) <= 20 and found["count"] >= len(found["results"])
    prices = [cents(r["price"]) for r in found["results"]]
    assert prices == sorted(prices) and all(r["in_stock"] and r["category"] == "shoes" for r in found["results"])
    rated = call(pristine, "search_products", min_rating=4.5, sort_by="rating_desc")
    assert all(r["rating"] >= 4.5 for r in rated["results"])
    assert call(pristine, "search_products", query="zzzz nothing")["results"] == []

    pid = found["results"][0]["product_id"]
    details = call(pristine, "get_product_details", product_id=pid.lower())
    assert details["product_id"] == pid and details["in_stock"] and "stock" not in details
    variants = one(
        pristine,
        "SELECT COUNT(*) - 1 FROM products WHERE model_id = (SELECT model_id FROM products WHERE product_id = ?)",
        (pid,),
    )[0]
    assert len(details["other_variants"]) == min(variants, 10)
    stock = one(pristine, "SELECT stock FROM products WHERE product_id = ?", (pid,))[0]
    assert call(pristine, "check_stock", product_id=pid)["stock"] == stock > 0

    uid = one(pristine, "SELECT user_id FROM cart_items LIMIT 1")[0]
    profile = call(pristine, "get_user_profile", user_id=uid)
    assert profile["payment_methods"] and profile["shipping_address"]
    cart = call(pristine, "view_cart", user_id=uid)
    assert cents(cart["subtotal"]) == sum(cents(i["line_total"]) for i in cart["items"])

    oid = one(pristine, "SELECT order_id FROM orders WHERE status = 'delivered' LIMIT 1")[0]
    order = call(pristine, "get_order_details", order_id=oid)
    assert order["status"] == "delivered" and order["items"] and all("return_by" in i for i in order["items"])
    track = call(pristine, "track_shipment", order_id=oid)
    assert track["latest_event"]["description"] == "Delivered" and track["carrier"] == order["carrier"]
    owner = order["user_id"]
    listing = call(pristine, "list_user_orders", user_id=owner, status="delivered", limit=20)
    assert oid in [o["order_id"] for o in listing["orders"]]
    assert (
        listing["count"]
        == one(pristine, "SELECT COUNT(*) FROM orders WHERE user_id = ? AND status = 'delivered'", (owner,))[0]
    )
    created = [o["created_at"] for o in listing["orders"]]
    assert created == sorted(created, reverse=True)
    code = one(pristine, "SELECT code FROM coupons LIMIT 1")[0]
    assert call(pristine, "get_coupon", code=code.lower())["code"] == code


def _buyer(conn: sqlite3.Connection) -> tuple[str, str]:
    """A user with an empty cart and an unexpired card."""
    return one(
        conn,
        "SELECT u.user_id, p.payment_id FROM users u JOIN payment_methods p ON p.user_id = u.user_id "
        "WHERE p.kind = 'card' AND p.expires >= '2026-06' AND u.user_id NOT IN (SELECT user_id FROM cart_items) "
        "ORDER BY u.user_id LIMIT 1",
    )


def test_cart_and_order_happy_path(db: sqlite3.Connection):
    uid, pmid = _buyer(db)
    pid, stock, price = one(db, "SELECT product_id, stock, price_cents FROM products WHERE stock >= 5 LIMIT 1")
    cart = call(db, "add_to_cart", user_id=uid, product_id=pid, quantity=3)
    assert cart["items"][0]["quantity"] == 3
    cart = call(db, "remove_from_cart", user_id=uid, product_id=pid, quantity=1)
    assert cart["items"][0]["quantity"] == 2 and cents(cart["subtotal"]) == 2 * price
    placed = call(db, "place_order", user_id=uid, payment_id=pmid)
    assert placed["status"] == "placed" and cents(placed["total"]) == 2 * price
    assert placed["order_id"] == "O" + str(int(one(db, "SELECT MAX(order_id) FROM orders")[0][1:]))
    assert one(db, "SELECT stock FROM products WHERE product_id = ?", (pid,))[0] == stock - 2
    assert call(db, "view_cart", user_id=uid)["items"] == []
    assert call(db, "get_order_details", order_id=placed["order_id"])["total"] == placed["total"]

    cancelled = call(db, "cancel_order", user_id=uid, order_id=placed["order_id"])
    assert cancelled["status"] == "cancelled" and cancelled["refund_amount"] == placed["total"]
    assert one(db, "SELECT stock FROM products WHERE product_id = ?", (pid,))[0] == stock
    assert one(db, "SELECT status FROM orders WHERE order_id = ?", (placed["order_id"],))[0] == "cancelled"


def test_coupon_applies_and_is_counted(db: sqlite3.Connection):
    uid, pmid = _buyer(db)
    pid, price = one(db, "SELECT product_id, price_cents FROM products WHERE stock > 0 AND category = 'home' LIMIT 1")
    db.execute("INSERT INTO coupons VALUES ('TESTPCT', 'test', 'percent', 15, 1000, 'home', '2026-06-01', 10, 3, 1)")
    call(db, "add_to_cart", user_id=uid, product_id=pid)
    applied = call(db, "apply_coupon", user_id=uid, coupon_code="testpct")
    assert cents(applied["discount"]) == (price * 15 + 50) // 100
    assert cents(applied["total"]) == price - cents(applied["discount"])
    placed = call(db, "place_order", user_id=uid, payment_id=pmid, coupon_code="TESTPCT")
    assert placed["total"] == applied["total"] and placed["coupon_code"] == "TESTPCT"
    assert one(db, "SELECT used_count FROM coupons WHERE code = 'TESTPCT'")[0] == 4


def test_gift_card_balance_is_charged_and_refunded(db: sqlite3.Connection):
    uid, pmid, balance = one(
        db,
        "SELECT user_id, payment_id, balance_cents FROM payment_methods WHERE kind = 'gift_card' AND "
        "balance_cents >= 10000 AND user_id NOT IN (SELECT user_id FROM cart_items) LIMIT 1",
    )
    pid, price = one(db, "SELECT product_id, price_cents FROM products WHERE stock > 0 AND price_cents < 5000 LIMIT 1")
    call(db, "add_to_cart", user_id=uid, product_id=pid)
    placed = call(db, "place_order", user_id=uid, payment_id=pmid)
    assert one(db, "SELECT balance_cents FROM payment_methods WHERE payment_id = ?", (pmid,))[0] == balance - price
    call(db, "cancel_order", user_id=uid, order_id=placed["order_id"])
    assert one(db, "SELECT balance_cents FROM payment_methods WHERE payment_id = ?", (pmid,))[0] == balance


_AGE = "julianday('2026-06-01') - julianday(substr(o.delivered_at, 1, 10))"


def _recent_delivered(conn: sqlite3.Connection) -> tuple[str, str]:
    """A delivered order all of whose items are still inside their category's return window."""
    return one(
        conn,
        "SELECT o.order_id, o.user_id FROM orders o WHERE o.status = 'delivered' AND NOT EXISTS ("
        "SELECT 1 FROM order_items i JOIN products p ON p.product_id = i.product_id JOIN return_windows w "
        f"ON w.category = p.category WHERE i.order_id = o.order_id AND {_AGE} > w.days - 1) "
        "ORDER BY o.order_id LIMIT 1",
    )


def test_return_item_happy_path(db: sqlite3.Connection):
    oid, uid = _recent_delivered(db)
    items = db.execute("SELECT product_id, quantity, unit_price_cents FROM order_items WHERE order_id = ?", (oid,))
    items = items.fetchall()
    sub, disc = one(db, "SELECT subtotal_cents, discount_cents FROM orders WHERE order_id = ?", (oid,))
    refunds = []
    for pid, qty, unit in items:
        result = call(db, "return_item", user_id=uid, order_id=oid, product_id=pid, quantity=qty, reason="damaged")
        assert cents(result["refund_amount"]) == unit * qty - disc * unit * qty // sub
        refunds.append(result["return_id"])
    assert len(set(refunds)) == len(items)
    assert one(db, "SELECT status FROM orders WHERE order_id = ?", (oid,))[0] == "returned"
    assert one(db, "SELECT COUNT(*) FROM returns WHERE order_id = ? AND status = 'approved'", (oid,))[0] == len(items)


# ---------------------------------------------------------------------------------------------------
# business rules: each violation raises ToolError and leaves the database unchanged


def _rejected(conn: sqlite3.Connection, name: str, match: str, _schema_valid: bool = True, **arguments) -> None:
    before = state(conn)
    with pytest.raises(ToolError, match=match):
        call(conn, name, _schema_valid, **arguments)
    assert state(conn) == before


def test_cancel_shipped_or_delivered_order_is_refused(db: sqlite3.Connection):
    for status in ("shipped", "delivered", "cancelled", "returned"):
        oid, uid = one(db, "SELECT order_id, user_id FROM orders WHERE status = ? LIMIT 1", (status,))
        _rejected(db, "cancel_order", f"cannot be cancelled: it is {status}", user_id=uid, order_id=oid)
    oid, uid = one(db, "SELECT order_id, user_id FROM orders WHERE status = 'paid' LIMIT 1")
    other = one(db, "SELECT user_id FROM users WHERE user_id != ? LIMIT 1", (uid,))[0]
    _rejected(db, "cancel_order", "does not belong", user_id=other, order_id=oid)


def test_stock_never_goes_negative(db: sqlite3.Connection):
    uid, pmid = _buyer(db)
    pid, stock = one(db, "SELECT product_id, stock FROM products WHERE stock BETWEEN 2 AND 9 LIMIT 1")
    _rejected(db, "add_to_cart", "insufficient stock", user_id=uid, product_id=pid, quantity=stock + 1)
    call(db, "add_to_cart", user_id=uid, product_id=pid, quantity=stock)
    _rejected(db, "add_to_cart", "insufficient stock", user_id=uid, product_id=pid, quantity=1)
    out = one(db, "SELECT product_id FROM products WHERE stock = 0 LIMIT 1")[0]
    _rejected(db, "add_to_cart", "out of stock", user_id=uid, product_id=out)
    # someone else buys units meanwhile: the order must be refused, nothing is half-done
    db.execute("UPDATE products SET stock = stock - 1 WHERE product_id = ?", (pid,))
    _rejected(db, "place_order", "insufficient stock", user_id=uid, payment_id=pmid)
    # a random sequence of purchases never drives any stock below zero
    rng = random.Random(3)
    users = [r[0] for r in db.execute("SELECT user_id FROM payment_methods WHERE kind = 'card' AND expires > '2027'")]
    low = [r[0] for r in db.execute("SELECT product_id FROM products WHERE stock BETWEEN 1 AND 4")]
    for _ in range(60):
        user = rng.choice(users)
        pm = one(
            db,
            "SELECT payment_id FROM payment_methods WHERE user_id = ? AND kind = 'card' AND expires > '2027' LIMIT 1",
            (user,),
        )[0]
        try:
            call(db, "add_to_cart", user_id=user, product_id=rng.choice(low), quantity=rng.randint(1, 4))
            call(db, "place_order", user_id=user, payment_id=pm)
        except ToolError:
            pass
    assert one(db, "SELECT MIN(stock) FROM products")[0] == 0


def test_place_order_rules(db: sqlite3.Connection):
    uid, pmid = _buyer(db)
    _rejected(db, "place_order", "empty", user_id=uid, payment_id=pmid)
    pid = one(db, "SELECT product_id FROM products WHERE stock > 3 AND price_cents > 1000 LIMIT 1")[0]
    call(db, "add_to_cart", user_id=uid, product_id=pid)
    foreign = one(db, "SELECT payment_id FROM payment_methods WHERE user_id != ? LIMIT 1", (uid,))[0]
    _rejected(db, "place_order", "not one of user", user_id=uid, payment_id=foreign)
    db.execute(
        "INSERT INTO payment_methods VALUES ('PM9001', ?, 'card', 'Visa ending 0001', '0001', '2026-05', NULL)", (uid,)
    )
    db.execute(
        "INSERT INTO payment_methods VALUES ('PM9002', ?, 'gift_card', 'Gift card ending 0002', '0002', NULL, 5)",
        (uid,),
    )
    db.execute("DELETE FROM _audit")
    _rejected(db, "place_order", "expired", user_id=uid, payment_id="PM9001")
    _rejected(db, "place_order", "insufficient balance", user_id=uid, payment_id="PM9002")
    _rejected(db, "place_order", "unknown coupon", user_id=uid, payment_id=pmid, coupon_code="NOPE")


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ("('BADX', 'x', 'percent', 10, 0, NULL, '2026-05-31', 100, 0, 1)", "expired"),
        ("('BADX', 'x', 'fixed', 500, 99900, NULL, '2026-12-31', 100, 0, 1)", "minimum spend"),
        ("('BADX', 'x', 'percent', 10, 0, 'CATEGORY', '2026-12-31', 100, 0, 1)", "category"),
        ("('BADX', 'x', 'percent', 10, 0, NULL, '2026-12-31', 100, 100, 1)", "usage limit"),
        ("('BADX', 'x', 'percent', 10, 0, NULL, '2026-12-31', 100, 0, 0)", "inactive"),
    ],
)
def test_invalid_coupons_are_rejected(db: sqlite3.Connection, row: str, match: str):
    uid, pmid = _buyer(db)
    pid, cat = one(db, "SELECT product_id, category FROM products WHERE stock > 0 AND price_cents < 5000 LIMIT 1")
    other = "books" if cat != "books" else "home"
    db.execute("INSERT INTO coupons VALUES " + row.replace("CATEGORY", other))
    call(db, "add_to_cart", user_id=uid, product_id=pid)
    _rejected(db, "apply_coupon", match, user_id=uid, coupon_code="BADX")
    _rejected(db, "place_order", match, user_id=uid, payment_id=pmid, coupon_code="BADX")


def test_return_rules(db: sqlite3.Connection):
    for status in ("placed", "paid", "shipped", "cancelled", "returned"):
        oid, uid = one(db, "SELECT order_id, user_id FROM orders WHERE status = ? LIMIT 1", (status,))
        pid = one(db, "SELECT product_id FROM order_items WHERE order_id = ?", (oid,))[0]
        _rejected(
            db, "return_item", "only delivered orders", user_id=uid, order_id=oid, product_id=pid, reason="damaged"
        )
    oid, uid, pid = one(
        db,
        "SELECT o.order_id, o.user_id, i.product_id FROM orders o JOIN order_items i ON i.order_id = o.order_id "
        "JOIN products p ON p.product_id = i.product_id JOIN return_windows w ON w.category = p.category "
        f"WHERE o.status = 'delivered' AND {_AGE} > w.days + 1 ORDER BY o.order_id LIMIT 1",
    )
    _rejected(db, "return_item", "return window", user_id=uid, order_id=oid, product_id=pid, reason="damaged")
    oid, uid = _recent_delivered(db)
    pid, qty = one(db, "SELECT product_id, quantity FROM order_items WHERE order_id = ?", (oid,))
    _rejected(
        db,
        "return_item",
        "can still be returned",
        user_id=uid,
        order_id=oid,
        product_id=pid,
        quantity=qty + 1,
        reason="damaged",
    )
    _rejected(db, "return_item", "not part of order", user_id=uid, order_id=oid, product_id="P9999", reason="damaged")
    _rejected(db, "return_item", "reason must be", False, user_id=uid, order_id=oid, product_id=pid, reason="meh")
    _rejected(
        db,
        "return_item",
        "quantity must be",
        False,
        user_id=uid,
        order_id=oid,
        product_id=pid,
        quantity=0,
        reason="damaged",
    )
    _rejected(db, "add_to_cart", "quantity must be", False, user_id=uid, product_id=pid, quantity=-3)
    _rejected(db, "search_products", "sort_by", False, sort_by="price; DROP TABLE products")
    _rejected(db, "search_products", "limit", False, limit=10**9)


def test_sql_looking_strings_are_harmless(db: sqlite3.Connection):
    before = state(db)
    assert call(db, "search_products", query=SQL_TEXT)["results"] == []
    assert call(db, "search_products", brand=SQL_TEXT, colour=SQL_TEXT, size=SQL_TEXT)["results"] == []
    for name, args in [
        ("get_product_details", {"product_id": SQL_TEXT}),
        ("view_cart", {"user_id": SQL_TEXT}),
        ("get_coupon", {"code": SQL_TEXT}),
        ("get_order_details", {"order_id": SQL_TEXT}),
        ("add_to_cart", {"user_id": "U2001", "product_id": SQL_TEXT}),
        ("place_order", {"user_id": SQL_TEXT, "payment_id": SQL_TEXT}),
        ("cancel_order", {"user_id": "U2001", "order_id": SQL_TEXT}),
    ]:
        with pytest.raises(ToolError) as err:
            call(db, name, **args)
        assert str(err.value).isascii()
    with pytest.raises(ToolError):
        call(db, "get_product_details", product_id="")
    assert state(db) == before
    assert one(db, "SELECT COUNT(*) FROM products")[0] >= 500


def _random_value(rng: random.Random, prop: dict, ids: list[str]):
    if "enum" in prop:
        return rng.choice(prop["enum"])
    kind = prop["type"]
    if kind == "boolean":
        return rng.random() < 0.5
    if kind in ("integer", "number"):
        lo, hi = prop.get("minimum", -(10**6)), prop.get("maximum", 10**6)
        value = rng.choice([lo, hi, rng.randint(int(lo), int(hi))])
        return float(value) + 0.25 if kind == "number" and rng.random() < 0.3 and value < hi else value
    text = rng.choice(ids + [SQL_TEXT, "", " ", "%", "_", "\u00e9t\u00e9", "x" * 30, "P1001 OR 1=1"])
    return text[: prop.get("maxLength", 100)]


def test_random_schema_valid_calls_only_raise_tool_errors(pristine: sqlite3.Connection, image: bytes):
    conn = database.load(image)
    ids = [r[0] for r in pristine.execute("SELECT product_id FROM products LIMIT 3")]
    ids += [r[0] for r in pristine.execute("SELECT user_id FROM cart_items LIMIT 3")]
    ids += [r[0] for r in pristine.execute("SELECT order_id FROM orders WHERE status IN ('paid', 'delivered')")][:6]
    ids += [r[0] for r in pristine.execute("SELECT code FROM coupons LIMIT 3")]
    ids += [r[0] for r in pristine.execute("SELECT payment_id FROM payment_methods LIMIT 3")]
    rng = random.Random(11)
    for _ in range(600):
        tool = rng.choice(E.TOOLS)
        props, required = tool.parameters["properties"], tool.parameters["required"]
        args = {k: _random_value(rng, p, ids) for k, p in props.items() if k in required or rng.random() < 0.5}
        try:
            result = call(conn, tool.name, **args)
        except ToolError as err:
            assert str(err).isascii() and str(err).isprintable()
            continue
        assert json.dumps(result).isascii()
    assert one(conn, "SELECT MIN(stock) FROM products")[0] >= 0
    assert one(conn, "SELECT COUNT(*) FROM products")[0] >= 500


def test_tool_results_are_small_ascii_json(pristine: sqlite3.Connection):
    uid = one(pristine, "SELECT user_id FROM orders GROUP BY user_id ORDER BY COUNT(*) DESC LIMIT 1")[0]
    for name, args in [
        ("search_products", {"limit": 20}),
        ("list_user_orders", {"user_id": uid, "limit": 20}),
        ("get_user_profile", {"user_id": uid}),
        ("track_shipment", {"order_id": one(pristine, "SELECT order_id FROM shipments LIMIT 1")[0]}),
    ]:
        text = json.dumps(call(pristine, name, **args))
        assert text.isascii() and len(text) < 8000, name


# ---------------------------------------------------------------------------------------------------
# tasks


def _ids(text: str) -> dict[str, set[str]]:
    return {
        "product": set(re.findall(r"\bP\d{4}\b", text)),
        "user": set(re.findall(r"\bU\d{4}\b", text)),
        "order": set(re.findall(r"\bO\d{5}\b", text)),
    }


def test_entity_splits_are_disjoint(pristine: sqlite3.Connection, source: E.EcommerceTaskSource):
    parts = {s: set(source.products_by_split[s]) for s in SPLITS}
    users = {s: set(source.users_by_split[s]) for s in SPLITS}
    coupons = {s: set(source.coupons_by_split[s]) for s in SPLITS}
    for groups in (parts, users, coupons):
        assert all(groups[s] for s in SPLITS)
        assert sum(len(g) for g in groups.values()) == len(set().union(*groups.values()))
        assert len(groups["train"]) > 4 * len(groups["test"])
    # all variants of a model share a split; carts and orders use products of the user's split
    models = {}
    for (mid,) in pristine.execute("SELECT model_id FROM products"):
        models.setdefault(mid, set()).add(split_of(mid))
    assert all(len(v) == 1 for v in models.values())
    for uid, pid in pristine.execute(
        "SELECT o.user_id, i.product_id FROM orders o JOIN order_items i ON i.order_id = o.order_id "
        "UNION ALL SELECT user_id, product_id FROM cart_items"
    ):
        assert split_of(uid) == source.products[pid]["split"]


def _sample(source: E.EcommerceTaskSource, split: str, n: int) -> list:
    step = source.size(split) // n
    return [source.task(split, i * step) for i in range(n)]


@pytest.fixture(scope="module")
def samples(source: E.EcommerceTaskSource) -> dict[str, list]:
    """300 tasks spread over each split (shared by the task tests)."""
    return {split: _sample(source, split, 300) for split in SPLITS}


@pytest.mark.parametrize("split", SPLITS)
def test_gold_solutions_are_consistent(source: E.EcommerceTaskSource, image: bytes, samples: dict, split: str):
    tasks = samples[split]
    templates = set()
    for task in tasks:
        templates.add(task.template)
        assert task.domain == "ecommerce" and task.answer_type == "facts" and task.facts
        assert task.task_id.startswith(f"ecommerce/{split}/")
        assert len(task.route) == 1 and task.route[0].agent == "ecommerce"
        sub = task.route[0]
        assert task.query.isascii() and task.answer.isascii() and sub.query.isascii()
        assert score_facts(task.answer, task.facts) == 1.0, (task.answer, task.facts)
        assert score_facts(sub.answer, task.facts) == 1.0
        # the last number of the answer is a fact: changing its leading digit loses a fact
        j = list(re.finditer(r"\d[\d.]*", task.answer))[-1].start()
        wrong = task.answer[:j] + str((int(task.answer[j]) + 1) % 10) + task.answer[j + 1 :]
        assert score_facts(wrong, task.facts) < 1.0, task.answer
        calls = [c for turn in sub.turns for c in turn]
        assert 1 <= len(calls) <= 5
        for c in calls:
            assert not validate(c["arguments"], TOOLS[c["name"]].parameters), c
        # every required call is matched by a distinct gold call
        free = list(calls)
        for req in sub.required_calls:
            match = next(c for c in free if call_matches(c, req, [t.schema() for t in E.TOOLS]))
            free.remove(match)
        conn = E.run_gold(image, task)  # raises on any ToolError
        writes = any(TOOLS[c["name"]].writes for c in calls)
        assert writes == task.meta["writes"]
        changed = database.changed_keys(conn, E.AUDIT)
        assert bool(changed) == writes, task.template
        # entities named in the query belong to the split (other products may appear as distractors)
        named = _ids(task.query)
        assert all(split_of(u) == split for u in named["user"])
        assert all(split_of(source.orders[o]["user_id"]) == split for o in named["order"])
        assert all(source.products[p]["split"] == split for p in named["product"])
        for c in calls:
            code = c["arguments"].get("code") or c["arguments"].get("coupon_code")
            if code:
                assert split_of(code) == split
    assert len(templates) >= (14 if split == "test" else 12)


def test_write_tasks_change_the_expected_rows(source: E.EcommerceTaskSource, image: bytes):
    seen = set()
    for i in range(400):
        task = source.task("train", i)
        if task.template in seen or not task.meta["writes"]:
            continue
        seen.add(task.template)
        conn = E.run_gold(image, task)
        tables = {t for t, _ in database.changed_keys(conn, E.AUDIT)}
        expected = {
            "buy_product": {"orders", "order_items", "products", "cart_items"},
            "cancel_order": {"orders", "products"},
            "return_item": {"returns", "order_items"},
            "remove_from_cart": {"cart_items"},
            "coupon_check": {"cart_items"},
        }[task.template]
        assert expected <= tables, task.template
        if task.template == "buy_product":
            oid = task.facts[0]
            assert one(conn, "SELECT total_cents FROM orders WHERE order_id = ?", (oid,))[0] == cents(task.facts[1])
    assert {"buy_product", "cancel_order", "return_item", "remove_from_cart"} <= seen


def test_cancel_denied_tasks_leave_the_database_alone(samples: dict, image: bytes):
    denied = [t for t in samples["train"] if t.template == "cancel_denied"]
    assert denied
    for task in denied:
        names = [c["name"] for turn in task.route[0].turns for c in turn]
        assert "cancel_order" not in names
        assert task.facts[1] in ("shipped", "delivered")
        assert not database.changed_keys(E.run_gold(image, task), E.AUDIT)


def test_test_only_templates(samples: dict):
    test_tasks = samples["test"]
    share = sum(t.meta["test_only_template"] for t in test_tasks) / len(test_tasks)
    assert 0.1 <= share <= 0.25
    for split in ("train", "validation"):
        assert not any(t.meta["test_only_template"] for t in samples[split])


def test_task_source_is_deterministic_and_checks_arguments(pristine: sqlite3.Connection):
    a, b = E.task_source(SEED, pristine), E.task_source(SEED, E.build_db(SEED))
    assert a.size("train") == 20000 and a.size("validation") == a.size("test") == 2000
    for split, i in (("train", 5), ("test", 1999), ("validation", 77)):
        assert a.task(split, i) == b.task(split, i)
    assert a.task("train", 5) != a.task("train", 6)
    assert E.task_source(SEED + 1, E.build_db(SEED + 1)).task("train", 5) != a.task("train", 5)
    for bad_split, bad_index in (("dev", 0), ("train", -1), ("train", 20000), ("test", 2000)):
        with pytest.raises(ValueError, match="valid|index"):
            a.task(bad_split, bad_index)
    with pytest.raises(ValueError):
        a.size("dev")
    # the pristine database was only read
    assert one(pristine, "SELECT COUNT(*) FROM _audit")[0] == 0


def test_queries_are_varied(samples: dict):
    tasks = samples["train"]
    assert len({t.query for t in tasks}) >= 295
    assert sum(len(t.route[0].turns) >= 2 for t in tasks) > 150
    assert any(len(turn) >= 2 for t in tasks for turn in t.route[0].turns)


# ---------------------------------------------------------------------------------------------------
# parts for collaborative tasks


@pytest.mark.parametrize("split", SPLITS)
def test_parts_are_consistent(pristine: sqlite3.Connection, image: bytes, split: str):
    for k in range(15):
        sub, info = E.price_part(pristine, random.Random(f"p{k}"), split)
        assert isinstance(sub, SubTask) and sub.agent == "ecommerce"
        assert {"product_id", "product_name", "price", "category"} <= set(info)
        pid = info["product_id"]
        price, name, cat, mid = one(
            pristine, "SELECT price_cents, name, category, model_id FROM products WHERE product_id = ?", (pid,)
        )
        assert info["price"] == price / 100 and info["product_name"] == name and info["category"] == cat
        assert split_of(mid) == split and score_facts(sub.answer, [pid, info["price_str"]]) == 1.0
        assert pid not in sub.query and name in sub.query
        results = [c for turn in sub.turns for c in turn]
        found = call(pristine, **{"name": results[0]["name"], **results[0]["arguments"]})
        assert pid in [r["product_id"] for r in found["results"]]

        sub, info = E.order_part(pristine, random.Random(f"o{k}"), split)
        assert {"order_id", "user_id", "status", "category", "total"} <= set(info)
        uid, status, total = one(
            pristine, "SELECT user_id, status, total_cents FROM orders WHERE order_id = ?", (info["order_id"],)
        )
        assert (uid, status, info["total"]) == (info["user_id"], info["status"], total / 100)
        assert split_of(uid) == split
        facts = [info["order_id"], info["status"], info["category"], info["total_str"]]
        assert score_facts(sub.answer, facts + ([info["delivered_on"]] if info["delivered_on"] else [])) == 1.0
        fake = type("T", (), {"route": (sub,)})()
        assert not database.changed_keys(E.run_gold(image, fake), E.AUDIT)
    a = E.price_part(pristine, random.Random("same"), split)
    assert a == E.price_part(pristine, random.Random("same"), split)
    with pytest.raises(ValueError):
        E.order_part(pristine, random.Random(0), "dev")
