"""The retail tools' JSON schemas (:data:`TOOLS`, :data:`WRITE_TOOLS`), the agent's system prompt and
:func:`domain` (see :mod:`joy_env.domains.tau2_retail`)."""

from __future__ import annotations

from typing import Any

from joy_env.core import Domain, Tool
from joy_env.domains.tau2_retail.data import RetailData
from joy_env.domains.tau2_retail.db import AUDIT, _run, build_db
from joy_env.domains.tau2_retail.tools import (
    _calculate,
    _cancel_pending_order,
    _exchange_delivered_order_items,
    _find_user_id_by_email,
    _find_user_id_by_name_zip,
    _get_order_details,
    _get_product_details,
    _get_user_details,
    _list_all_product_types,
    _modify_pending_order_address,
    _modify_pending_order_items,
    _modify_pending_order_payment,
    _modify_user_address,
    _return_delivered_order_items,
    _transfer_to_human_agents,
)

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
        "A product and all its variants: item id, options, availability and price. A product id is not an item id.",
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
    """The ecommerce agent's system prompt: :data:`ROLE_PROMPT`, then tau2's policy unchanged
    (:func:`joy_env.domains.tau2.spec.system_prompt` of retail's solo protocol)."""
    from joy_env.domains.tau2.spec import system_prompt as tau2_system_prompt

    return tau2_system_prompt("retail", policy)


def domain(data: RetailData) -> Domain:
    """The ``ecommerce`` sub-agent's domain over ``data``: tau2's tools, database and policy."""
    return Domain(
        agent="ecommerce",
        tools=TOOLS,
        build_db=lambda seed: build_db(data),
        audit=AUDIT,
        system_prompt=system_prompt(data.policy),
    )
