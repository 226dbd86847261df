"""The bodies of the retail tools, tau2's ``RetailTools`` call by call: each takes a :class:`Session`;
``run`` (in :mod:`~joy_env.domains.tau2.retail.db`) turns it into a tool (see
:mod:`joy_env.domains.tau2.retail`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from joy_env.core import ToolError
from joy_env.domains.tau2.calculate import calculate_expression
from joy_env.domains.tau2.retail.data import payment_entry
from joy_env.domains.tau2.retail.db import Session


def calculate(s: Session, expression: str) -> str:
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


def cancel_pending_order(s: Session, order_id: str, reason: str) -> dict[str, Any]:
    order = s.order(order_id)
    if order["status"] != "pending":
        raise ToolError("Non-pending order cannot be cancelled")
    if reason not in ("no longer needed", "ordered by mistake"):
        raise ToolError("Invalid reason")
    refunds = []
    for payment in order["payment_history"]:
        refunds.append(payment_entry("refund", payment["amount"], payment["payment_method_id"]))
        user = s.user(order["user_id"])
        method = s.payment_method(user["user_id"], payment["payment_method_id"])
        if _is_gift_card(method):  # refunded at once
            method["balance"] = round(method["balance"] + payment["amount"], 2)
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    order["payment_history"].extend(refunds)
    return order


def exchange_delivered_order_items(
    s: Session, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
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


def find_user_id_by_name_zip(s: Session, first_name: str, last_name: str, zip: str) -> str:
    row = s.conn.execute(
        "SELECT user_id FROM users WHERE first_l = ? AND last_l = ? AND zip = ? ORDER BY rowid LIMIT 1",
        (first_name.lower(), last_name.lower(), zip),
    ).fetchone()
    if row is None:
        raise ToolError("User not found")
    return row[0]


def find_user_id_by_email(s: Session, email: str) -> str:
    row = s.conn.execute(
        "SELECT user_id FROM users WHERE email_l = ? ORDER BY rowid LIMIT 1", (email.lower(),)
    ).fetchone()
    if row is None:
        raise ToolError("User not found")
    return row[0]


def get_order_details(s: Session, order_id: str) -> dict[str, Any]:
    return s.order(order_id)


def get_product_details(s: Session, product_id: str) -> dict[str, Any]:
    return s.product(product_id)


def get_user_details(s: Session, user_id: str) -> dict[str, Any]:
    return s.user(user_id)


def list_all_product_types(s: Session) -> dict[str, str]:
    names: dict[str, str] = {}
    for (data,) in s.conn.execute("SELECT data FROM products ORDER BY rowid"):
        product = json.loads(data)
        names[product["name"]] = product["product_id"]
    return dict(sorted(names.items()))  # tau2 returns json.dumps(..., sort_keys=True): the same JSON text


def _new_address(address1: str, address2: str, city: str, state: str, country: str, zip: str) -> dict[str, Any]:
    return {"address1": address1, "address2": address2, "city": city, "country": country, "state": state, "zip": zip}


def modify_pending_order_address(
    s: Session, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> dict[str, Any]:
    order = s.order(order_id)
    if "pending" not in order["status"]:
        raise ToolError("Non-pending order cannot be modified")
    order["address"] = _new_address(address1, address2, city, state, country, zip)
    return order


def modify_pending_order_items(
    s: Session, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
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
        payment_entry("payment" if diff_price > 0 else "refund", abs(diff_price), payment_method_id)
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


def modify_pending_order_payment(s: Session, order_id: str, payment_method_id: str) -> dict[str, Any]:
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
    history.extend([payment_entry("payment", amount, payment_method_id), payment_entry("refund", amount, old_id)])
    if _is_gift_card(method):
        method["balance"] = round(method["balance"] - amount, 2)
    old_method = s.payment_method(order["user_id"], old_id)
    if _is_gift_card(old_method):
        old_method["balance"] = round(old_method["balance"] + amount, 2)
    return order


def modify_user_address(
    s: Session, user_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> dict[str, Any]:
    user = s.user(user_id)
    user["address"] = _new_address(address1, address2, city, state, country, zip)
    return user


def return_delivered_order_items(
    s: Session, order_id: str, item_ids: list[str], payment_method_id: str
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


def transfer_to_human_agents(s: Session, summary: str) -> str:
    return "Transfer successful"
