"""The bodies of the airline tools, tau2's ``AirlineTools`` call by call: each takes a :class:`Session`;
:func:`~joy_env.domains.tau2.airline.db.run` turns it into a tool (see :mod:`joy_env.domains.tau2.airline`).

The checks run in tau2's order, and what a call changed before failing stays changed, as in tau2."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from joy_env.core import ToolError
from joy_env.domains.tau2.airline.data import (
    NEW_CERTIFICATE_IDS,
    NEW_RESERVATION_IDS,
    NOW,
    certificate,
    passenger,
    payment,
    reservation_flight,
)
from joy_env.domains.tau2.airline.db import Session
from joy_env.domains.tau2.calculate import calculate_expression

AIRPORTS: tuple[tuple[str, str], ...] = (
    ("SFO", "San Francisco"),
    ("JFK", "New York"),
    ("LAX", "Los Angeles"),
    ("ORD", "Chicago"),
    ("DFW", "Dallas"),
    ("DEN", "Denver"),
    ("SEA", "Seattle"),
    ("ATL", "Atlanta"),
    ("MIA", "Miami"),
    ("BOS", "Boston"),
    ("PHX", "Phoenix"),
    ("IAH", "Houston"),
    ("LAS", "Las Vegas"),
    ("MCO", "Orlando"),
    ("EWR", "Newark"),
    ("CLT", "Charlotte"),
    ("MSP", "Minneapolis"),
    ("DTW", "Detroit"),
    ("PHL", "Philadelphia"),
    ("LGA", "LaGuardia"),
)
"""The airports ``list_all_airports`` names, in tau2's order (IATA code, city)."""
INSURANCE_FEE = 30
"""Travel insurance, per passenger."""
BAG_FEE = 50
"""Each non-free checked bag."""


def calculate(s: Session, expression: str) -> str:
    return calculate_expression(expression)


def _direct(
    s: Session, date: str, origin: str, destination: str | None = None, leave_after: str | None = None
) -> list[dict[str, Any]]:
    """The flights from ``origin`` (to ``destination``) available on ``date`` (departing at ``leave_after`` or
    later, compared as text), each with its seats and prices that day and ``date`` left empty."""
    found = []
    for flight in s.flights(origin, destination):
        day = flight["dates"].get(date)
        if day is None or day["status"] != "available":
            continue
        if leave_after is not None and not flight["scheduled_departure_time_est"] >= leave_after:
            continue
        found.append(
            {
                "flight_number": flight["flight_number"],
                "origin": flight["origin"],
                "destination": flight["destination"],
                "status": "available",
                "scheduled_departure_time_est": flight["scheduled_departure_time_est"],
                "scheduled_arrival_time_est": flight["scheduled_arrival_time_est"],
                "date": None,
                "available_seats": day["available_seats"],
                "prices": day["prices"],
            }
        )
    return found


def search_direct_flight(s: Session, origin: str, destination: str, date: str) -> list[dict[str, Any]]:
    return _direct(s, date, origin, destination)


def search_onestop_flight(s: Session, origin: str, destination: str, date: str) -> list[list[dict[str, Any]]]:
    pairs = []
    for first in _direct(s, date, origin):
        first["date"] = date
        # as in tau2: the day after is "2024-05-" + (the last two characters of date, as a number, + 1),
        # without zero padding, whatever the month
        arrives = first["scheduled_arrival_time_est"]
        second_date = f"2024-05-{int(date[-2:]) + 1}" if "+1" in arrives else date
        for second in _direct(s, second_date, first["destination"], destination, leave_after=arrives):
            second["date"] = second_date
            pairs.append([first, second])
    return pairs


def list_all_airports(s: Session) -> list[dict[str, str]]:
    return [{"iata": code, "city": city} for code, city in AIRPORTS]


def get_user_details(s: Session, user_id: str) -> dict[str, Any]:
    return s.user(user_id)


def get_reservation_details(s: Session, reservation_id: str) -> dict[str, Any]:
    return s.reservation(reservation_id)


def get_flight_status(s: Session, flight_number: str, date: str) -> str:
    return s.flight_date(flight_number, date)["status"]


def transfer_to_human_agents(s: Session, summary: str) -> str:
    return "Transfer successful"


def _payment_for_update(user: dict[str, Any], payment_id: str, total_price: int) -> dict[str, Any] | None:
    """Charge ``total_price`` (a refund when negative) to a saved method other than a certificate; a gift card
    is charged at once. The payment to record, or ``None`` when nothing is due."""
    methods = user["payment_methods"]
    if payment_id not in methods:
        raise ToolError("Payment method not found")
    method = methods[payment_id]
    if method["source"] == "certificate":
        raise ToolError("Certificate cannot be used to update reservation")
    if method["source"] == "gift_card" and method["amount"] < total_price:
        raise ToolError("Gift card balance is not enough")
    if method["source"] == "gift_card":
        method["amount"] -= total_price
    return payment(payment_id, total_price) if total_price != 0 else None


