"""A cron job that must run once across servers.

Every server runs the same crontab; at 07:00 each one calls ``run_once``. The first to
take ``lock:daily-notif:<day>`` runs the job and marks the day done; the others find
the lock busy (or the day done, if they fire late) and skip. The lock alone is not
enough: a server whose clock is a minute late would find it free again.

    python cron_once.py --url redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
from collections.abc import Awaitable, Callable

import redis.asyncio as redis
from fencelock.asyncio import Lease, LockNotAcquired, Locks

DONE_KEEP_SECONDS = 7 * 24 * 3600


async def run_once(
    locks: Locks,
    job: str,
    day: str,
    work: Callable[[Lease], Awaitable[None]],
    ttl: float = 60,
) -> bool:
    """Runs ``work`` if no server ran ``job`` for ``day`` yet. True if it ran here."""
    done_key = f"done:{job}:{day}"
    try:
        async with locks.lock(f"{job}:{day}", ttl=ttl) as lease:
            if await locks.client.exists(done_key):
                return False
            await work(lease)
            lease.ensure_held()
            await locks.client.set(done_key, lease.fence, ex=DONE_KEEP_SECONDS)
            return True
    except LockNotAcquired:
        return False


async def send_daily_notifications(lease: Lease) -> None:
    print(f"sending today's notifications (fence {lease.fence})")
    await asyncio.sleep(1)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    client = redis.Redis.from_url(args.url)
    day = datetime.date.today().isoformat()
    ran = await run_once(Locks(client), "daily-notif", day, send_daily_notifications)
    print("ran here" if ran else "skipped: another server has it")
    await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
