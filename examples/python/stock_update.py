"""A stock read-modify-write, fenced where the stock lives.

A worker takes ``lock:stock:<sku>``, reads the quantity, and writes the new one. The
lock keeps workers apart while leases hold; the fence keeps the stock right when one
does not: a worker that stalls past its lease (GC pause, VM migration, partition) and
then goes on must not count on what it read.

Checking the fence only on the write (``UPDATE … WHERE fence < :fence``) is not
enough for a read-modify-write: A reads 10 and stalls; B takes the lock, reads 10, is
slow; A's write (9) lands first and is accepted, B's (9) overwrites it: two
acknowledged sales, the stock down by one. So the fence is checked *before the read*:

- in a database (SQLite here): ``fencelock.sql.claim`` raises the resource's fence in
  the same transaction as the read and the write. The write lock it takes orders the
  transactions: a newer holder's claim waits for an older transaction in flight and
  then reads its result; an older holder that claims after a newer one is refused
  (``StaleFence``) before it reads anything;
- in Redis (``--redis``): the read goes *through* ``fencelock.fenced`` as well as the
  write, so the read already raises the mark and an older holder's write is refused.
  (``lease.guard(...)`` around the write, checked while the lease holds, works too.)

    python stock_update.py --url redis://127.0.0.1:6379/0 --db stock.db --delta -1
    python stock_update.py --url redis://127.0.0.1:6379/0 --redis --delta -1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
from collections.abc import Callable

import fencelock.sql
import redis.asyncio as redis
from fencelock.asyncio import Locks, fenced

# Places where a test can stall a worker: right after it took the lock, and between
# its read and its write (given the quantity it read).
AfterLock = Callable[[], None]
AfterRead = Callable[[int], None]


class Inventory:
    """The stock in a database outside Redis, with the ``fences`` table of
    ``fencelock.sql`` beside it (one row per resource: the highest fence that
    claimed it)."""

    def __init__(self, path: str) -> None:
        self.path = path
        with contextlib.closing(self.connect()) as db, db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS stock"
                " (sku TEXT PRIMARY KEY, qty INTEGER NOT NULL)"
            )
            fencelock.sql.create_table(db)

    def connect(self) -> sqlite3.Connection:
        # One connection per transaction: workers run on other threads. A claim that
        # finds another transaction writing waits up to ``timeout`` for it to end.
        return sqlite3.connect(self.path, timeout=10)

    def add_item(self, sku: str, qty: int) -> None:
        """Adds a product with its initial stock, unless it is already there."""
        with contextlib.closing(self.connect()) as db, db:
            db.execute(
                "INSERT OR IGNORE INTO stock (sku, qty) VALUES (?, ?)", (sku, qty)
            )

    def quantity(self, sku: str) -> int:
        with contextlib.closing(self.connect()) as db:
            (qty,) = db.execute(
                "SELECT qty FROM stock WHERE sku = ?", (sku,)
            ).fetchone()
        return int(qty)

    def adjust(
        self,
        sku: str,
        delta: int,
        fence: int,
        *,
        after_read: AfterRead | None = None,
    ) -> int:
        """Adds ``delta`` to the stock of ``sku`` in one transaction: claim the fence,
        read, write. Returns the new quantity; ``fencelock.StaleFence`` (and nothing
        written) if a holder with a newer fence has claimed the stock already."""
        with contextlib.closing(self.connect()) as db, db:  # commit, or roll back
            # sqlite3 begins the transaction here; the claim's UPDATE takes the
            # database's write lock (on PostgreSQL: the fence row's lock) before the
            # read, so no other claimer gets between this read and this write.
            fencelock.sql.claim(db, f"stock:{sku}", fence)
            (qty,) = db.execute(
                "SELECT qty FROM stock WHERE sku = ?", (sku,)
            ).fetchone()
            if after_read is not None:
                after_read(qty)
            db.execute("UPDATE stock SET qty = ? WHERE sku = ?", (qty + delta, sku))
        return int(qty) + delta


async def adjust_stock(
    locks: Locks,
    inventory: Inventory,
    sku: str,
    delta: int,
    *,
    ttl: float = 10,
    wait: float = 5,
    after_lock: AfterLock | None = None,
    after_read: AfterRead | None = None,
) -> int:
    """Adds ``delta`` to the stock of ``sku`` holding its lock; returns the new
    quantity. ``fencelock.StaleFence`` if the lease ran out and a newer holder got
    to the stock first: nothing was written, the caller may retry."""
    # lost_ok: the claim, not the lease, decides whether the transaction counts. A
    # transaction that committed was ordered by its claim and is right even if the
    # lease ran out meanwhile: reporting it as failed would invite a second sale.
    async with locks.lock(f"stock:{sku}", ttl=ttl, wait=wait, lost_ok=True) as lease:
        if after_lock is not None:
            after_lock()
        # SQLite blocks: the transaction runs on a worker thread, so the event loop
        # (and the lease's refresher) goes on while a claim waits for an older one.
        return await asyncio.to_thread(
            inventory.adjust, sku, delta, lease.fence, after_read=after_read
        )


async def adjust_redis_stock(
    locks: Locks,
    sku: str,
    delta: int,
    *,
    ttl: float = 10,
    wait: float = 5,
    after_read: AfterRead | None = None,
) -> int:
    """The same read-modify-write on a stock kept in Redis (``{sku}:stock``, mark
    ``{sku}:fence``, one slot on a cluster). ``fencelock.StaleFence`` if a newer
    holder has read or written the stock since this one took the lock."""
    stock, mark = f"{{{sku}}}:stock", f"{{{sku}}}:fence"
    async with locks.lock(
        f"stock:{{{sku}}}", ttl=ttl, wait=wait, lost_ok=True
    ) as lease:
        # Read through the mark too: the read raises it to this fence, so an older
        # holder's write is refused even before this one writes.
        raw = await fenced(locks.client, mark, lease.fence, "GET", stock)
        qty = int(raw or 0)
        if after_read is not None:
            after_read(qty)
        # The new value is computed here, as a real update would (a price, a
        # reservation): not something a single INCRBY could do.
        await fenced(locks.client, mark, lease.fence, "SET", stock, qty + delta)
        return qty + delta


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--db", default="stock.db")
    parser.add_argument("--redis", action="store_true", help="keep the stock in Redis")
    parser.add_argument("--sku", default="apple")
    parser.add_argument("--delta", type=int, default=-1)
    args = parser.parse_args()
    client = redis.Redis.from_url(args.url)
    locks = Locks(client)
    try:
        if args.redis:
            await client.set(f"{{{args.sku}}}:stock", 100, nx=True)
            qty = await adjust_redis_stock(locks, args.sku, args.delta)
        else:
            inventory = Inventory(args.db)
            inventory.add_item(args.sku, 100)
            qty = await adjust_stock(locks, inventory, args.sku, args.delta)
    finally:
        await client.aclose()
    print(f"{args.sku}: {qty} in stock")


if __name__ == "__main__":
    asyncio.run(main())
