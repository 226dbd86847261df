"""The carrier's side, tau2's ``TelecomTools`` call by call: the agent's tools, the functions tasks use to set
up a scenario (``set_data_usage``, ``suspend_line_for_overdue_bill``) and the assertion functions. Each body
takes a :class:`~joy_env.domains.tau2.telecom.db.Session`; results are the JSON values whose text is tau2's
tool message (see :mod:`joy_env.domains.tau2.telecom`)."""

from __future__ import annotations

import datetime
import json
from typing import Any

from joy_env.core import ToolError
from joy_env.domains.tau2.telecom.data import TODAY
from joy_env.domains.tau2.telecom.db import Session, new_bill_id

# -- lookups shared with the sync


def customer_by_phone(s: Session, phone_number: str) -> dict[str, Any]:
    """The first customer whose contact number, or the number of one of whose lines, is ``phone_number``.

    The sync runs this after every call, so it reads only the customers that can match: those whose stored
    text holds the number or the id of a line with that number (the rest are skipped without being decoded).
    That is tau2's scan because no call changes a customer's number or lines, nor a line's number, and
    :func:`~joy_env.domains.tau2.telecom.sync.build_db` refuses customers that name a line which does not
    exist (tau2's scan would fail on them)."""
    lines = [row[0] for row in s.conn.execute("SELECT line_id FROM lines WHERE phone_number = ?", (phone_number,))]
    needles = [json.dumps(phone_number), *map(json.dumps, lines)]
    for pos, text in s.conn.execute("SELECT pos, data FROM customers ORDER BY pos").fetchall():
        if not any(needle in text for needle in needles):
            continue
        customer = s.doc("customers", pos, text)
        if customer["phone_number"] == phone_number:
            return customer
        for line_id in customer["line_ids"]:
            if s.get("lines", line_id)["phone_number"] == phone_number:
                return customer
    raise ToolError(f"Customer with phone number {phone_number} not found")


def line_by_phone(s: Session, phone_number: str) -> dict[str, Any]:
    line = s.find("lines", "phone_number", phone_number)
    if line is None:
        raise ToolError(f"Line with phone number {phone_number} not found")
    return line


def target_line(s: Session, customer_id: str, line_id: str) -> dict[str, Any]:
    """The line ``line_id`` of customer ``customer_id``."""
    customer = s.get("customers", customer_id)
    if line_id not in customer["line_ids"]:
        raise ToolError(f"Line {line_id} not found for customer {customer_id}")
    return s.get("lines", line_id)


def bills_awaiting_payment(s: Session, customer: dict[str, Any]) -> list[dict[str, Any]]:
    bills = (s.get("bills", bill_id) for bill_id in customer["bill_ids"])
    return [bill for bill in bills if bill["status"] == "Awaiting Payment"]


def _text(day: datetime.date) -> str:
    return str(day)


def _first_of_next_month(day: datetime.date) -> datetime.date:
    return (day.replace(day=1) + datetime.timedelta(days=32)).replace(day=1)


def apply_one_time_charge(s: Session, customer_id: str, amount: float, description: str) -> None:
    """Add a charge (or a credit) to the customer's first draft bill, creating one for next month if needed."""
    customer = s.get("customers", customer_id)
    draft = None
    for bill_id in customer["bill_ids"]:
        bill = s.get("bills", bill_id)
        if bill["status"] == "Draft":
            draft = bill
            break
    if draft is None:
        start = _first_of_next_month(TODAY)
        end = _first_of_next_month(start) - datetime.timedelta(days=1)
        bill_id = new_bill_id(s.bill_count(), lambda b: s.find("bills", "bill_id", b) is not None)
        draft = {
            "bill_id": bill_id,
            "customer_id": customer_id,
            "period_start": _text(start),
            "period_end": _text(end),
            "issue_date": _text(start),
            "total_due": 0.0,
            "due_date": _text(start + datetime.timedelta(days=14)),
            "line_items": [],
            "status": "Draft",
        }
        s.add_bill(draft)
        customer["bill_ids"].append(bill_id)
    item_type = "Credit" if amount < 0 else "Charge"
    draft["line_items"].append(
        {"description": description, "amount": float(amount), "date": _text(TODAY), "item_type": item_type}
    )
    draft["total_due"] += amount


