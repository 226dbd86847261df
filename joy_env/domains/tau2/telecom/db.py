"""The telecom state in SQLite -- the carrier's records and the customer's phone and surroundings on one
connection, in separate tables -- and the per-call :class:`Session` that the tools read and write it through
(see :mod:`joy_env.domains.tau2.telecom`).

Each element of tau2's lists (plans, customers, lines, bills, devices) is one row keyed by its position ``pos``
in the list (tau2 only ever appends, so positions are stable and ``ORDER BY pos`` is tau2's list order), with its
JSON document in tau2's field order and the ids the tools search by in their own columns. The customer's side
is table ``user_db``: the rows ``device`` and ``surroundings``, plus the row ``default_vpn`` (the state of the VPN
profile that tau2 shares between connections; not part of tau2's user database, see :data:`DEFAULT_VPN`).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from joy_env.core import ToolError

AUDIT: dict[str, tuple[str, ...]] = {
    "customers": ("pos",),
    "lines": ("pos",),
    "bills": ("pos",),
    "user_db": ("part",),
}
"""The tables a tool, an initialization function or the sync may write, with their primary keys (plans and
devices are never written)."""

ID_COLUMNS: dict[str, tuple[str, ...]] = {
    "plans": ("plan_id",),
    "customers": ("customer_id",),
    "lines": ("line_id", "phone_number"),
    "bills": ("bill_id",),
    "devices": ("device_id",),
}
"""The carrier's tables in tau2's order, each with the document fields copied into columns for lookups."""

USER_PARTS = ("device", "surroundings")
"""The rows of ``user_db`` that make tau2's user database."""

DEFAULT_VPN = {"server_performance": "excellent", "in_use": False}
"""The initial ``default_vpn`` row. tau2 connects a VPN by pointing the phone at one profile object shared by
the class (server 192.168.1.1, OpenVPN); ``break_vpn`` sets the performance of the phone's profile to poor,
which changes the shared profile when the phone uses it (``in_use``), so every later connection is poor too.
Here that shared profile belongs to the episode's database: it starts excellent in every fresh database."""

_SCHEMA = "".join(
    f"CREATE TABLE {table} (pos INTEGER PRIMARY KEY, {', '.join(f'{c} TEXT NOT NULL' for c in columns)}, "
    f"data TEXT NOT NULL); CREATE INDEX {table}_{columns[0]} ON {table} ({columns[0]});"
    for table, columns in ID_COLUMNS.items()
) + (
    "CREATE INDEX lines_phone_number ON lines (phone_number);"
    "CREATE TABLE user_db (part TEXT PRIMARY KEY, data TEXT NOT NULL);"
)

_NOT_FOUND = {
    "plans": "Plan with ID {} not found",
    "customers": "Customer with ID {} not found",
    "lines": "Line with ID {} not found",
    "bills": "Bill with ID {} not found",
    "devices": "Device with ID {} not found",
}


def dumps(doc: Any) -> str:
    """The stored text of a document."""
    return json.dumps(doc)


def create_db(agent: Mapping[str, Any], user: Mapping[str, Any]) -> sqlite3.Connection:
    """A fresh in-memory database holding ``agent`` and ``user`` (canonical form) as they are: no sync."""
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.executescript(_SCHEMA)
    for table, columns in ID_COLUMNS.items():
        rows = [(*(doc[c] for c in columns), dumps(doc)) for doc in agent[table]]
        marks = ", ".join("?" * (len(columns) + 1))
        conn.executemany(f"INSERT INTO {table} ({', '.join(columns)}, data) VALUES ({marks})", rows)
    parts = [(part, dumps(user[part])) for part in USER_PARTS] + [("default_vpn", dumps(DEFAULT_VPN))]
    conn.executemany("INSERT INTO user_db VALUES (?, ?)", parts)
    return conn


def dump_db(conn: sqlite3.Connection) -> dict[str, list[dict[str, Any]]]:
    """The carrier's database as tau2's ``TelecomDB.model_dump()`` in JSON form (dates as text), so that
    ``tau2.utils.get_dict_hash(dump_db(conn))`` is tau2's ``get_db_hash()``."""
    return {
        table: [json.loads(d) for (d,) in conn.execute(f"SELECT data FROM {table} ORDER BY pos")]
        for table in ID_COLUMNS
    }


