"""The airline tools with their JSON schemas (:data:`TOOLS`, :data:`WRITE_TOOLS`); see
:mod:`joy_env.domains.tau2_airline`."""

from __future__ import annotations

from typing import Any

from joy_env.core import Tool
from joy_env.domains.tau2_airline import tools as t
from joy_env.domains.tau2_airline.data import CABINS, FLIGHT_TYPES, INSURANCE
from joy_env.domains.tau2_airline.db import run

WRITE_TOOLS = frozenset(
    {
        "book_reservation",
        "cancel_reservation",
        "send_certificate",
        "update_reservation_baggages",
        "update_reservation_flights",
        "update_reservation_passengers",
    }
)
INT_LIMIT = 1_000_000_000
"""Integer arguments (amounts, bag counts) lie in ``[-INT_LIMIT, INT_LIMIT]``."""


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _integer(description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": -INT_LIMIT, "maximum": INT_LIMIT, "description": description}


def _enum(values: tuple[str, ...], description: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values), "description": description}


def _objects(fields: dict[str, dict[str, Any]], description: str) -> dict[str, Any]:
    """An array of objects with ``fields``, all required; other keys are allowed and ignored (as tau2 does)."""
    item = {"type": "object", "properties": fields, "required": list(fields), "additionalProperties": True}
    return {"type": "array", "items": item, "description": description}


def _schema(properties: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}


_USER_ID = _string("user id, e.g. 'sara_doe_496'")
_RESERVATION_ID = _string("six-character reservation id, e.g. 'ZFA04Y'")
_AIRPORT = "IATA airport code, three letters, e.g. '{}'"
_DATE = _string("date as 'YYYY-MM-DD', e.g. '2024-05-20'")
_CABIN = _enum(CABINS, "cabin class")
_PAYMENT_ID = _string(
    "id of a payment method saved in the user's profile, e.g. 'credit_card_7815826' or 'gift_card_7815826' "
    "(certificates cannot pay for changes)"
)
_FLIGHTS = {"flight_number": _string("e.g. 'HAT001'"), "date": _DATE}
_PASSENGER = {
    "first_name": _string("e.g. 'Noah'"),
    "last_name": _string("e.g. 'Brown'"),
    "dob": _string("date of birth as 'YYYY-MM-DD'"),
}
_PAYMENT = {
    "payment_id": _string("a saved payment method id, e.g. 'certificate_7504069'"),
    "amount": _integer("dollars charged to it"),
}
_ROUTE = {
    "origin": _string(_AIRPORT.format("JFK")),
    "destination": _string(_AIRPORT.format("LAX")),
    "date": _DATE,
}

