"""The airline tools with their JSON schemas (:data:`TOOLS`, :data:`WRITE_TOOLS`); see
:mod:`joy_env.domains.tau2.airline`."""

from __future__ import annotations

from typing import Any

from joy_env.core import Tool
from joy_env.domains.tau2.airline import tools as t
from joy_env.domains.tau2.airline.data import CABINS, FLIGHT_TYPES, INSURANCE
from joy_env.domains.tau2.airline.db import run
from joy_env.domains.tau2.tooling import ToolSpec, enum, integer, make_tools, objects, params, spec, string

INT_LIMIT = 1_000_000_000
"""Integer arguments (amounts, bag counts) lie in ``[-INT_LIMIT, INT_LIMIT]``."""


def _integer(description: str) -> dict[str, Any]:
    return integer(description, INT_LIMIT)


_USER_ID = string("user id, e.g. 'sara_doe_496'")
_RESERVATION_ID = string("six-character reservation id, e.g. 'ZFA04Y'")
_AIRPORT = "IATA airport code, three letters, e.g. '{}'"
_DATE = string("date as 'YYYY-MM-DD', e.g. '2024-05-20'")
_CABIN = enum(CABINS, "cabin class")
_PAYMENT_ID = string(
    "id of a payment method saved in the user's profile, e.g. 'credit_card_7815826' or 'gift_card_7815826' "
    "(certificates cannot pay for changes)"
)
_FLIGHTS = {"flight_number": string("e.g. 'HAT001'"), "date": _DATE}
_PASSENGER = {
    "first_name": string("e.g. 'Noah'"),
    "last_name": string("e.g. 'Brown'"),
    "dob": string("date of birth as 'YYYY-MM-DD'"),
}
_PAYMENT = {
    "payment_id": string("a saved payment method id, e.g. 'certificate_7504069'"),
    "amount": _integer("dollars charged to it"),
}
_ROUTE = {
    "origin": string(_AIRPORT.format("JFK")),
    "destination": string(_AIRPORT.format("LAX")),
    "date": _DATE,
}

SPECS: tuple[ToolSpec, ...] = (
    spec(
        t.book_reservation,
        params(
            user_id=_USER_ID,
            origin=string("trip origin, " + _AIRPORT.format("SFO")),
            destination=string("trip destination, " + _AIRPORT.format("JFK")),
            flight_type=enum(FLIGHT_TYPES, "one way or round trip"),
            cabin=_CABIN,
            flights=objects(_FLIGHTS, "every flight of the trip, in order"),
            passengers=objects(_PASSENGER, "every passenger"),
            payment_methods=objects(_PAYMENT, "how the total is split over the user's payment methods"),
            total_baggages=_integer("checked bags in all"),
            nonfree_baggages=_integer("checked bags to pay for ($50 each)"),
            insurance=enum(INSURANCE, "travel insurance ($30 per passenger)"),
        ),
        "Book a new reservation for a user on the given flights, cabin and passengers. The price is each flight's "
        "price in the cabin per passenger, plus $30 per passenger with insurance, plus $50 per non-free bag; the "
        "payments must add up to it exactly (gift cards and certificates need the balance; a certificate is used "
        "up whole). Takes seats on the flights. Returns the reservation.",
        writes=True,
    ),
    spec(
        t.calculate,
        params(expression=string("e.g. '(230 + 150) * 2'")),
        "Evaluate an arithmetic expression of numbers, + - * /, parentheses and spaces; returns the value rounded "
        "to 2 decimals, as text.",
    ),
    spec(
        t.cancel_reservation,
        params(reservation_id=_RESERVATION_ID),
        "Cancel a whole reservation: every payment is refunded to its method. Returns the reservation.",
        writes=True,
    ),
    spec(
        t.get_reservation_details,
        params(reservation_id=_RESERVATION_ID),
        "A reservation: user, trip, cabin, flights with the prices paid, passengers, payments, bags, insurance, "
        "status.",
    ),
    spec(
        t.get_user_details,
        params(user_id=_USER_ID),
        "A user: name, address, email, date of birth, payment methods (gift card and certificate balances), saved "
        "passengers, membership and reservation ids.",
    ),
    spec(
        t.list_all_airports,
        params(),
        "The IATA codes and cities of all airports served.",
    ),
    spec(
        t.search_direct_flight,
        params(**_ROUTE),
        "Nonstop flights between two airports with seats for sale on a date: times, seats left and prices per cabin.",
    ),
    spec(
        t.search_onestop_flight,
        params(**_ROUTE),
        "Connections with one stop between two airports, leaving on a date: pairs of flights, each with its date, "
        "times, seats left and prices per cabin.",
    ),
    spec(
        t.send_certificate,
        params(user_id=_USER_ID, amount=_integer("dollars")),
        "Add a travel certificate of the given amount to a user's payment methods (at most three per user). Only "
        "as the policy allows.",
        writes=True,
    ),
    spec(
        t.transfer_to_human_agents,
        params(summary=string("the user's issue")),
        "Transfer the user to a human agent with a summary of the issue; only if the user asks for one or the "
        "policy and tools cannot solve the issue.",
    ),
    spec(
        t.update_reservation_baggages,
        params(
            reservation_id=_RESERVATION_ID,
            total_baggages=_integer("checked bags in all, after the change"),
            nonfree_baggages=_integer("checked bags to pay for, after the change"),
            payment_id=_PAYMENT_ID,
        ),
        "Set a reservation's checked bags; each non-free bag beyond those already paid costs $50, charged to the "
        "payment method. Returns the reservation.",
        writes=True,
    ),
    spec(
        t.update_reservation_flights,
        params(
            reservation_id=_RESERVATION_ID,
            cabin=enum(CABINS, "cabin class of the whole reservation after the change"),
            flights=objects(_FLIGHTS, "every flight of the new itinerary, in order"),
            payment_id=_PAYMENT_ID,
        ),
        "Replace a reservation's flights and cabin. List every flight of the new itinerary, the unchanged ones "
        "too: those keep the price paid (same cabin), the others cost today's price; the difference for all "
        "passengers is charged, or refunded when negative, to the payment method. Returns the reservation.",
        writes=True,
    ),
    spec(
        t.update_reservation_passengers,
        params(reservation_id=_RESERVATION_ID, passengers=objects(_PASSENGER, "every passenger")),
        "Replace the passengers of a reservation with as many new ones. Returns the reservation.",
        writes=True,
    ),
    spec(
        t.get_flight_status,
        params(flight_number=string("e.g. 'HAT001'"), date=_DATE),
        "A flight's status on a date: 'available', 'on time', 'delayed', 'flying', 'landed' or 'cancelled'.",
    ),
)

TOOLS: tuple[Tool, ...] = make_tools(SPECS, run)
"""The service agent's tools (tau2's ``AirlineTools``)."""
WRITE_TOOLS = frozenset(s.name for s in SPECS if s.writes)
"""The tools tau2 marks as writes."""