def dump_user_db(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    """The customer's side as tau2's ``TelecomUserDB.model_dump()`` in JSON form (enums as their values), so that
    ``tau2.utils.get_dict_hash(dump_user_db(conn))`` is tau2's ``get_user_db_hash()``."""
    rows = dict(conn.execute("SELECT part, data FROM user_db WHERE part IN ('device', 'surroundings')"))
    return {part: json.loads(rows[part]) for part in USER_PARTS}


def new_bill_id(bill_count: int, taken: Callable[[str], bool]) -> str:
    """The id of a bill created when ``bill_count`` bills exist: ``"B"`` and 8 hex digits, like tau2's (which
    are random: ``uuid4``), but a function of the number of bills, skipping ids for which ``taken`` is true."""
    attempt = 0
    while True:
        bill_id = "B" + hashlib.sha256(f"tau2-telecom-bill:{bill_count}:{attempt}".encode()).hexdigest()[:8]
        if not taken(bill_id):
            return bill_id
        attempt += 1


class Session:
    """The documents one call reads, each loaded once and written back if changed (:meth:`flush`, also after a
    failure: tau2's functions change its objects in place). Lookups follow tau2's: the first match in list
    order, and tau2's message when there is none."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.rows: dict[tuple[str, int], list[Any]] = {}
        self.user: dict[str, list[Any]] = {}
        self.new_bills: list[dict[str, Any]] = []

    # -- the carrier's records

    def doc(self, table: str, pos: int, text: str) -> dict[str, Any]:
        """The record at ``pos`` of ``table`` whose stored text is ``text`` (decoded once per session)."""
        hit = self.rows.get((table, pos))
        if hit is None:
            hit = self.rows[(table, pos)] = [text, json.loads(text)]
        return hit[1]

    def find(self, table: str, column: str, value: str) -> dict[str, Any] | None:
        """The first record of ``table`` whose ``column`` (one of :data:`ID_COLUMNS`) is ``value``."""
        row = self.conn.execute(
            f"SELECT pos, data FROM {table} WHERE {column} = ? ORDER BY pos LIMIT 1", (value,)
        ).fetchone()
        if row is not None:
            return self.doc(table, row[0], row[1])
        if table == "bills":
            return next((b for b in self.new_bills if b[column] == value), None)
        return None

    def get(self, table: str, key: str) -> dict[str, Any]:
        """The record of ``table`` with id ``key``, or tau2's "... with ID ... not found"."""
        doc = self.find(table, ID_COLUMNS[table][0], key)
        if doc is None:
            raise ToolError(_NOT_FOUND[table].format(key))
        return doc

    def all(self, table: str) -> list[dict[str, Any]]:
        """Every record of ``table`` in list order."""
        docs = [
            self.doc(table, pos, text) for pos, text in self.conn.execute(f"SELECT pos, data FROM {table} ORDER BY pos")
        ]
        return docs + self.new_bills if table == "bills" else docs

    def bill_count(self) -> int:
        return self.conn.execute("SELECT count(*) FROM bills").fetchone()[0] + len(self.new_bills)

    def add_bill(self, bill: dict[str, Any]) -> None:
        """Append ``bill`` to the bills (written at :meth:`flush`)."""
        self.new_bills.append(bill)

    # -- the customer's side

    def part(self, name: str) -> dict[str, Any]:
        """The ``device``, ``surroundings`` or ``default_vpn`` document."""
        hit = self.user.get(name)
        if hit is None:
            (text,) = self.conn.execute("SELECT data FROM user_db WHERE part = ?", (name,)).fetchone()
            hit = self.user[name] = [text, json.loads(text)]
        return hit[1]

    def device(self) -> dict[str, Any]:
        return self.part("device")

    def surroundings(self) -> dict[str, Any]:
        return self.part("surroundings")

    # -- writing back

    def flush(self) -> None:
        """Write back every changed document and append the new bills."""
        for (table, pos), (before, doc) in self.rows.items():
            after = dumps(doc)
            if after == before:
                continue
            if table not in AUDIT:  # pragma: no cover - a bug, never tau2's behaviour
                raise RuntimeError(f"telecom {table} are never written")
            columns = ID_COLUMNS[table]
            sets = ", ".join(f"{c} = ?" for c in columns)
            self.conn.execute(
                f"UPDATE {table} SET {sets}, data = ? WHERE pos = ?", (*(doc[c] for c in columns), after, pos)
            )
            self.rows[(table, pos)][0] = after
        for bill in self.new_bills:
            self.conn.execute("INSERT INTO bills (bill_id, data) VALUES (?, ?)", (bill["bill_id"], dumps(bill)))
        self.new_bills = []
        for name, (before, doc) in self.user.items():
            after = dumps(doc)
            if after != before:
                self.conn.execute("UPDATE user_db SET data = ? WHERE part = ?", (after, name))
                self.user[name][0] = after