def book_reservation(
    s: Session,
    user_id: str,
    origin: str,
    destination: str,
    flight_type: str,
    cabin: str,
    flights: Sequence[Mapping[str, Any]],
    passengers: Sequence[Mapping[str, Any]],
    payment_methods: Sequence[Mapping[str, Any]],
    total_baggages: int,
    nonfree_baggages: int,
    insurance: str,
) -> dict[str, Any]:
    travellers = [passenger(p) for p in passengers]
    payments = [payment(p["payment_id"], p["amount"]) for p in payment_methods]
    user = s.user(user_id)
    reservation_id = next((i for i in NEW_RESERVATION_IDS if not s.has_reservation(i)), None)
    if reservation_id is None:
        raise ToolError("Too many reservations")
    booked = []
    days = []
    total_price = 0
    for info in flights:
        number, date = info["flight_number"], info["date"]
        flight = s.flight(number)
        day = s.flight_date(number, date)
        if day["status"] != "available":
            raise ToolError(f"Flight {number} not available on date {date}")
        if day["available_seats"][cabin] < len(travellers):
            raise ToolError(f"Not enough seats on flight {number}")
        price = day["prices"][cabin]
        booked.append(reservation_flight(number, flight["origin"], flight["destination"], date, price))
        days.append(day)
        total_price += price * len(travellers)
    if insurance == "yes":
        total_price += INSURANCE_FEE * len(travellers)
    total_price += BAG_FEE * nonfree_baggages
    methods = user["payment_methods"]
    for p in payments:
        if p["payment_id"] not in methods:
            raise ToolError(f"Payment method {p['payment_id']} not found")
        method = methods[p["payment_id"]]
        if method["source"] in ("gift_card", "certificate") and method["amount"] < p["amount"]:
            raise ToolError(f"Not enough balance in payment method {p['payment_id']}")
    paid = sum(p["amount"] for p in payments)
    if paid != total_price:
        raise ToolError(f"Payment amount does not add up, total price is {total_price}, but paid {paid}")
    for p in payments:
        if p["payment_id"] not in methods:
            # as in tau2: a certificate named twice is gone the second time (a KeyError, shown as the quoted id);
            # the charges before it stay, nothing is booked
            raise ToolError(repr(p["payment_id"]))
        method = methods[p["payment_id"]]
        if method["source"] == "gift_card":
            method["amount"] -= p["amount"]
        elif method["source"] == "certificate":
            del methods[p["payment_id"]]  # used whole, whatever the amount
    for day in days:
        day["available_seats"][cabin] -= len(travellers)
    reservation = {
        "reservation_id": reservation_id,
        "user_id": user_id,
        "origin": origin,
        "destination": destination,
        "flight_type": flight_type,
        "cabin": cabin,
        "flights": booked,
        "passengers": travellers,
        "payment_history": payments,
        "created_at": NOW,
        "total_baggages": total_baggages,
        "nonfree_baggages": nonfree_baggages,
        "insurance": insurance,
        "status": None,
    }
    s.add_reservation(reservation)
    user["reservations"].append(reservation_id)
    return reservation


def cancel_reservation(s: Session, reservation_id: str) -> dict[str, Any]:
    reservation = s.reservation(reservation_id)
    history = reservation["payment_history"]
    # as in tau2: every entry of the history so far is reversed (earlier refunds too); seats are not released
    history.extend([payment(p["payment_id"], -p["amount"]) for p in history])
    reservation["status"] = "cancelled"
    return reservation


def send_certificate(s: Session, user_id: str, amount: int) -> str:
    user = s.user(user_id)
    methods = user["payment_methods"]
    for certificate_id in NEW_CERTIFICATE_IDS:
        if certificate_id not in methods:
            methods[certificate_id] = certificate(certificate_id, amount)
            return f"Certificate {certificate_id} added to user {user_id} with amount {amount}."
    raise ToolError("Too many certificates")


def update_reservation_baggages(
    s: Session, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
) -> dict[str, Any]:
    reservation = s.reservation(reservation_id)
    user = s.user(reservation["user_id"])
    total_price = BAG_FEE * max(0, nonfree_baggages - reservation["nonfree_baggages"])
    charged = _payment_for_update(user, payment_id, total_price)
    if charged is not None:
        reservation["payment_history"].append(charged)
    reservation["total_baggages"] = total_baggages
    reservation["nonfree_baggages"] = nonfree_baggages
    return reservation


def update_reservation_flights(
    s: Session, reservation_id: str, cabin: str, flights: Sequence[Mapping[str, Any]], payment_id: str
) -> dict[str, Any]:
    reservation = s.reservation(reservation_id)
    user = s.user(reservation["user_id"])
    travellers = len(reservation["passengers"])
    total_price = 0
    kept = []
    for info in flights:
        number, date = info["flight_number"], info["date"]
        same = next(
            (
                f
                for f in reservation["flights"]
                if f["flight_number"] == number and f["date"] == date and cabin == reservation["cabin"]
            ),
            None,
        )
        if same is not None:  # an unchanged flight keeps the price paid
            total_price += same["price"] * travellers
            kept.append(same)
            continue
        flight = s.flight(number)
        day = s.flight_date(number, date)
        if day["status"] != "available":
            raise ToolError(f"Flight {number} not available on date {date}")
        if day["available_seats"][cabin] < travellers:
            raise ToolError(f"Not enough seats on flight {number}")
        new = reservation_flight(number, flight["origin"], flight["destination"], date, day["prices"][cabin])
        total_price += new["price"] * travellers
        kept.append(new)
    total_price -= sum(f["price"] for f in reservation["flights"]) * travellers
    charged = _payment_for_update(user, payment_id, total_price)
    if charged is not None:
        reservation["payment_history"].append(charged)
    # as in tau2: seats are neither taken on the new flights nor released on the old ones
    reservation["flights"] = kept
    reservation["cabin"] = cabin
    return reservation


def update_reservation_passengers(
    s: Session, reservation_id: str, passengers: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    travellers = [passenger(p) for p in passengers]
    reservation = s.reservation(reservation_id)
    if len(travellers) != len(reservation["passengers"]):
        raise ToolError("Number of passengers does not match")
    reservation["passengers"] = travellers
    return reservation
