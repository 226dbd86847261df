"""SQLite helpers: cheap images of a database, change tracking, and comparison with a gold state.

An *image* is the bytes of a whole in-memory database (``Connection.serialize``). Images are
immutable, so snapshots share them freely; a snapshot only serialises when the database changed.

Tables that tools may modify are *audited*: triggers record the primary key of every inserted,
updated or deleted row in ``_audit``. Comparing a database with the gold one then reads only the
rows either of them changed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping

AUDIT_TABLE = "_audit"
RowKey = tuple[str, tuple]


def image(conn: sqlite3.Connection) -> bytes:
    """The bytes of the whole database."""
    return conn.serialize()


def load(data: bytes, conn: sqlite3.Connection | None = None) -> sqlite3.Connection:
    """Load an image into ``conn`` (replacing its content) or into a new in-memory connection."""
    if conn is None:
        conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.deserialize(data)
    return conn


def install_audit(conn: sqlite3.Connection, tables: Mapping[str, tuple[str, ...]]) -> None:
    """Create ``_audit`` and triggers that log the primary key of every row changed in ``tables``."""
    width = max((len(pk) for pk in tables.values()), default=1)
    cols = ", ".join(f"k{i}" for i in range(width))
    conn.execute(f"CREATE TABLE IF NOT EXISTS {AUDIT_TABLE} (tbl TEXT NOT NULL, {cols}, UNIQUE (tbl, {cols}))")
    for table, pk in tables.items():
        for event, ref in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
            values = ", ".join([f"'{table}'"] + [f"{ref}.{c}" for c in pk] + ["NULL"] * (width - len(pk)))
            names = ", ".join(["tbl"] + [f"k{i}" for i in range(width)])
            conn.execute(
                f"CREATE TRIGGER IF NOT EXISTS _audit_{table}_{event.lower()} AFTER {event} ON {table} "
                f"BEGIN INSERT OR IGNORE INTO {AUDIT_TABLE} ({names}) VALUES ({values}); END"
            )


def changed_keys(conn: sqlite3.Connection, tables: Mapping[str, tuple[str, ...]]) -> set[RowKey]:
    """The ``(table, primary key)`` of every row changed since the audit log was last cleared."""
    keys: set[RowKey] = set()
    for row in conn.execute(f"SELECT * FROM {AUDIT_TABLE}"):
        table = row[0]
        keys.add((table, tuple(row[1 : 1 + len(tables[table])])))
    return keys


def fetch_row(conn: sqlite3.Connection, pk: Mapping[str, tuple[str, ...]], key: RowKey) -> tuple | None:
    """The row of ``key`` in ``conn`` or ``None`` if it does not exist."""
    table, values = key
    where = " AND ".join(f"{c} = ?" for c in pk[table])
    return conn.execute(f"SELECT * FROM {table} WHERE {where}", values).fetchone()


def rows(conn: sqlite3.Connection, pk: Mapping[str, tuple[str, ...]], keys: Iterable[RowKey]) -> dict:
    """``{key: row or None}`` for ``keys``."""
    return {k: fetch_row(conn, pk, k) for k in keys}


def full_dump(conn: sqlite3.Connection) -> list[tuple]:
    """Every row of every user table, in a canonical order (fallback comparison without audit)."""
    out: list[tuple] = []
    names = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' "
            f"AND name != '{AUDIT_TABLE}' ORDER BY name"
        )
    ]
    for name in names:
        out.append((name,))
        out.extend(sorted(conn.execute(f"SELECT * FROM {name}").fetchall(), key=repr))
    return out
