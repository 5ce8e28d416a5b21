"""At most N calls to a payment API at once, across every worker.

The payment provider accepts 5 concurrent requests per account, and web workers and
job runners on every server call it. Each call takes one of the 5 permits of the
semaphore ``lock:payments-api``: a sixth caller waits in the server's queue (FIFO, no
polling) for the first permit given back, and a worker that dies mid-call does not
leak its permit: the permit comes back when its own lease ends, while the others keep
theirs. A call that runs longer than the lease keeps its permit (auto-refresh).

    python payment_api.py --url redis://127.0.0.1:6379/0 --calls 12 --limit 5
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis.asyncio as redis
from fencelock.asyncio import Lease, Locks

T = TypeVar("T")


async def call_limited(
    locks: Locks,
    call: Callable[[Lease], Awaitable[T]],
    *,
    limit: int = 5,
    ttl: float = 30,
    wait: float = 60,
) -> T:
    """Runs ``call`` holding one of ``limit`` permits; ``LockNotAcquired`` if none
    came free within ``wait`` seconds. Every caller must use the same ``limit``."""
    async with locks.lock("payments-api", ttl=ttl, limit=limit, wait=wait) as lease:
        return await call(lease)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--limit", type=int, default=5)
    args = parser.parse_args()
    client = redis.Redis.from_url(args.url)
    locks = Locks(client)
    running = most = 0

    async def charge(lease: Lease) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.2)  # the provider's request
        running -= 1
        return lease.fence

    start = time.monotonic()
    calls = [call_limited(locks, charge, limit=args.limit) for _ in range(args.calls)]
    await asyncio.gather(*calls)
    elapsed = time.monotonic() - start
    print(f"{args.calls} calls in {elapsed:.1f} s, at most {most} at once")
    await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
