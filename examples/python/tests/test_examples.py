"""The examples against a real server: a cron job runs once, a double-clicked checkout
charges once, a stalled stock writer is refused by its fence, and no more than N calls
reach the payment API at once. Each script also runs from the command line."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis.asyncio as redis
from checkout import checkout
from cron_once import run_once
from fencelock.asyncio import Locks
from payment_api import call_limited
from stock_update import Inventory, StaleFence, adjust_stock

EXAMPLES = Path(__file__).resolve().parents[1]


def test_the_cron_job_runs_once_across_five_servers(server_url):
    ran = []

    async def job(lease):
        ran.append(lease.fence)
        await asyncio.sleep(0.2)

    async def scenario():
        clients = [redis.Redis.from_url(server_url) for _ in range(5)]
        try:
            servers = [
                run_once(Locks(c), "daily-notif", "2026-11-29", job) for c in clients
            ]
            at_seven = await asyncio.gather(*servers)
            late = await run_once(Locks(clients[0]), "daily-notif", "2026-11-29", job)
            next_day = await run_once(
                Locks(clients[1]), "daily-notif", "2026-11-30", job
            )
        finally:
            for client in clients:
                await client.aclose()
        return at_seven, late, next_day

    at_seven, late, next_day = asyncio.run(scenario())
    assert sorted(at_seven) == [False, False, False, False, True]
    assert late is False, "a server firing after the job finished skips it"
    assert next_day is True
    assert len(ran) == 2


def test_a_double_clicked_checkout_charges_once(server_url):
    charges = []

    async def charge(order_id, amount):
        charges.append((order_id, amount))
        await asyncio.sleep(0.2)

    async def scenario():
        first, second = (
            redis.Redis.from_url(server_url),
            redis.Redis.from_url(server_url),
        )
        try:
            clicks = await asyncio.gather(
                checkout(Locks(first), "42", 1999, charge),
                checkout(Locks(second), "42", 1999, charge),
            )
            retry = await checkout(Locks(first), "42", 1999, charge)
            status = await first.hget("order:{42}", "status")
        finally:
            await first.aclose()
            await second.aclose()
        return clicks, retry, status

    clicks, retry, status = asyncio.run(scenario())
    assert sorted(clicks) == ["charged", "in-progress"]
    assert retry == "already-paid"
    assert status == b"paid"
    assert charges == [("42", 1999)]


def test_concurrent_stock_updates_lose_nothing(server_url, tmp_path):
    inventory = Inventory(str(tmp_path / "stock.db"))
    inventory.add_item("apple", 100)

    async def scenario():
        clients = [redis.Redis.from_url(server_url) for _ in range(10)]
        try:
            await asyncio.gather(
                *(adjust_stock(Locks(c), inventory, "apple", -1) for c in clients)
            )
        finally:
            for client in clients:
                await client.aclose()

    asyncio.run(scenario())
    assert inventory.quantity("apple") == 90


def test_a_writer_stalled_past_its_lease_is_refused_by_the_fence(server_url, tmp_path):
    inventory = Inventory(str(tmp_path / "stock.db"))
    inventory.add_item("apple", 10)
    stalled = threading.Event()
    newer = {}

    def newer_holder():
        """Another process: waits for the lock and sells 3 while the first one stalls."""

        async def sell_three():
            client = redis.Redis.from_url(server_url)
            try:
                stalled.wait(5)
                newer["qty"] = await adjust_stock(Locks(client), inventory, "apple", -3)
            finally:
                await client.aclose()

        asyncio.run(sell_three())

    async def stall_everything():
        # A stop-the-world pause: the whole event loop, refresher included, stands still
        # (time.sleep, not asyncio.sleep) while the lease runs out on the server.
        stalled.set()
        time.sleep(0.8)  # noqa: ASYNC251 - the point: the whole loop stalls

    other = threading.Thread(target=newer_holder)
    other.start()

    async def stalled_holder():
        client = redis.Redis.from_url(server_url)
        try:
            await adjust_stock(
                Locks(client),
                inventory,
                "apple",
                -1,
                ttl=0.3,
                between_read_and_write=stall_everything,
            )
        finally:
            await client.aclose()

    with pytest.raises(StaleFence):
        asyncio.run(stalled_holder())
    other.join(10)
    assert newer["qty"] == 7
    assert inventory.quantity("apple") == 7, "the stale write (9) was refused"


def test_at_most_three_payment_calls_at_once_across_workers(server_url):
    running = []
    most = []

    async def call(lease):
        running.append(lease.fence)
        most.append(len(running))
        await asyncio.sleep(0.1)
        running.remove(lease.fence)
        return lease.fence

    async def scenario():
        workers = [redis.Redis.from_url(server_url) for _ in range(4)]
        try:
            # A worker that died holding a permit: it comes back after its lease.
            dead = await Locks(workers[0]).acquire("payments-api", ttl=0.5, limit=3)
            calls = [
                call_limited(Locks(workers[i % 4]), call, limit=3, wait=10)
                for i in range(12)
            ]
            start = asyncio.get_running_loop().time()
            fences = await asyncio.gather(*calls)
            elapsed = asyncio.get_running_loop().time() - start
            left = await workers[0].exists("lock:payments-api")
        finally:
            for client in workers:
                await client.aclose()
        return dead, fences, elapsed, left

    dead, fences, elapsed, left = asyncio.run(scenario())
    assert max(most) == 3
    assert len(set(fences)) == 12 and min(fences) > dead.fence
    # 12 calls of 0.1 s: two permits for the first 0.5 s, then three.
    assert 0.4 < elapsed < 3
    assert left == 0, "every permit was given back"


@pytest.mark.parametrize(
    "script, args, expected",
    [
        ("cron_once.py", [], "ran here"),
        ("checkout.py", ["--order", "7"], "'charged'"),
        ("stock_update.py", ["--sku", "pear", "--delta", "-2"], "pear: 98 in stock"),
        ("payment_api.py", ["--calls", "6", "--limit", "2"], "at most 2 at once"),
    ],
)
def test_the_scripts_run_from_the_command_line(
    server_url, tmp_path, script, args, expected
):
    extra = ["--db", str(tmp_path / "stock.db")] if script == "stock_update.py" else []
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--url", server_url, *args, *extra],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout
