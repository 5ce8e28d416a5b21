"""A stock update guarded by a fence.

The stock lives in a database outside Redis (SQLite here). A worker takes
``lock:stock:<sku>``, reads the quantity, and writes the new one together with its
fence; the database refuses a write whose fence is not higher than the last one it
stored. A worker that stalls past its lease (GC pause, VM migration, partition) and then
writes is refused instead of overwriting the newer holder's update.

    python stock_update.py --url redis://127.0.0.1:6379/0 --db stock.db --sku apple --delta -1
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
from collections.abc import Awaitable, Callable

import redis.asyncio as redis
from fencelock.asyncio import Locks


class StaleFence(Exception):
    """The database has already accepted a write from a later lock holder."""


class Inventory:
    """The fenced resource: every row remembers the fence of its last write."""

    def __init__(self, path: str) -> None:
        self.path = path
        with self._connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS stock"
                " (sku TEXT PRIMARY KEY, qty INTEGER NOT NULL, fence INTEGER NOT NULL)"
            )

    def _connect(self) -> sqlite3.Connection:
        # One connection per call: workers may run on other threads.
        return sqlite3.connect(self.path, timeout=10)

    def add_item(self, sku: str, qty: int) -> None:
        """Adds a product with its initial stock, unless it is already there."""
        with self._connect() as db:
            db.execute("INSERT OR IGNORE INTO stock VALUES (?, ?, 0)", (sku, qty))

    def quantity(self, sku: str) -> int:
        with self._connect() as db:
            (qty,) = db.execute(
                "SELECT qty FROM stock WHERE sku = ?", (sku,)
            ).fetchone()
        return qty

    def write(self, sku: str, qty: int, fence: int) -> None:
        """The fence check and the write are one statement, so they cannot interleave."""
        with self._connect() as db:
            updated = db.execute(
                "UPDATE stock SET qty = ?, fence = ? WHERE sku = ? AND fence < ?",
                (qty, fence, sku, fence),
            ).rowcount
        if updated != 1:
            raise StaleFence(f"{sku}: fence {fence} is not above the last write's")


async def adjust_stock(
    locks: Locks,
    inventory: Inventory,
    sku: str,
    delta: int,
    *,
    ttl: float = 10,
    wait: float = 5,
    between_read_and_write: Callable[[], Awaitable[None]] | None = None,
) -> int:
    """Adds ``delta`` to the stock of ``sku``; returns the new quantity."""
    async with locks.lock(f"stock:{sku}", ttl=ttl, wait=wait) as lease:
        qty = inventory.quantity(sku) + delta
        if between_read_and_write is not None:
            await between_read_and_write()
        inventory.write(sku, qty, lease.fence)
        return qty


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--db", default="stock.db")
    parser.add_argument("--sku", default="apple")
    parser.add_argument("--delta", type=int, default=-1)
    args = parser.parse_args()
    client = redis.Redis.from_url(args.url)
    inventory = Inventory(args.db)
    inventory.add_item(args.sku, 100)
    qty = await adjust_stock(Locks(client), inventory, args.sku, args.delta)
    print(f"{args.sku}: {qty} in stock")
    await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