def number_text(value: Any) -> str:
    """A number as tau2's tool messages show a bare number inside a dict (``str()``)."""
    return str(value)


# -- the agent's tools


def get_customer_by_phone(s: Session, phone_number: str) -> dict[str, Any]:
    return customer_by_phone(s, phone_number)


def get_customer_by_id(s: Session, customer_id: str) -> dict[str, Any]:
    return s.get("customers", customer_id)


def get_customer_by_name(s: Session, full_name: str, dob: str) -> list[dict[str, Any]]:
    name = full_name.lower()
    return [c for c in s.all("customers") if c["full_name"].lower() == name and c["date_of_birth"] == dob]


_ID_PREFIXES = (("L", "lines"), ("D", "devices"), ("B", "bills"), ("C", "customers"), ("P", "plans"))


def get_details_by_id(s: Session, id: str) -> dict[str, Any]:
    for prefix, table in _ID_PREFIXES:
        if id.startswith(prefix):
            return s.get(table, id)
    raise ToolError(f"Unknown ID format or type: {id}")


def suspend_line(s: Session, customer_id: str, line_id: str, reason: str) -> dict[str, Any]:
    line = target_line(s, customer_id, line_id)
    if line["status"] != "Active":
        raise ToolError("Line must be active to suspend")
    line["status"] = "Suspended"
    line["suspension_start_date"] = _text(TODAY)
    return {"message": "Line suspended successfully. $5/month holding fee will apply.", "line": line}


def resume_line(s: Session, customer_id: str, line_id: str) -> dict[str, Any]:
    line = target_line(s, customer_id, line_id)
    if line["status"] not in ("Suspended", "Pending Activation"):
        raise ToolError("Line must be suspended to resume")
    line["status"] = "Active"
    line["suspension_start_date"] = None
    return {"message": "Line resumed successfully", "line": line}


def get_bills_for_customer(s: Session, customer_id: str, limit: int = 12) -> list[dict[str, Any]]:
    customer = s.get("customers", customer_id)
    bills = [s.get("bills", bill_id) for bill_id in customer["bill_ids"]]
    # newest first; ISO dates sort as the dates do, and equal dates keep their order (as in tau2)
    return sorted(bills, key=lambda bill: bill["issue_date"], reverse=True)[:limit]


def send_payment_request(s: Session, customer_id: str, bill_id: str) -> str:
    customer = s.get("customers", customer_id)
    if bills_awaiting_payment(s, customer):
        raise ToolError("A bill is already awaiting payment for this customer")
    if bill_id not in customer["bill_ids"]:
        raise ToolError(f"Bill {bill_id} not found for customer {customer_id}")
    bill = s.get("bills", bill_id)
    bill["status"] = "Awaiting Payment"
    return f"Payment request sent to the customer for bill {bill['bill_id']}"


def get_data_usage(s: Session, customer_id: str, line_id: str) -> dict[str, Any]:
    line = target_line(s, customer_id, line_id)
    plan = s.get("plans", line["plan_id"])
    # tau2's formula: the last day of this month (for a December it would give the 31st of the previous
    # December, but tau2's today is fixed in February)
    cycle_end = datetime.date(TODAY.year, TODAY.month + 1 if TODAY.month < 12 else 1, 1) - datetime.timedelta(days=1)
    return {
        "line_id": line_id,
        "data_used_gb": number_text(line["data_used_gb"]),
        "data_limit_gb": number_text(plan["data_limit_gb"]),
        "data_refueling_gb": number_text(line["data_refueling_gb"]),
        "cycle_end_date": cycle_end.isoformat(),
    }


def enable_roaming(s: Session, customer_id: str, line_id: str) -> str:
    line = target_line(s, customer_id, line_id)
    if line["roaming_enabled"]:
        return "Roaming was already enabled"
    line["roaming_enabled"] = True
    return "Roaming enabled successfully"


def disable_roaming(s: Session, customer_id: str, line_id: str) -> str:
    line = target_line(s, customer_id, line_id)
    if not line["roaming_enabled"]:
        return "Roaming was already disabled"
    line["roaming_enabled"] = False
    return "Roaming disabled successfully"


