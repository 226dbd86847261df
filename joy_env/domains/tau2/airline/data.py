"""tau2-bench's airline data: where it lies, and reading its database into canonical form (tau2's field order,
every optional field present, ints and floats as tau2's models hold them); also the builders of the entities
the tools create, in the same form (see :mod:`joy_env.domains.tau2.airline`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from joy_env.domains.tau2.data import find_data, install_hint

DATA_FILES = ("db.json", "tasks.json", "split_tasks.json", "policy.md")
"""The files of tau2's airline data directory this domain uses."""
SPLITS = ("train", "test", "all")
"""tau2's ``train`` and ``test`` splits, and ``all`` (every task)."""
INSTALL_HINT = install_hint("airline", DATA_FILES)
CABINS = ("business", "economy", "basic_economy")
FLIGHT_TYPES = ("round_trip", "one_way")
INSURANCE = ("yes", "no")
NOW = "2024-05-15T15:00:00"
"""The fixed "current" date and time of tau2's airline tools (the ``created_at`` of every new reservation)."""
NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
"""The ids a new reservation takes, the first one free (a fourth booking fails)."""
NEW_CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
"""The ids a sent certificate takes, the first one the user lacks (a fourth certificate fails)."""

# the fields of each flight-date status, after ``status`` (tau2's models, one per status)
_STATUS_FIELDS: dict[str, tuple[str, ...]] = {
    "available": ("available_seats", "prices"),
    "landed": ("actual_departure_time_est", "actual_arrival_time_est"),
    "cancelled": (),
    "delayed": ("estimated_departure_time_est", "estimated_arrival_time_est"),
    "flying": ("actual_departure_time_est", "estimated_arrival_time_est"),
    "on time": ("estimated_departure_time_est", "estimated_arrival_time_est"),
}


def find_airline_data(path: str | os.PathLike[str] | None = None) -> Path:
    """The directory of tau2-bench's airline data: ``path`` if given, else the installed ``tau2`` package's
    (:func:`joy_env.domains.tau2.data.find_data`: a one-line ``FileNotFoundError`` or ``ImportError`` saying how
    to get the data; the ``tau2`` package is located, never imported)."""
    return find_data("airline", path)


def as_int(value: Any) -> int:
    """``value`` as tau2's ``int`` fields hold it (an integral float becomes an int)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"expected an integer, got {value!r}")
    return int(value)


def as_float(value: Any) -> float:
    """``value`` as tau2's ``float`` fields hold it (an int becomes a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


def passenger(p: Mapping[str, Any]) -> dict[str, Any]:
    """A passenger: first name, last name, date of birth (other keys dropped)."""
    return {"first_name": p["first_name"], "last_name": p["last_name"], "dob": p["dob"]}


def payment(payment_id: str, amount: Any) -> dict[str, Any]:
    """A payment of a reservation's history (a negative amount is a refund)."""
    return {"payment_id": payment_id, "amount": as_int(amount)}


def reservation_flight(flight_number: str, origin: str, destination: str, date: str, price: Any) -> dict[str, Any]:
    """One flight of a reservation, at the price paid per passenger."""
    return {
        "flight_number": flight_number,
        "origin": origin,
        "destination": destination,
        "date": date,
        "price": as_int(price),
    }


def certificate(certificate_id: str, amount: Any) -> dict[str, Any]:
    """A travel certificate payment method (its amount a float, as tau2 stores it)."""
    return {"source": "certificate", "id": certificate_id, "amount": as_float(amount)}


def _cabin_ints(values: Mapping[str, Any]) -> dict[str, int]:
    unknown = [k for k in values if k not in CABINS]
    if unknown:
        raise ValueError(f"unknown cabin classes {unknown}; expected {CABINS}")
    return {k: as_int(v) for k, v in values.items()}


