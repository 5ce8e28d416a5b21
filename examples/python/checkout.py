"""A checkout that must not run twice.

A double click, a retried request or two browser tabs send the same checkout at once.
Each request takes ``lock:checkout:{order}`` before charging; a second request finds it
busy and answers "in progress" instead of charging again, and one that comes after the
first finished sees the order paid. The hash tag ``{order}`` keeps the lock and the order
in one slot on Redis Cluster.

    python checkout.py --url redis://127.0.0.1:6379/0 --order 42
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable

import redis.asyncio as redis
from fencelock.asyncio import LockNotAcquired, Locks

Charge = Callable[[str, int], Awaitable[None]]


async def checkout(
    locks: Locks, order_id: str, amount_cents: int, charge: Charge
) -> str:
    """Returns "charged", "already-paid" or "in-progress"."""
    order_key = f"order:{{{order_id}}}"
    try:
        async with locks.lock(f"checkout:{{{order_id}}}", ttl=30) as lease:
            if await locks.client.hget(order_key, "status") == b"paid":
                return "already-paid"
            await charge(order_id, amount_cents)
            # Paid is recorded even if the lease was lost meanwhile: the money moved.
            await locks.client.hset(
                order_key, mapping={"status": "paid", "fence": lease.fence}
            )
            return "charged"
    except LockNotAcquired:
        return "in-progress"


async def charge_card(order_id: str, amount_cents: int) -> None:
    print(f"charging order {order_id}: {amount_cents / 100:.2f}")
    await asyncio.sleep(0.5)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--order", default="42")
    args = parser.parse_args()
    client = redis.Redis.from_url(args.url)
    locks = Locks(client)
    double_click = [checkout(locks, args.order, 1999, charge_card) for _ in range(2)]
    print(await asyncio.gather(*double_click))
    await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
