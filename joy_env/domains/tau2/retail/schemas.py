"""The retail tools (:data:`SPECS`, :data:`TOOLS`, :data:`WRITE_TOOLS`), the agent's system prompt and
:func:`domain` (see :mod:`joy_env.domains.tau2.retail`)."""

from __future__ import annotations

from joy_env.core import Domain, Tool
from joy_env.domains.tau2.retail import tools as t
from joy_env.domains.tau2.retail.data import RetailData
from joy_env.domains.tau2.retail.db import AUDIT, build_db, run
from joy_env.domains.tau2.tooling import ToolSpec, make_tools, params, spec, string, strings

_ORDER_ID = "order id with its leading '#', e.g. '#W0000000'"
_PAYMENT_ID = "payment method id of the order's customer, e.g. 'gift_card_0000000' or 'credit_card_0000000'"
_ADDRESS = {
    "address1": string("first address line, e.g. '123 Main St'"),
    "address2": string("second address line, e.g. 'Apt 1', or ''"),
    "city": string("city, e.g. 'San Francisco'"),
    "state": string("state, e.g. 'CA'"),
    "country": string("country, e.g. 'USA'"),
    "zip": string("zip code, e.g. '12345'"),
}

SPECS: tuple[ToolSpec, ...] = (
    spec(
        t.calculate,
        params(expression=string("e.g. '(54.04 + 41.64) * 2'")),
        "Evaluate an arithmetic expression of numbers, + - * /, parentheses and spaces; returns the value rounded "
        "to 2 decimals, as text.",
    ),
    spec(
        t.cancel_pending_order,
        params(order_id=string(_ORDER_ID), reason=string("'no longer needed' or 'ordered by mistake'")),
        "Cancel an order whose status is exactly 'pending'. Every payment is refunded to its method (gift cards at "
        "once, other methods in 5-7 business days). Returns the order.",
        writes=True,
    ),
    spec(
        t.exchange_delivered_order_items,
        params(
            order_id=string(_ORDER_ID),
            item_ids=strings("item ids to exchange (repeat an id to exchange several units)"),
            new_item_ids=strings("new item ids, one per entry of item_ids and of the same product"),
            payment_method_id=string(_PAYMENT_ID),
        ),
        "Request the exchange of items of a delivered order for other variants (item ids) of the same products; "
        "the price difference is paid or refunded with the given payment method. A delivered order can be "
        "exchanged or returned once. Returns the order.",
        writes=True,
    ),
    spec(
        t.find_user_id_by_name_zip,
        params(first_name=string("e.g. 'John'"), last_name=string("e.g. 'Doe'"), zip=string("e.g. '12345'")),
        "Find a customer's user id by first name, last name (case-insensitive) and zip code. Prefer "
        "find_user_id_by_email when the customer knows their email.",
    ),
    spec(
        t.find_user_id_by_email,
        params(email=string("e.g. 'something@example.com'")),
        "Find a customer's user id by email (case-insensitive).",
    ),
    spec(
        t.get_order_details,
        params(order_id=string(_ORDER_ID)),
        "An order: customer, address, items (item ids, options, prices), status, fulfillments and payment history.",
    ),
    spec(
        t.get_product_details,
        params(product_id=string("product id, e.g. '6086499569'")),
        "A product and all its variants: item id, options, availability and price. A product id is not an item id.",
    ),
    spec(
        t.get_user_details,
        params(user_id=string("user id, e.g. 'sara_doe_496'")),
        "A customer: name, address, email, payment methods (gift card balances) and order ids.",
    ),
    spec(
        t.list_all_product_types,
        params(),
        "The names and product ids of all 50 product types, sorted by name.",
    ),
    spec(
        t.modify_pending_order_address,
        params(order_id=string(_ORDER_ID), **_ADDRESS),
        "Change the shipping address of a pending order. Returns the order.",
        writes=True,
    ),
    spec(
        t.modify_pending_order_items,
        params(
            order_id=string(_ORDER_ID),
            item_ids=strings("item ids to change (repeat an id to change several units)"),
            new_item_ids=strings("new item ids, one per entry of item_ids, each of the same product and different"),
            payment_method_id=string(_PAYMENT_ID),
        ),
        "Change items of an order whose status is exactly 'pending' to other variants (item ids) of the same "
        "products; the price difference is paid or refunded with the given payment method. Possible once per "
        "order. Returns the order.",
        writes=True,
    ),
    spec(
        t.modify_pending_order_payment,
        params(order_id=string(_ORDER_ID), payment_method_id=string(_PAYMENT_ID)),
        "Pay a pending order (with a single payment so far) with another payment method of its customer; the "
        "old method is refunded. Returns the order.",
        writes=True,
    ),
    spec(
        t.modify_user_address,
        params(user_id=string("user id, e.g. 'sara_doe_496'"), **_ADDRESS),
        "Change a customer's default address. Returns the customer.",
        writes=True,
    ),
    spec(
        t.return_delivered_order_items,
        params(
            order_id=string(_ORDER_ID),
            item_ids=strings("item ids to return (repeat an id to return several units)"),
            payment_method_id=string("the order's original payment method id or one of the customer's gift cards"),
        ),
        "Request the return of items of a delivered order; the refund goes to the original payment method or a "
        "gift card of the customer. Returns the order.",
        writes=True,
    ),
    spec(
        t.transfer_to_human_agents,
        params(summary=string("the customer's issue")),
        "Transfer the customer to a human agent with a summary of the issue; only if the customer asks for one or "
        "the policy and tools cannot solve the issue.",
    ),
)

TOOLS: tuple[Tool, ...] = make_tools(SPECS, run)
"""The service agent's tools (tau2's ``RetailTools``)."""
WRITE_TOOLS = frozenset(s.name for s in SPECS if s.writes)
"""The tools tau2 marks as writes."""


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
