"""The fence check of a database outside Redis, for a read-modify-write.

Checking the fence on the write (``UPDATE … WHERE fence < :fence``) refuses a stale
holder only if the newer holder has *already written*: A reads, stalls past its lease;
B takes the lock, reads, writes slowly; A's write lands first and is accepted, B's
overwrites it, and one of two acknowledged updates is lost. The fix is to *claim* the
fence before reading, in the same transaction as the write:

    with sqlite3.connect(path) as db:            # one transaction
        fencelock.sql.claim(db, "stock:apple", lease.fence)
        (qty,) = db.execute("SELECT qty FROM stock WHERE sku = 'apple'").fetchone()
        db.execute("UPDATE stock SET qty = ? WHERE sku = 'apple'", (qty - 1,))

``claim`` raises the resource's fence row to ``fence`` or raises ``StaleFence``. The
row lock it takes orders the transactions: a newer holder's claim waits for an older
transaction in flight (and then reads its result), and an older holder that claims
after a newer one is refused before it reads anything.

Works with any DB-API 2.0 connection or cursor (``sqlite3``, ``psycopg``, …);
``paramstyle`` is the driver module's (``sqlite3.paramstyle`` is ``"qmark"``,
psycopg's ``"pyformat"``; ``"named"`` and ``"format"`` work too)."""

from __future__ import annotations

import re
from typing import Any

from .errors import StaleFence

# The fences table: one row per resource, the highest fence that claimed it.
CREATE_TABLE = (
    "CREATE TABLE IF NOT EXISTS {table} "
    "(resource VARCHAR(255) PRIMARY KEY, fence BIGINT NOT NULL)"
)

# Where each DB-API paramstyle puts a parameter; the named ones take a dict.
_PLACEHOLDERS = {"qmark": "?", "format": "%s", "pyformat": "%({})s", "named": ":{}"}


def create_table(db: Any, table: str = "fences") -> None:
    """Creates the fences table if it is not there (``resource``, ``fence``)."""
    db.execute(CREATE_TABLE.format(table=_identifier(table)))


def claim(
    db: Any,
    resource: str,
    fence: int,
    *,
    table: str = "fences",
    paramstyle: str = "qmark",
) -> None:
    """Raises ``resource``'s fence to ``fence`` in the caller's open transaction, or
    raises ``StaleFence`` (``.highest``: the fence that claimed it last) when a newer
    holder has claimed it: then nothing was changed, and the caller must roll back
    instead of writing. The same fence may claim again (one lease, several
    transactions: no two grants share a fence). ``db`` is a DB-API connection with
    ``execute`` (``sqlite3``) or a cursor.

    The first claim of a resource inserts its row. On a database whose ``UPDATE`` of
    a missing row takes no lock (PostgreSQL), two first claims at the same moment
    can both try to insert: one fails with the driver's unique-key error (retry it),
    never both succeed. Insert the rows ahead (fence 0) to avoid even that."""
    table = _identifier(table)
    values = {"resource": resource, "fence": fence}

    def run(template: str) -> Any:
        sql, params = _bind(template.format(table=table), values, paramstyle)
        return db.execute(sql, params)

    # The UPDATE first: it takes the row's write lock before anything is read.
    updated = run(
        "UPDATE {table} SET fence = <fence> WHERE resource = <resource>"
        " AND fence <= <fence>"
    )
    if _rowcount(db, updated) == 1:
        return
    row = _fetchone(db, run("SELECT fence FROM {table} WHERE resource = <resource>"))
    if row is not None:
        raise StaleFence(resource, fence, int(row[0]))
    run("INSERT INTO {table} (resource, fence) VALUES (<resource>, <fence>)")


def _bind(sql: str, values: dict[str, Any], paramstyle: str) -> tuple[str, Any]:
    """``<name>`` markers as ``paramstyle``'s placeholders, with the parameters in
    the shape that style takes (a tuple in order of appearance, or a dict)."""
    if paramstyle not in _PLACEHOLDERS:
        raise ValueError(f"unsupported DB-API paramstyle {paramstyle!r}")
    placeholder = _PLACEHOLDERS[paramstyle]
    order = re.findall(r"<(\w+)>", sql)
    text = re.sub(r"<(\w+)>", lambda m: placeholder.format(m.group(1)), sql)
    if "{}" in placeholder:
        return text, values
    return text, tuple(values[name] for name in order)


def _rowcount(db: Any, result: Any) -> int:
    # sqlite3's Connection.execute returns a cursor; a DB-API cursor's execute
    # returns nothing and keeps the count itself.
    source = result if result is not None else db
    return int(source.rowcount)


def _fetchone(db: Any, result: Any) -> Any:
    source = result if result is not None else db
    return source.fetchone()


def _identifier(name: str) -> str:
    # The table name is spliced into the SQL: allow plain identifiers only.
    if not name.replace("_", "").replace(".", "").isalnum():
        raise ValueError(f"not a plain table name: {name!r}")
    return name
