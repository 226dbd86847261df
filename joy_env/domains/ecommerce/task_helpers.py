"""What the task templates share: phrasings, gold-call helpers, drafts and :class:`ShopIndex`."""

from __future__ import annotations

import datetime as dt
import random
import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from joy_env import database
from joy_env.core import SPLITS, ToolContext
from joy_env.domains.ecommerce.db import RETURN_WINDOW_DAYS, TODAY, TODAY_DATE, split_of
from joy_env.domains.ecommerce.helpers import COUPON_COLS, ORDER_COLS, PRODUCT_COLS
from joy_env.domains.ecommerce.schemas import TOOL_MAP
from joy_env.domains.ecommerce.tools import search_products

_INTROS = ("", "Hi!", "Hello!", "Hey there.", "Good morning.", "Hi, quick question.", "Hi, hope you are well.")
CATEGORY_PHRASES = {
    "electronics": "electronics",
    "clothing": "clothing",
    "shoes": "shoes",
    "home": "home products",
    "sports": "sports gear",
    "books": "books",
    "beauty": "beauty products",
}
REASON_PHRASES = {
    "damaged": "it arrived damaged",
    "defective": "it stopped working after two days, it's defective",
    "wrong_item": "you sent me the wrong item",
    "wrong_size": "it's the wrong size",
    "not_as_described": "it is not as described on the product page",
    "changed_mind": "I changed my mind",
}
CANCEL_REASONS = (
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


def facts_distinct(answer: str, facts: tuple[str, ...]) -> bool:
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


def gold_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def run_gold_turns(conn: sqlite3.Connection, turns: list[list[dict[str, Any]]]) -> list[list[Any]]:
    """Run gold turns on ``conn`` and return the results (ToolError propagates)."""
    ctx = ToolContext(conn)
    return [[TOOL_MAP[c["name"]].fn(ctx, **c["arguments"]) for c in turn] for turn in turns]


def their(phrase: str) -> str:
    """'my Visa card ending in 1234' -> "the user's Visa card ending in 1234"."""
    return phrase.replace("my ", "the user's ", 1)


def opt(value: Any) -> list[Any]:
    """Acceptable values of an argument whose gold value equals its default (may be omitted)."""
    return ["", value]


@dataclass
class Draft:
    query: str
    sub_query: str
    turns: list[list[dict[str, Any]]]
    answer: str
    facts: tuple[str, ...]
    required: list[dict[str, Any]]


class ShopIndex:
    """Indexes of the pristine shop database and the helpers that the task templates share.

    The base of :class:`EcommerceTaskSource`, which sets ``seed``, ``db``, ``_image``, ``_scratch``,
    ``_lock`` and ``_ctx`` and then calls ``_index``."""

    @property
    def image(self) -> bytes:
        """Image of the pristine database (computed once)."""
        if self._image is None:
            self._image = database.image(self.db)
        return self._image

    # -- indexes --------------------------------------------------------------------------------------------

    def _index(self) -> None:
        db = self.db
        keys = [c.strip() for c in PRODUCT_COLS.split(",")]
        self.products: dict[str, dict[str, Any]] = {}
        self.products_by_split: dict[str, list[str]] = {s: [] for s in SPLITS}
        self.in_stock_by_split: dict[str, list[str]] = {s: [] for s in SPLITS}
        self.by_type: dict[tuple, list[str]] = {}
        self.models: dict[str, list[str]] = {}
        self.brand_cat_in_stock: dict[tuple[str, str], list[tuple[int, str]]] = {}
        for row in db.execute(f"SELECT {PRODUCT_COLS} FROM products ORDER BY product_id"):
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
        okeys = [c.strip() for c in ORDER_COLS.split(",")]
        self.orders: dict[str, dict[str, Any]] = {}
        self.orders_by: dict[tuple[str, str], list[str]] = {}
        self.orders_by_user: dict[str, list[str]] = {}
        for row in db.execute(f"SELECT {ORDER_COLS} FROM orders ORDER BY order_id"):
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
        ckeys = [c.strip() for c in COUPON_COLS.split(",")]
        for row in db.execute(f"SELECT {COUPON_COLS} FROM coupons ORDER BY code"):
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
                return run_gold_turns(self._scratch, turns)
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
