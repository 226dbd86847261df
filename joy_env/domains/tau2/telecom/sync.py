"""The sync between the carrier's records and the customer's phone (tau2's ``TelecomEnvironment.sync_tools``),
the fresh database (:func:`build_db`) and :func:`call`, which runs one function the way tau2's environment does:
the function, then the sync, changes kept on failure (see :mod:`joy_env.domains.tau2.telecom`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from joy_env.core import ToolError
from joy_env.domains.tau2.telecom.carrier import bills_awaiting_payment, customer_by_phone, line_by_phone
from joy_env.domains.tau2.telecom.data import canon_agent_db, canon_user_db
from joy_env.domains.tau2.telecom.db import Session, create_db


def sync_session(s: Session) -> None:
    """Bring the customer's surroundings in line with their line, in tau2's order (a failure part-way keeps
    what was done before it): nothing without a phone number; the line's status and roaming, whether the
    data used exceeds the plan's limit plus the refuels; a paid payment request marks its bill paid and goes;
    with no request pending, the first bill of the customer awaiting payment becomes one."""
    around = s.surroundings()
    phone_number = around["phone_number"]
    if phone_number is None:
        return
    line = line_by_phone(s, phone_number)
    around["line_active"] = line["status"] == "Active"
    around["roaming_allowed"] = bool(line["roaming_enabled"])
    plan = s.get("plans", line["plan_id"])
    around["mobile_data_usage_exceeded"] = line["data_used_gb"] >= plan["data_limit_gb"] + line["data_refueling_gb"]
    request = around["payment_request"]
    if request is not None and request["paid"]:
        s.get("bills", request["bill_id"])["status"] = "Paid"
        around["payment_request"] = None
    if around["payment_request"] is None:
        awaiting = bills_awaiting_payment(s, customer_by_phone(s, phone_number))
        if awaiting:
            bill = awaiting[0]
            around["payment_request"] = {
                "bill_id": bill["bill_id"],
                "amount_due": float(bill["total_due"]),
                "paid": False,
            }


def call(
    conn: sqlite3.Connection, body: Callable[..., Any], arguments: Mapping[str, Any], then_sync: bool = True
) -> Any:
    """``body(session, **arguments)`` then (if ``then_sync``) the sync, in one session written back whatever
    happens. Any failure is a :class:`~joy_env.core.ToolError` with tau2's message; after a failure of the body
    there is no sync (as in tau2)."""
    session = Session(conn)
    try:
        result = body(session, **arguments)
        if then_sync:
            sync_session(session)
        return result
    except ToolError:
        raise
    except Exception as exc:  # tau2 reports any exception by its message
        raise ToolError(str(exc)) from None
    finally:
        session.flush()


def sync(conn: sqlite3.Connection) -> None:
    """tau2's ``sync_tools`` on ``conn`` (idempotent: a second sync changes nothing). Raises
    :class:`~joy_env.core.ToolError` with tau2's message when the customer's phone number has no line (or
    the records are otherwise inconsistent); what it did before the failure is kept, as in tau2."""
    call(conn, lambda s: None, {})


def build_db(db: Mapping[str, Any]) -> sqlite3.Connection:
    """A fresh in-memory database holding ``db`` (``{"agent": ..., "user": ...}`` as :func:`load_db` gives it;
    not modified), synced as tau2's environment is when it is built (a no-op while the customer has no phone
    number: the pristine state). Raises ``ValueError`` for records tau2 would refuse or a failing sync."""
    agent, user = canon_agent_db(db["agent"]), canon_user_db(db["user"])
    known = {line["line_id"] for line in agent["lines"]}
    for customer in agent["customers"]:
        missing = [line_id for line_id in customer["line_ids"] if line_id not in known]
        if missing:  # tau2 would fail every phone lookup that reaches this customer (and the sync with it)
            raise ValueError(
                f"telecom database: customer {customer['customer_id']} names lines that do not exist: {missing}"
            )
    conn = create_db(agent, user)
    try:
        sync(conn)
    except ToolError as exc:
        conn.close()
        raise ValueError(f"telecom database: the initial sync fails: {exc}") from None
    return conn
