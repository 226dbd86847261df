"""The retail database in SQLite, one JSON document per product, user and order in tau2's field order, and
the per-call session that the tools read and write it through (see :mod:`joy_env.domains.tau2.retail`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from joy_env.core import ToolError
from joy_env.domains.tau2.retail.data import RetailData
from joy_env.domains.tau2.session import session_tool

AUDIT: dict[str, tuple[str, ...]] = {"users": ("user_id",), "orders": ("order_id",)}
"""The tables the write tools change (products are never written)."""


def _dumps(entity: Mapping[str, Any]) -> str:
    return json.dumps(entity)


def build_db(data: RetailData | Mapping[str, Any]) -> sqlite3.Connection:
    """A fresh in-memory SQLite database holding ``data.db`` (or ``data`` itself, a database in canonical form;
    rows in ``db.json`` order)."""
    db = data.db if isinstance(data, RetailData) else data
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.executescript(
        "CREATE TABLE products (product_id TEXT PRIMARY KEY, data TEXT NOT NULL);"
        "CREATE TABLE users (user_id TEXT PRIMARY KEY, email_l TEXT NOT NULL, first_l TEXT NOT NULL,"
        " last_l TEXT NOT NULL, zip TEXT NOT NULL, data TEXT NOT NULL);"
        "CREATE TABLE orders (order_id TEXT PRIMARY KEY, data TEXT NOT NULL);"
        "CREATE INDEX users_email ON users (email_l);"
        "CREATE INDEX users_name_zip ON users (last_l, first_l, zip);"
    )
    conn.executemany("INSERT INTO products VALUES (?, ?)", [(k, _dumps(v)) for k, v in db["products"].items()])
    users = [_user_row(k, v) for k, v in db["users"].items()]
    conn.executemany("INSERT INTO users VALUES (?, ?, ?, ?, ?, ?)", users)
    conn.executemany("INSERT INTO orders VALUES (?, ?)", [(k, _dumps(v)) for k, v in db["orders"].items()])
    return conn


def _user_row(key: str, user: Mapping[str, Any]) -> tuple[str, ...]:
    name = user["name"]
    return (
        key,
        user["email"].lower(),
        name["first_name"].lower(),
        name["last_name"].lower(),
        user["address"]["zip"],
        _dumps(user),
    )


def dump_db(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    """The whole database in tau2's ``RetailDB.model_dump()`` form (for comparisons with tau2)."""
    return {
        table: {k: json.loads(d) for k, d in conn.execute(f"SELECT {table[:-1]}_id, data FROM {table} ORDER BY rowid")}
        for table in ("products", "users", "orders")
    }


class Session:
    """The entities one tool call reads, each loaded once, written back if changed (also on failure)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.loaded: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}

    def _get(self, table: str, key: str, missing: str) -> dict[str, Any]:
        hit = self.loaded.get((table, key))
        if hit is not None:
            return hit[1]
        row = self.conn.execute(f"SELECT data FROM {table} WHERE {table[:-1]}_id = ?", (key,)).fetchone()
        if row is None:
            raise ToolError(missing)
        entity = json.loads(row[0])
        self.loaded[(table, key)] = (row[0], entity)
        return entity

    def order(self, order_id: str) -> dict[str, Any]:
        return self._get("orders", order_id, "Order not found")

    def user(self, user_id: str) -> dict[str, Any]:
        return self._get("users", user_id, "User not found")

    def product(self, product_id: str) -> dict[str, Any]:
        return self._get("products", product_id, "Product not found")

    def variant(self, product_id: str, item_id: str) -> dict[str, Any]:
        variants = self.product(product_id)["variants"]
        if item_id not in variants:
            raise ToolError("Variant not found")
        return variants[item_id]

    def payment_method(self, user_id: str, payment_method_id: str) -> dict[str, Any]:
        methods = self.user(user_id)["payment_methods"]
        if payment_method_id not in methods:
            raise ToolError("Payment method not found")
        return methods[payment_method_id]

    def flush(self) -> None:
        for (table, key), (before, entity) in self.loaded.items():
            after = _dumps(entity)
            if after == before:
                continue
            if table == "users":
                row = _user_row(key, entity)
                self.conn.execute(
                    "UPDATE users SET email_l = ?, first_l = ?, last_l = ?, zip = ?, data = ? WHERE user_id = ?",
                    (*row[1:], key),
                )
            elif table == "orders":
                self.conn.execute("UPDATE orders SET data = ? WHERE order_id = ?", (after, key))
            else:  # pragma: no cover - no tool writes products
                raise RuntimeError("tau2 retail tools never change products")


run = session_tool(Session, "retail")
"""Wrap a tool body: one session per call, changes kept even when the call fails half-way (as in tau2,
whose tools change objects in place), and every failure reported as tau2 reports it (its message)."""
