"""The airline database in SQLite, one JSON document per flight, user and reservation in tau2's field order, and
the per-call session that the tools read and write it through (see :mod:`joy_env.domains.tau2.airline`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from typing import Any

from joy_env.core import ToolError
from joy_env.domains.tau2.session import session_tool

TABLES: dict[str, str] = {"flights": "flight_number", "users": "user_id", "reservations": "reservation_id"}
"""Every table with its primary key column, in the order of tau2's database fields."""
AUDIT: dict[str, tuple[str, ...]] = {table: (key,) for table, key in TABLES.items()}
"""The tables the write tools change: seats of flights (bookings), users (payment methods, reservation ids)
and reservations (bookings insert rows)."""


def dumps(entity: Mapping[str, Any]) -> str:
    """The stored JSON text of an entity."""
    return json.dumps(entity)


def build_db(db: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> sqlite3.Connection:
    """A fresh in-memory SQLite database holding ``db`` (canonical form, :func:`load_db`), rows in its order."""
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.executescript(
        "CREATE TABLE flights (flight_number TEXT PRIMARY KEY, origin TEXT NOT NULL, destination TEXT NOT NULL,"
        " data TEXT NOT NULL);"
        "CREATE TABLE users (user_id TEXT PRIMARY KEY, data TEXT NOT NULL);"
        "CREATE TABLE reservations (reservation_id TEXT PRIMARY KEY, data TEXT NOT NULL);"
        "CREATE INDEX flights_route ON flights (origin, destination);"
    )
    conn.executemany(
        "INSERT INTO flights VALUES (?, ?, ?, ?)",
        [(k, f["origin"], f["destination"], dumps(f)) for k, f in db["flights"].items()],
    )
    conn.executemany("INSERT INTO users VALUES (?, ?)", [(k, dumps(u)) for k, u in db["users"].items()])
    conn.executemany("INSERT INTO reservations VALUES (?, ?)", [(k, dumps(r)) for k, r in db["reservations"].items()])
    return conn


def dump_db(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    """The whole database in tau2's ``FlightDB.model_dump()`` form (new reservations last, as in tau2)."""
    return {
        table: {k: json.loads(d) for k, d in conn.execute(f"SELECT {key}, data FROM {table} ORDER BY rowid")}
        for table, key in TABLES.items()
    }


def _rows(conn: sqlite3.Connection, sql: str, params: tuple[str, ...]) -> list[tuple[Any, ...]]:
    try:
        return conn.execute(sql, params).fetchall()
    except UnicodeEncodeError:  # a lone surrogate (from a JSON escape) cannot be stored, so it matches nothing
        return []


class Session:
    """The entities one tool call reads, each loaded once (the same object on every access, as tau2's models
    are), written back if changed, also when the call fails half-way; new reservations are inserted."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.loaded: dict[tuple[str, str], tuple[str | None, dict[str, Any]]] = {}

    def _get(self, table: str, key: str) -> dict[str, Any] | None:
        hit = self.loaded.get((table, key))
        if hit is not None:
            return hit[1]
        rows = _rows(self.conn, f"SELECT data FROM {table} WHERE {TABLES[table]} = ?", (key,))
        if not rows:
            return None
        entity = json.loads(rows[0][0])
        self.loaded[(table, key)] = (rows[0][0], entity)
        return entity

    def user(self, user_id: str) -> dict[str, Any]:
        user = self._get("users", user_id)
        if user is None:
            raise ToolError(f"User {user_id} not found")
        return user

    def reservation(self, reservation_id: str) -> dict[str, Any]:
        reservation = self._get("reservations", reservation_id)
        if reservation is None:
            raise ToolError(f"Reservation {reservation_id} not found")
        return reservation

    def has_reservation(self, reservation_id: str) -> bool:
        return self._get("reservations", reservation_id) is not None

    def flight(self, flight_number: str) -> dict[str, Any]:
        flight = self._get("flights", flight_number)
        if flight is None:
            raise ToolError(f"Flight {flight_number} not found")
        return flight

    def flight_date(self, flight_number: str, date: str) -> dict[str, Any]:
        """The flight's status on ``date`` (the object inside the flight, so changes to it are kept)."""
        dates = self.flight(flight_number)["dates"]
        if date not in dates:
            raise ToolError(f"Flight {flight_number} not found on date {date}")
        return dates[date]

    def add_reservation(self, reservation: dict[str, Any]) -> None:
        """Insert a new reservation (when the session is flushed)."""
        self.loaded[("reservations", reservation["reservation_id"])] = (None, reservation)

    def flights(self, origin: str, destination: str | None = None) -> Iterator[dict[str, Any]]:
        """Flights from ``origin`` (to ``destination`` if given), in database order; read only."""
        if destination is None:
            rows = _rows(self.conn, "SELECT data FROM flights WHERE origin = ? ORDER BY rowid", (origin,))
        else:
            sql = "SELECT data FROM flights WHERE origin = ? AND destination = ? ORDER BY rowid"
            rows = _rows(self.conn, sql, (origin, destination))
        for (data,) in rows:
            yield json.loads(data)

    def flush(self) -> None:
        for (table, key), (before, entity) in self.loaded.items():
            after = dumps(entity)
            if after == before:
                continue
            if before is None:
                self.conn.execute("INSERT INTO reservations VALUES (?, ?)", (key, after))
            else:
                self.conn.execute(f"UPDATE {table} SET data = ? WHERE {TABLES[table]} = ?", (after, key))


run = session_tool(Session, "airline")
"""Wrap a tool body: one session per call, changes kept even when the call fails half-way (as in tau2,
whose tools change objects in place), and every failure reported as tau2 reports it (its message)."""
