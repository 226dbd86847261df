"""tau2-bench's retail data: where it lies, and reading it into canonical form (tau2's field order, every
optional field present), once per process (see :mod:`joy_env.domains.tau2.retail`)."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from joy_env.domains.tau2.data import find_data, install_hint, load

DATA_FILES = ("db.json", "tasks.json", "split_tasks.json", "policy.md")
"""The files of tau2's retail data directory this domain uses."""
SPLITS = ("train", "test", "all")
"""tau2's ``train`` and ``test`` splits, and ``all`` (every task)."""
INSTALL_HINT = install_hint("retail", DATA_FILES)


def find_tau2_data(path: str | os.PathLike[str] | None = None) -> Path:
    """The directory of tau2-bench's retail data: ``path`` if given, else the installed ``tau2`` package's
    (:func:`joy_env.domains.tau2.data.find_data`: a one-line ``FileNotFoundError`` or ``ImportError`` saying how
    to get the data; the ``tau2`` package is located, never imported)."""
    return find_data("retail", path)


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


def payment_entry(transaction_type: str, amount: Any, payment_method_id: str) -> dict[str, Any]:
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
            payment_entry(p["transaction_type"], p["amount"], p["payment_method_id"]) for p in o["payment_history"]
        ],
    }
    for key in _OPTIONAL_ORDER_FIELDS:
        out[key] = o.get(key)
    if out["exchange_price_difference"] is not None:
        out["exchange_price_difference"] = float(out["exchange_price_difference"])
    return out


@functools.lru_cache(maxsize=4)
def _load_db(root: str) -> dict[str, Any]:
    raw = json.loads((Path(root) / "db.json").read_text(encoding="utf-8"))
    return {
        "products": {k: _canon_product(v) for k, v in raw["products"].items()},
        "users": {k: _canon_user(v) for k, v in raw["users"].items()},
        "orders": {k: _canon_order(v) for k, v in raw["orders"].items()},
    }


def load_db(root: Path) -> dict[str, Any]:
    """``root / "db.json"`` in canonical form (tau2's ``RetailDB.model_dump()``), read once per process."""
    return _load_db(str(root))


def load_retail(path: str | os.PathLike[str] | None = None) -> RetailData:
    """Read (once per process) tau2-bench's retail data from ``path`` or the installed ``tau2`` package."""
    data = load("retail", path)
    return RetailData(
        root=data.root, db=data.db, tasks=tuple(data.tasks.values()), splits=data.splits, policy=data.policy
    )