TOOLS: tuple[Tool, ...] = (
    Tool(
        "book_reservation",
        "Book a new reservation for a user on the given flights, cabin and passengers. The price is each flight's "
        "price in the cabin per passenger, plus $30 per passenger with insurance, plus $50 per non-free bag; the "
        "payments must add up to it exactly (gift cards and certificates need the balance; a certificate is used "
        "up whole). Takes seats on the flights. Returns the reservation.",
        _schema(
            {
                "user_id": _USER_ID,
                "origin": _string("trip origin, " + _AIRPORT.format("SFO")),
                "destination": _string("trip destination, " + _AIRPORT.format("JFK")),
                "flight_type": _enum(FLIGHT_TYPES, "one way or round trip"),
                "cabin": _CABIN,
                "flights": _objects(_FLIGHTS, "every flight of the trip, in order"),
                "passengers": _objects(_PASSENGER, "every passenger"),
                "payment_methods": _objects(_PAYMENT, "how the total is split over the user's payment methods"),
                "total_baggages": _integer("checked bags in all"),
                "nonfree_baggages": _integer("checked bags to pay for ($50 each)"),
                "insurance": _enum(INSURANCE, "travel insurance ($30 per passenger)"),
            }
        ),
        run(t.book_reservation),
        writes=True,
    ),
    Tool(
        "calculate",
        "Evaluate an arithmetic expression of numbers, + - * /, parentheses and spaces; returns the value rounded "
        "to 2 decimals, as text.",
        _schema({"expression": _string("e.g. '(230 + 150) * 2'")}),
        run(t.calculate),
    ),
    Tool(
        "cancel_reservation",
        "Cancel a whole reservation: every payment is refunded to its method. Returns the reservation.",
        _schema({"reservation_id": _RESERVATION_ID}),
        run(t.cancel_reservation),
        writes=True,
    ),
    Tool(
        "get_reservation_details",
        "A reservation: user, trip, cabin, flights with the prices paid, passengers, payments, bags, insurance, "
        "status.",
        _schema({"reservation_id": _RESERVATION_ID}),
        run(t.get_reservation_details),
    ),
    Tool(
        "get_user_details",
        "A user: name, address, email, date of birth, payment methods (gift card and certificate balances), saved "
        "passengers, membership and reservation ids.",
        _schema({"user_id": _USER_ID}),
        run(t.get_user_details),
    ),
    Tool(
        "list_all_airports",
        "The IATA codes and cities of all airports served.",
        _schema({}),
        run(t.list_all_airports),
    ),
    Tool(
        "search_direct_flight",
        "Nonstop flights between two airports with seats for sale on a date: times, seats left and prices per cabin.",
        _schema(_ROUTE),
        run(t.search_direct_flight),
    ),
    Tool(
        "search_onestop_flight",
        "Connections with one stop between two airports, leaving on a date: pairs of flights, each with its date, "
        "times, seats left and prices per cabin.",
        _schema(_ROUTE),
        run(t.search_onestop_flight),
    ),
    Tool(
        "send_certificate",
        "Add a travel certificate of the given amount to a user's payment methods (at most three per user). Only "
        "as the policy allows.",
        _schema({"user_id": _USER_ID, "amount": _integer("dollars")}),
        run(t.send_certificate),
        writes=True,
    ),
    Tool(
        "transfer_to_human_agents",
        "Transfer the user to a human agent with a summary of the issue; only if the user asks for one or the "
        "policy and tools cannot solve the issue.",
        _schema({"summary": _string("the user's issue")}),
        run(t.transfer_to_human_agents),
    ),
    Tool(
        "update_reservation_baggages",
        "Set a reservation's checked bags; each non-free bag beyond those already paid costs $50, charged to the "
        "payment method. Returns the reservation.",
        _schema(
            {
                "reservation_id": _RESERVATION_ID,
                "total_baggages": _integer("checked bags in all, after the change"),
                "nonfree_baggages": _integer("checked bags to pay for, after the change"),
                "payment_id": _PAYMENT_ID,
            }
        ),
        run(t.update_reservation_baggages),
        writes=True,
    ),
    Tool(
        "update_reservation_flights",
        "Replace a reservation's flights and cabin. List every flight of the new itinerary, the unchanged ones "
        "too: those keep the price paid (same cabin), the others cost today's price; the difference for all "
        "passengers is charged, or refunded when negative, to the payment method. Returns the reservation.",
        _schema(
            {
                "reservation_id": _RESERVATION_ID,
                "cabin": _enum(CABINS, "cabin class of the whole reservation after the change"),
                "flights": _objects(_FLIGHTS, "every flight of the new itinerary, in order"),
                "payment_id": _PAYMENT_ID,
            }
        ),
        run(t.update_reservation_flights),
        writes=True,
    ),
    Tool(
        "update_reservation_passengers",
        "Replace the passengers of a reservation with as many new ones. Returns the reservation.",
        _schema({"reservation_id": _RESERVATION_ID, "passengers": _objects(_PASSENGER, "every passenger")}),
        run(t.update_reservation_passengers),
        writes=True,
    ),
    Tool(
        "get_flight_status",
        "A flight's status on a date: 'available', 'on time', 'delayed', 'flying', 'landed' or 'cancelled'.",
        _schema({"flight_number": _string("e.g. 'HAT001'"), "date": _DATE}),
        run(t.get_flight_status),
    ),
)
