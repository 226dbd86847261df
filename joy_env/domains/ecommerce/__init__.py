"""E-commerce domain: an online shop backed by SQLite, its tools, and its tasks.

The ``ecommerce`` sub-agent serves shoppers of a simulated online shop. The shop is a real SQLite
database generated deterministically from a seed (:func:`build_db`, see
:mod:`joy_env.domains.ecommerce.db`): about 600 product variants in 7 categories (electronics,
clothing, shoes, home, sports, books, beauty) with look-alike distractors (same brand and line,
"Pro" or next-generation models, other colours and sizes), 250 users with shipping addresses and
payment methods (cards with expiry, gift cards and wallets with balances), carts, 1250 orders in
every state (placed, paid, shipped, delivered, cancelled, returned) with consistent totals and
discounts, shipments with tracking events, 220 coupons with rules, and returns. The shop's clock is
fixed: today is 2026-06-01 (now = 2026-06-01T12:00:00). Money is computed in integer cents and shown
as strings with two decimals (``"129.99"``).

Tools (15):

| tool | arguments | what it does |
|---|---|---|
| ``search_products`` | query, category, brand, colour, size, min_price, max_price, | catalog search; every query |
| | min_rating, in_stock, sort_by, limit | word must match name or category |
| ``get_product_details`` | product_id | product record (in stock or not) and its other variants |
| ``check_stock`` | product_id | number of units in stock (the only tool that shows it) |
| ``get_user_profile`` | user_id | name, address, payment methods (ids, card expiry, balances) |
| ``view_cart`` | user_id | cart lines with unit prices, line totals and subtotal |
| ``add_to_cart`` | user_id, product_id, quantity | adds units (cart quantity <= stock and <= 10) |
| ``remove_from_cart`` | user_id, product_id, quantity | removes some units or (no quantity) the line |
| ``get_coupon`` | code | rules: type, value, minimum spend, category, expiry, uses left, active |
| ``apply_coupon`` | user_id, coupon_code | validates a coupon on the cart: discount and total (no write) |
| ``place_order`` | user_id, payment_id, coupon_code | orders the whole cart (see below) |
| ``get_order_details`` | order_id | status, items (with return deadlines), amounts, payment, carrier |
| ``list_user_orders`` | user_id, status, limit | the user's orders, newest first, with the count |
| ``track_shipment`` | order_id | carrier, tracking number, shipment status, tracking events |
| ``cancel_order`` | user_id, order_id | cancels a placed / paid order (see below) |
| ``return_item`` | user_id, order_id, product_id, quantity, reason | returns units of a delivered order (see below) |

``sort_by`` is one of ``name``, ``price_asc``, ``price_desc``, ``rating_desc``; ``limit`` <= 20.
``place_order`` checks stock, the payment method (owner, card expiry, gift card / wallet balance) and
the coupon, then creates the order (status ``placed``), decrements stock, charges balances, counts
the coupon use and empties the cart. ``cancel_order`` restocks the items and credits gift card /
wallet balances. ``return_item`` accepts delivered orders within the return window of the item's
category (7 to 90 days, the shop policy that the QA knowledge base states; ``get_order_details``
shows each item's ``return_by``); the refund is
the units' price minus their pro-rata share of the order discount (credited to gift card / wallet
balances); the order becomes ``returned`` once every unit is returned.

Write tools are atomic (a SAVEPOINT rolled back on any error) and raise :class:`ToolError` naming the
broken rule. Coupon rules are checked in this order: active, expiry (valid through ``expires_on``),
usage limit, category restriction (the cart must hold an item of the category; the discount applies
to those items only), minimum spend (on the eligible subtotal). Percent discounts round half up to the
cent; fixed discounts are capped by the eligible subtotal. Cancelling does not give a coupon use back.

Task templates (answer type ``facts``; route = one ``ecommerce`` sub-task):

| template | kind | facts |
|---|---|---|
| ``cheapest_in_range`` | read: filtered search (brand, category, price range), stock | product id, price, stock |
| ``compare_products`` | read: two details in parallel (one may need a search) | best id, ratings, price gap |
| ``order_tracking`` | read: order details + tracking in parallel | status, carrier, tracking no., location |
| ``buy_product`` | write: profile (+ search), add to cart, place order | new order id, total |
| ``cancel_order`` | write: order details, cancel | order id, ``cancelled``, refund |
| ``cancel_denied`` | read: a shipped / delivered order must NOT be cancelled | order id, status |
| ``coupon_check`` | coupon rules + cart (add first if empty: write), apply if valid | code, discount, total / rule |
| ``return_item`` | write: order details, return | return id, refund |
| ``return_denied`` | read: return window over | order id, return deadline |
| ``count_orders`` | read: orders of a status | count, sum of totals |
| ``stock_variant`` | read: find a colour / size variant, check stock | product id, units |
| ``remove_from_cart`` | write: view cart, remove a line | new subtotal |
| ``buy_cheapest_with_coupon`` | write, **test only**: search, profile, add, order with coupon | id, order, total |
| ``latest_shipment`` | read, **test only**: list shipped orders, track the newest | order id, carrier, location |

Splits: products are partitioned by model (all variants of a model together), users (with their
carts and orders) and coupons by id, about 80/10/10 (:func:`joy_env.domains.ecommerce.db.split_of`);
a task of a split only names entities of its split (catalog searches naturally see the whole shop).
Sizes: 20000 train, 2000 validation and 2000 test tasks; test only templates make ~20% of test.

Collaborative parts for mixed tasks: :func:`price_part` and :func:`order_part`.

Package layout: ``helpers`` (argument checks and shop rules the tools share), ``tools``, ``schemas``
(``TOOLS``, prompt, :func:`domain`, :func:`run_gold`), ``task_helpers`` (phrasings, drafts, the shop
indexes), ``tasks`` (the task source, one method per template) and ``parts``; the database itself is
:mod:`joy_env.domains.ecommerce.db`. Everything listed in ``__all__`` is importable from
``joy_env.domains.ecommerce``.
"""

from joy_env.domains.ecommerce.db import AUDIT, build_db
from joy_env.domains.ecommerce.db import NOW as NOW
from joy_env.domains.ecommerce.parts import order_part, price_part
from joy_env.domains.ecommerce.schemas import SYSTEM_PROMPT, TOOLS, domain, run_gold
from joy_env.domains.ecommerce.tasks import EcommerceTaskSource, task_source

__all__ = [
    "AUDIT",
    "SYSTEM_PROMPT",
    "TOOLS",
    "EcommerceTaskSource",
    "build_db",
    "domain",
    "order_part",
    "price_part",
    "run_gold",
    "task_source",
]