def canon_flight_date(d: Mapping[str, Any]) -> dict[str, Any]:
    """A flight's status on one date: ``status`` and the fields of that status only."""
    status = d["status"]
    if status not in _STATUS_FIELDS:
        raise ValueError(f"unknown flight status {status!r}; expected one of {sorted(_STATUS_FIELDS)}")
    out: dict[str, Any] = {"status": status}
    for key in _STATUS_FIELDS[status]:
        out[key] = _cabin_ints(d[key]) if status == "available" else d[key]
    return out


def canon_flight(f: Mapping[str, Any]) -> dict[str, Any]:
    """A flight (a route at fixed times) with its status on every date it flies."""
    return {
        "flight_number": f["flight_number"],
        "origin": f["origin"],
        "destination": f["destination"],
        "scheduled_departure_time_est": f["scheduled_departure_time_est"],
        "scheduled_arrival_time_est": f["scheduled_arrival_time_est"],
        "dates": {date: canon_flight_date(d) for date, d in f["dates"].items()},
    }


def canon_payment_method(p: Mapping[str, Any]) -> dict[str, Any]:
    """A saved payment method: a credit card, or a gift card or certificate with a float amount."""
    source = p["source"]
    if source == "credit_card":
        return {"source": source, "id": p["id"], "brand": p["brand"], "last_four": p["last_four"]}
    if source in ("gift_card", "certificate"):
        return {"source": source, "id": p["id"], "amount": as_float(p["amount"])}
    raise ValueError(f"unknown payment method source {source!r}")


def canon_user(u: Mapping[str, Any]) -> dict[str, Any]:
    """A user: profile, saved payment methods and passengers, membership and reservation ids."""
    a = u["address"]
    return {
        "user_id": u["user_id"],
        "name": {"first_name": u["name"]["first_name"], "last_name": u["name"]["last_name"]},
        "address": {
            "address1": a["address1"],
            "address2": a.get("address2"),
            "city": a["city"],
            "country": a["country"],
            "state": a["state"],
            "zip": a["zip"],
        },
        "email": u["email"],
        "dob": u["dob"],
        "payment_methods": {k: canon_payment_method(p) for k, p in u["payment_methods"].items()},
        "saved_passengers": [passenger(p) for p in u["saved_passengers"]],
        "membership": u["membership"],
        "reservations": list(u["reservations"]),
    }


def canon_reservation(r: Mapping[str, Any]) -> dict[str, Any]:
    """A reservation; ``status`` is ``None`` or ``"cancelled"``."""
    return {
        "reservation_id": r["reservation_id"],
        "user_id": r["user_id"],
        "origin": r["origin"],
        "destination": r["destination"],
        "flight_type": r["flight_type"],
        "cabin": r["cabin"],
        "flights": [
            reservation_flight(f["flight_number"], f["origin"], f["destination"], f["date"], f["price"])
            for f in r["flights"]
        ],
        "passengers": [passenger(p) for p in r["passengers"]],
        "payment_history": [payment(p["payment_id"], p["amount"]) for p in r["payment_history"]],
        "created_at": r["created_at"],
        "total_baggages": as_int(r["total_baggages"]),
        "nonfree_baggages": as_int(r["nonfree_baggages"]),
        "insurance": r["insurance"],
        "status": r.get("status"),
    }


def canon_db(raw: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """tau2's airline database (``flights``, ``users``, ``reservations``) in canonical form."""
    extra = sorted(set(raw) - {"flights", "users", "reservations"})
    if extra:
        raise ValueError(f"unexpected keys in the airline database: {extra}")
    return {
        "flights": {k: canon_flight(v) for k, v in raw["flights"].items()},
        "users": {k: canon_user(v) for k, v in raw["users"].items()},
        "reservations": {k: canon_reservation(v) for k, v in raw["reservations"].items()},
    }


def load_db(root: Path) -> dict[str, dict[str, Any]]:
    """``root / "db.json"`` in canonical form: what tau2's ``FlightDB`` gives from it with ``model_dump()``
    (a new dict on each call; read it once and keep it)."""
    with open(Path(root) / "db.json", encoding="utf-8") as f:
        raw = json.load(f)
    return canon_db(raw)