def transfer_to_human_agents(s: Session, summary: str) -> str:
    return "Transfer successful"


def refuel_data(s: Session, customer_id: str, line_id: str, gb_amount: float) -> dict[str, Any]:
    line = target_line(s, customer_id, line_id)
    if gb_amount <= 0:
        raise ToolError("Refuel amount must be positive")
    plan = s.get("plans", line["plan_id"])
    price = plan["data_refueling_price_per_gb"]
    charge = gb_amount * price
    line["data_refueling_gb"] += gb_amount
    apply_one_time_charge(s, customer_id, charge, f"Data refueling: {gb_amount} GB at ${price}/GB")
    return {
        "message": f"Successfully added {gb_amount} GB of data for line {line_id} for ${charge:.2f}",
        "new_data_refueling_gb": number_text(line["data_refueling_gb"]),
        "charge": number_text(charge),
    }


# -- scenario set-up (not tools)


def get_available_plan_ids(s: Session) -> list[str]:
    return [plan["plan_id"] for plan in s.all("plans")]


def set_data_usage(s: Session, customer_id: str, line_id: str, data_used_gb: float) -> str:
    line = target_line(s, customer_id, line_id)
    line["data_used_gb"] = data_used_gb
    return f"Data usage set to {data_used_gb} GB for line {line_id}"


def suspend_line_for_overdue_bill(
    s: Session, customer_id: str, line_id: str, new_bill_id: str, contract_ended: bool
) -> str:
    line = s.get("lines", line_id)
    if line["status"] != "Active":
        raise ToolError("Line must be active to suspend for unpaid bill")
    amount = s.get("plans", line["plan_id"])["price_per_month"]
    if amount <= 0:
        raise ToolError("Amount must be positive for overdue bill")
    customer = s.get("customers", customer_id)
    if [bill_id for bill_id in customer["bill_ids"] if s.get("bills", bill_id)["status"] == "Overdue"]:
        raise ToolError("Customer already has an overdue bill")
    last_day = TODAY.replace(day=1) - datetime.timedelta(days=1)
    first_day = last_day.replace(day=1)
    s.add_bill(
        {
            "bill_id": new_bill_id,
            "customer_id": customer_id,
            "period_start": _text(first_day),
            "period_end": _text(last_day),
            "issue_date": _text(first_day),
            "total_due": 0.0 + amount,
            "due_date": _text(first_day + datetime.timedelta(days=14)),
            "line_items": [
                {
                    "description": f"Charge for line {line['line_id']}",
                    "amount": float(amount),
                    "date": _text(TODAY),
                    "item_type": "Charge" if amount > 0 else "Credit",
                }
            ],
            "status": "Overdue",
        }
    )
    customer["bill_ids"].append(new_bill_id)
    line["status"] = "Suspended"
    line["suspension_start_date"] = _text(TODAY)
    if contract_ended:
        line["contract_end_date"] = _text(last_day)
    return f"Line {line_id} suspended for unpaid bill {new_bill_id}. Contract ended: {contract_ended}"


# -- assertions


def assert_data_refueling_amount(s: Session, customer_id: str, line_id: str, expected_amount: float) -> bool:
    return abs(target_line(s, customer_id, line_id)["data_refueling_gb"] - expected_amount) < 1e-6


def assert_line_status(s: Session, customer_id: str, line_id: str, expected_status: str) -> bool:
    return target_line(s, customer_id, line_id)["status"] == expected_status


def assert_overdue_bill_exists(s: Session, customer_id: str, overdue_bill_id: str) -> bool:
    customer = s.get("customers", customer_id)
    if overdue_bill_id not in customer["bill_ids"]:
        raise ToolError(f"Overdue bill {overdue_bill_id} not found")
    if s.get("bills", overdue_bill_id)["status"] != "Overdue":
        raise ToolError(f"Overdue bill {overdue_bill_id} is not overdue")
    return True


def assert_no_overdue_bill(s: Session, overdue_bill_id: str) -> bool:
    bill = s.find("bills", "bill_id", overdue_bill_id)
    return bill is None or bill["status"] == "Paid"
