"""The examples against a real server: a cron job runs once across three processes, a
double-clicked checkout charges once (in code and behind a FastAPI endpoint), a FastAPI
checkout honouring ``Idempotency-Key`` answers every submit alike and charges once even
when the process charging is killed, a stock
read-modify-write keeps every acknowledged sale when a worker stalls past its lease, no
more than N calls reach the payment API at once, and a Celery task queued three times
builds its report once on real workers. Each script also runs from the command line."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio as aioredis
import uvicorn
from celery_report import TASK, make_app
from checkout import checkout
from fastapi_checkout import create_app
from fastapi_idempotent import create_app as create_idempotent_app
from fastapi_idempotent import payment_keys
from fencelock import StaleFence
from fencelock.asyncio import Locks, fenced
from payment_api import call_limited
from stock_update import AfterRead, Inventory, adjust_redis_stock, adjust_stock

EXAMPLES = Path(__file__).resolve().parents[1]


def run_script(script: str, *args: str, cwd: Path) -> subprocess.Popen[str]:
    """Starts one of the examples as a process of its own."""
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )


def finish(process: subprocess.Popen[str]) -> str:
    """The output of a process started by ``run_script``, once it exited cleanly."""
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- cron_once.py ---------------------------------------------------------------------


def test_the_cron_job_runs_once_across_three_servers(server_url, tmp_path):
    def cron(*extra: str) -> subprocess.Popen[str]:
        args = ("--url", server_url, "--min-hold", "3", "--work", "0.3", *extra)
        return run_script("cron_once.py", *args, cwd=tmp_path)

    # 06:00 on three servers: three processes start the job at once.
    outputs = [finish(p) for p in [cron(), cron(), cron()]]
    ran_here = [out for out in outputs if "ran here" in out]
    skipped = [out for out in outputs if "skipped: another server has it" in out]
    assert (len(ran_here), len(skipped)) == (1, 2), outputs

    r = redis.Redis.from_url(server_url, decode_responses=True)
    try:
        runs = r.lrange("daily-report:runs", 0, -1)
        assert len(runs) == 1, "exactly one process ran the job"
        assert f"{runs[0]}: building the daily report" in ran_here[0]

        # A server whose clock is late fires after the job is over: min_hold keeps
        # the lock, so it skips too.
        assert "skipped" in finish(cron())
        assert r.llen("daily-report:runs") == 1

        # Once min_hold has passed (tomorrow, in real life) the job runs again.
        deadline = time.monotonic() + 10
        while r.exists("lock:daily-report") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "ran here" in finish(cron())
        assert r.llen("daily-report:runs") == 2
    finally:
        r.close()


# -- checkout.py ----------------------------------------------------------------------


def test_a_double_clicked_checkout_charges_once(server_url):
    charges = []

    async def charge(order_id, amount):
        charges.append((order_id, amount))
        await asyncio.sleep(0.2)

    async def scenario():
        first, second = (
            aioredis.Redis.from_url(server_url),
            aioredis.Redis.from_url(server_url),
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


# -- stock_update.py ------------------------------------------------------------------
#
# Each worker below is a thread with its own event loop and Redis connection: to the
# lock it is another process, and a stall of its loop stalls nothing else.


class Worker(threading.Thread):
    """Runs ``work(Locks(client))`` on a thread of its own, at once."""

    def __init__(self, url: str, work: Callable[[Locks], Awaitable[Any]]) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.work = work
        self.result: Any = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        async def main() -> Any:
            client = aioredis.Redis.from_url(self.url)
            try:
                return await self.work(Locks(client))
            finally:
                await client.aclose()

        try:
            self.result = asyncio.run(main())
        except Exception as error:  # noqa: BLE001 - outcome() raises it
            self.error = error

    def outcome(self) -> Any:
        """What ``work`` returned; what it raised is raised here."""
        self.join(30)
        assert not self.is_alive(), "the worker hung"
        if self.error is not None:
            raise self.error
        return self.result


def stop_the_world(loop: asyncio.AbstractEventLoop, until: threading.Event) -> None:
    """A stop-the-world pause (GC, VM migration) of one worker until ``until`` is set:
    its event loop, and the lease's refresher with it, stands still, and so does the
    thread that calls this (the loop's own, or the one running its transaction)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # on the transaction's thread (to_thread): stop the loop too
        loop.call_soon_threadsafe(until.wait, 10)
    until.wait(10)


class CheckedOnWrite(Inventory):
    """The old recipe: the fence is checked on the write only
    (``UPDATE … WHERE fence < :fence``), the read is not fenced."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        with contextlib.closing(self.connect()) as db, db:
            db.execute("ALTER TABLE stock ADD COLUMN fence INTEGER NOT NULL DEFAULT 0")

    def adjust(
        self, sku: str, delta: int, fence: int, *, after_read: AfterRead | None = None
    ) -> int:
        qty = self.quantity(sku)
        if after_read is not None:
            after_read(qty)
        with contextlib.closing(self.connect()) as db, db:
            updated = db.execute(
                "UPDATE stock SET qty = ?, fence = ? WHERE sku = ? AND fence < ?",
                (qty + delta, fence, sku, fence),
            ).rowcount
            if updated != 1:
                (highest,) = db.execute(
                    "SELECT fence FROM stock WHERE sku = ?", (sku,)
                ).fetchone()
                raise StaleFence(f"stock:{sku}", fence, highest)
        return qty + delta


def test_twenty_concurrent_stock_updates_lose_nothing(server_url, tmp_path):
    inventory = Inventory(str(tmp_path / "stock.db"))
    inventory.add_item("apple", 100)

    async def scenario() -> list[int]:
        clients = [aioredis.Redis.from_url(server_url) for _ in range(20)]
        try:
            return await asyncio.gather(
                *(adjust_stock(Locks(c), inventory, "apple", -1) for c in clients)
            )
        finally:
            for client in clients:
                await client.aclose()

    assert sorted(asyncio.run(scenario())) == list(range(80, 100))
    assert inventory.quantity("apple") == 80


def test_the_old_recipe_checked_on_the_write_loses_an_update(server_url, tmp_path):
    """The issue's interleaving: A reads and stalls past its lease; B takes the lock,
    reads and writes slowly; A's write lands first and is accepted, B's overwrites
    it. Both sales are acknowledged, the stock is down by one."""
    inventory = CheckedOnWrite(str(tmp_path / "stock.db"))
    inventory.add_item("apple", 10)
    a_read, b_read, a_done = threading.Event(), threading.Event(), threading.Event()

    async def a(locks: Locks) -> int:
        loop = asyncio.get_running_loop()

        def stall(qty: int) -> None:
            a_read.set()
            stop_the_world(loop, until=b_read)  # its lease runs out; B reads

        try:
            return await adjust_stock(
                locks, inventory, "apple", -1, ttl=0.3, after_read=stall
            )
        finally:
            a_done.set()

    async def b(locks: Locks) -> int:
        await asyncio.to_thread(a_read.wait, 10)

        def slow(qty: int) -> None:
            b_read.set()
            a_done.wait(10)  # B is slow to write: A's write lands first

        return await adjust_stock(locks, inventory, "apple", -1, after_read=slow)

    first, second = Worker(server_url, a), Worker(server_url, b)
    assert first.outcome() == 9, "A's write was accepted: fence 1 > 0"
    assert second.outcome() == 9, "and so was B's: its fence is higher still"
    assert inventory.quantity("apple") == 9, "two sales acknowledged, one counted"


def test_the_claim_keeps_every_sale_when_a_holder_stalls_mid_transaction(
    server_url, tmp_path
):
    """The same interleaving with the claim before the read. A claims, reads 10 and
    stalls past its lease inside its transaction; B takes the lock and claims.

    With SQLite A is *not* refused: its claim's UPDATE took the database's write
    lock, so B's claim waits (busy timeout) until A's transaction commits, then
    raises the fence and reads A's result (9). The transactions run one after the
    other, in fence order, and both sales count. (On PostgreSQL the fence row's lock
    does the same.) The lease is what ran out, not the claim: A's commit is right."""
    inventory = Inventory(str(tmp_path / "stock.db"))
    inventory.add_item("apple", 10)
    a_read, b_holds = threading.Event(), threading.Event()
    b_times: dict[str, float] = {}

    async def a(locks: Locks) -> int:
        loop = asyncio.get_running_loop()

        def stall(qty: int) -> None:
            a_read.set()
            stop_the_world(loop, until=b_holds)  # the lease runs out, B takes it
            time.sleep(0.3)  # B's claim is waiting for this transaction meanwhile

        return await adjust_stock(
            locks, inventory, "apple", -1, ttl=0.3, after_read=stall
        )

    async def b(locks: Locks) -> int:
        await asyncio.to_thread(a_read.wait, 10)

        def holds() -> None:
            b_times["locked"] = time.monotonic()
            b_holds.set()

        def read(qty: int) -> None:
            b_times["read"] = time.monotonic()
            time.sleep(0.1)  # B writes slowly

        return await adjust_stock(
            locks, inventory, "apple", -1, after_lock=holds, after_read=read
        )

    first, second = Worker(server_url, a), Worker(server_url, b)
    assert first.outcome() == 9, "A's transaction committed: its claim came first"
    assert second.outcome() == 8, "B read A's result"
    assert inventory.quantity("apple") == 8, "every acknowledged sale is counted"
    assert b_times["read"] - b_times["locked"] >= 0.29, "B's claim waited for A's"


def test_a_holder_that_claims_after_a_newer_one_is_refused(server_url, tmp_path):
    """A takes the lock and stalls past its lease before its transaction; B takes the
    lock, claims, reads, writes. A then claims: refused before it reads anything."""
    inventory = Inventory(str(tmp_path / "stock.db"))
    inventory.add_item("apple", 10)
    a_holds, b_done = threading.Event(), threading.Event()

    async def a(locks: Locks) -> int:
        def stall() -> None:
            a_holds.set()
            stop_the_world(asyncio.get_running_loop(), until=b_done)

        return await adjust_stock(
            locks, inventory, "apple", -1, ttl=0.3, after_lock=stall
        )

    async def b(locks: Locks) -> int:
        await asyncio.to_thread(a_holds.wait, 10)
        try:
            return await adjust_stock(locks, inventory, "apple", -3)
        finally:
            b_done.set()

    first, second = Worker(server_url, a), Worker(server_url, b)
    assert second.outcome() == 7
    with pytest.raises(StaleFence) as refused:
        first.outcome()
    assert refused.value.fence < refused.value.highest
    assert inventory.quantity("apple") == 7, "B's sale counted, A's was refused"


def test_a_stale_reader_of_redis_data_is_refused_by_the_fenced_mark(server_url):
    """The issue's interleaving on a stock kept in Redis: A reads through ``fenced``
    and stalls past its lease; B takes the lock, reads through ``fenced`` (the mark
    moves to B's fence) and writes slowly; A's write is refused although B has not
    written yet, and B's is counted."""
    a_read, b_read, a_done = threading.Event(), threading.Event(), threading.Event()

    async def a(locks: Locks) -> int:
        await locks.client.set("{apple}:stock", 10)
        loop = asyncio.get_running_loop()

        def stall(qty: int) -> None:
            a_read.set()
            stop_the_world(loop, until=b_read)

        try:
            return await adjust_redis_stock(
                locks, "apple", -1, ttl=0.3, after_read=stall
            )
        finally:
            a_done.set()

    async def b(locks: Locks) -> int:
        await asyncio.to_thread(a_read.wait, 10)

        def slow(qty: int) -> None:
            b_read.set()
            a_done.wait(10)  # B writes after A tried to

        return await adjust_redis_stock(locks, "apple", -1, after_read=slow)

    first, second = Worker(server_url, a), Worker(server_url, b)
    with pytest.raises(StaleFence):
        first.outcome()
    assert second.outcome() == 9
    r = redis.Redis.from_url(server_url)
    try:
        assert r.get("{apple}:stock") == b"9", "B's sale counted, A's was refused"
    finally:
        r.close()


# -- payment_api.py -------------------------------------------------------------------


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
        workers = [aioredis.Redis.from_url(server_url) for _ in range(4)]
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


# -- fastapi_checkout.py --------------------------------------------------------------


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serves ``app`` with uvicorn on a free port, on a thread; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, (
            "uvicorn did not start"
        )
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_double_submitted_payment_is_charged_once_and_answered_409(server_url):
    charges: list[tuple[str, int]] = []
    answered = threading.Event()

    async def charge(order_id: str, amount_cents: int) -> None:
        charges.append((order_id, amount_cents))
        if order_id == "42":
            # The provider is slow: the other clicks arrive, and are answered, now.
            await asyncio.to_thread(answered.wait, 5)

    async def scenario(base: str) -> tuple[list[httpx.Response], ...]:
        async with httpx.AsyncClient(base_url=base, timeout=20) as http:

            async def pay(order: str, cents: int) -> httpx.Response:
                return await http.post(
                    f"/orders/{order}/pay", json={"amount_cents": cents}
                )

            clicks = [asyncio.create_task(pay("42", 1999)) for _ in range(5)]
            first_four: list[httpx.Response] = []
            start = time.monotonic()
            for done in asyncio.as_completed(clicks):
                first_four.append(await done)
                if len(first_four) == 4:
                    break
            # wait=0: they were answered at once, not after waiting for the lock.
            assert time.monotonic() - start < 1.0
            # Meanwhile another order is paid: its lock is another one.
            other = await pay("43", 500)
            answered.set()
            every_click = await asyncio.gather(*clicks)
            retry = await pay("42", 1999)
        return first_four, every_click, [other, retry]

    with serving(create_app(server_url, charge=charge)) as base:
        first_four, every_click, (other, retry) = asyncio.run(scenario(base))

    assert [r.status_code for r in first_four] == [409] * 4
    assert all(r.headers["retry-after"] == "1" for r in first_four)
    assert "being paid by another request" in first_four[0].json()["detail"]
    charged = [r.json() for r in every_click if r.status_code == 200]
    assert len(charged) == 1 and charged[0]["status"] == "charged"
    assert other.status_code == 200 and other.json()["status"] == "charged"
    assert retry.status_code == 200
    assert retry.json() == {**charged[0], "status": "already-paid"}
    assert sorted(charges) == [("42", 1999), ("43", 500)], "each order charged once"


def test_the_fastapi_app_serves_from_the_command_line(server_url, tmp_path):
    port = free_port()
    args = ("--url", server_url, "--port", str(port))
    app = run_script("fastapi_checkout.py", *args, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 20
        while True:
            assert app.poll() is None, app.communicate()[1]
            try:
                response = httpx.post(
                    f"http://127.0.0.1:{port}/orders/7/pay",
                    json={"amount_cents": 250},
                    timeout=10,
                )
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the app did not start"
                time.sleep(0.05)
    finally:
        app.terminate()
        out, _ = app.communicate(timeout=10)
    assert response.status_code == 200
    assert response.json()["status"] == "charged"
    assert "charging order 7: 2.50" in out


# -- fastapi_idempotent.py ------------------------------------------------------------


def test_a_hundred_orders_submitted_three_times_at_once_are_charged_once(server_url):
    async def scenario(base: str) -> list[list[httpx.Response]]:
        limits = httpx.Limits(max_connections=300)
        async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as http:

            async def submit(order: int) -> httpx.Response:
                return await http.post(
                    "/checkout",
                    json={"cart_id": f"cart-{order}", "amount_cents": 100 + order},
                    headers={"Idempotency-Key": f"key-{order}"},
                )

            answers = await asyncio.gather(
                *(submit(order) for order in range(100) for _ in range(3))
            )
        return [list(answers[i : i + 3]) for i in range(0, 300, 3)]

    with serving(create_idempotent_app(server_url)) as base:
        per_order = asyncio.run(scenario(base))

    client = redis.Redis.from_url(server_url)
    order_ids = set()
    for order, submits in enumerate(per_order):
        assert [r.status_code for r in submits] == [201] * 3, submits[0].text
        bodies = [r.json() for r in submits]
        assert bodies[0] == bodies[1] == bodies[2]
        assert bodies[0]["amount_cents"] == 100 + order
        replayed = sorted(r.headers.get("idempotent-replayed", "") for r in submits)
        assert replayed == ["", "true", "true"], "one ran, two were answered"
        _, _, captures = payment_keys(f"key-{order}")
        assert client.lrange(captures, 0, -1) == [
            f"{bodies[0]['fence']}:{100 + order}".encode()
        ], "charged once"
        order_ids.add(bodies[0]["order_id"])
    assert len(order_ids) == 100
    client.close()


def test_the_same_key_with_another_cart_or_no_key_is_refused(server_url):
    async def scenario(base: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=base, timeout=20) as http:
            cart = {"cart_id": "c-9", "amount_cents": 900}
            key = {"Idempotency-Key": "k-9"}
            first = await http.post("/checkout", json=cart, headers=key)
            changed = await http.post(
                "/checkout", json={**cart, "amount_cents": 1}, headers=key
            )
            unkeyed = await http.post("/checkout", json=cart)
            again = await http.post("/checkout", json=cart, headers=key)
        return [first, changed, unkeyed, again]

    with serving(create_idempotent_app(server_url)) as base:
        first, changed, unkeyed, again = asyncio.run(scenario(base))
    assert (first.status_code, changed.status_code, unkeyed.status_code) == (
        201,
        422,
        400,
    )
    assert again.status_code == 201 and again.json() == first.json()


def start_app(server_url: str, port: int, *args: str, cwd: Path) -> Any:
    """``fastapi_idempotent.py`` serving on ``port``, once it answers."""
    app = run_script(
        "fastapi_idempotent.py",
        *("--url", server_url, "--port", str(port), "--ttl", "1", *args),
        cwd=cwd,
    )
    deadline = time.monotonic() + 20
    while True:
        assert app.poll() is None, app.communicate()[1]
        try:
            httpx.get(f"http://127.0.0.1:{port}/docs", timeout=5)
            return app
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the app did not start"
            time.sleep(0.05)


def test_a_charge_killed_midway_is_charged_again_once_under_a_higher_fence(
    server_url, tmp_path
):
    cart = {"cart_id": "c-5", "amount_cents": 500}
    key = {"Idempotency-Key": "k-5"}
    first_port = free_port()
    first = start_app(server_url, first_port, "--charge-seconds", "60", cwd=tmp_path)
    submitted = threading.Thread(
        target=_post_quietly,
        args=(f"http://127.0.0.1:{first_port}/checkout", cart, key),
        daemon=True,
    )
    try:
        submitted.start()
        assert first.stdout is not None
        # uvicorn's access log shares stdout: the provider's line is the one.
        line = first.stdout.readline()
        while line and not line.startswith("charging "):
            line = first.stdout.readline()
        assert line.startswith("charging k-5 fence "), line
        crashed = int(line.split()[3].rstrip(":"))
        first.kill()  # SIGKILL, mid-charge: authorized, never captured
        first.wait()
        second_port = free_port()
        second = start_app(server_url, second_port, cwd=tmp_path)
    finally:
        first.kill()
        first.communicate()
    try:
        base = f"http://127.0.0.1:{second_port}"

        async def resubmit() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                return await asyncio.gather(
                    *(http.post("/checkout", json=cart, headers=key) for _ in range(3))
                )

        answers = asyncio.run(resubmit())
    finally:
        second.terminate()
        second.communicate(timeout=10)
    submitted.join(5)
    assert [r.status_code for r in answers] == [201] * 3
    body = answers[0].json()
    assert all(r.json() == body for r in answers)
    assert body["fence"] > crashed, "the retry runs under a higher fence"
    client = redis.Redis.from_url(server_url)
    mark, record, captures = payment_keys("k-5")
    assert client.lrange(captures, 0, -1) == [f"{body['fence']}:500".encode()]
    assert int(client.hget(record, "fence")) == body["fence"]

    async def late_capture() -> None:
        # The killed request, had it only stalled, finishing its charge now.
        stalled = aioredis.Redis.from_url(server_url)
        try:
            await fenced(stalled, mark, crashed, "RPUSH", captures, f"{crashed}:500")
        finally:
            await stalled.aclose()

    with pytest.raises(StaleFence):
        asyncio.run(late_capture())
    assert client.llen(captures) == 1
    client.close()


def _post_quietly(url: str, cart: dict[str, Any], headers: dict[str, str]) -> None:
    """A submit whose server is killed before it answers."""
    with contextlib.suppress(httpx.TransportError):
        httpx.post(url, json=cart, headers=headers, timeout=90)


# -- celery_report.py -----------------------------------------------------------------


def start_worker(name: str, env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    """``celery worker`` as a process of its own, logging to ``cwd/<name>.log``."""
    with open(cwd / f"{name}.log", "wb") as log:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "celery", "-A", "celery_report", "worker"),
                *("--pool", "prefork", "--concurrency", "2", "--loglevel", "warning"),
                *("--hostname", f"{name}@%h", "--without-gossip", "--without-mingle"),
            ],
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def test_a_report_queued_three_times_is_built_once_by_real_workers(
    server_url, tmp_path
):
    """Two Celery worker processes (prefork, two children each), with the broker and
    result backend on database 1 of the test server, get the same report three
    times at once: one builds it, two skip. A late copy finds the day done."""
    broker = server_url.rsplit("/", 1)[0] + "/1"
    env = {
        **os.environ,
        "CELERY_BROKER_URL": broker,
        "FENCELOCK_URL": server_url,
        "PYTHONPATH": str(EXAMPLES),
        "REPORT_WORK_SECONDS": "1",
    }
    workers = [start_worker(f"worker{n}", env, tmp_path) for n in (1, 2)]
    app = make_app(broker, server_url)
    try:
        deadline = time.monotonic() + 60
        while len(app.control.ping(timeout=0.5)) < 2:
            assert all(w.poll() is None for w in workers), "a worker exited"
            assert time.monotonic() < deadline, "the workers did not start"
        copies = [app.send_task(TASK, args=["2026-11-29"]) for _ in range(3)]
        results = [copy.get(timeout=30) for copy in copies]
        late = app.send_task(TASK, args=["2026-11-29"]).get(timeout=30)
        next_day = app.send_task(TASK, args=["2026-11-30"]).get(timeout=30)
    finally:
        app.close()
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    assert sorted(results) == ["built", "skipped", "skipped"]
    assert late == "already-built"
    assert next_day == "built"
    r = redis.Redis.from_url(server_url)
    try:
        assert r.llen("report:{2026-11-29}:builds") == 1, "built once"
    finally:
        r.close()


# -- leader.py ------------------------------------------------------------------------


class Output:
    """The lines a process prints, read as they come (a thread per process)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())

    def wait_for(self, text: str, timeout: float = 15) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            time.sleep(0.02)
        raise AssertionError(f"no {text!r} in {self.lines!r}")


def test_one_scheduler_runs_the_job_and_the_dashboard_follows_the_leader(
    server_url, tmp_path
):
    def scheduler(name: str) -> Output:
        args = ("scheduler", "--url", server_url, "--name", name, "--ttl", "2")
        return Output(run_script("leader.py", *args, "--every", "0.05", cwd=tmp_path))

    schedulers = {name: scheduler(name) for name in ("host-1", "host-2")}
    dashboard = Output(run_script("leader.py", "dashboard", "--url", server_url,
                                  cwd=tmp_path))  # fmt: skip
    r = redis.Redis.from_url(server_url, decode_responses=True)
    try:
        first_line = dashboard.wait_for("leader: host-")
        first = first_line.split()[1]
        second = next(name for name in schedulers if name != first)
        schedulers[first].wait_for("leading with fence")
        schedulers[second].wait_for("campaigning")

        def runs() -> list[str]:
            return r.lrange("scheduler:runs", 0, -1)

        deadline = time.monotonic() + 10
        while len(runs()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert {run.split()[0] for run in runs()} == {first}, "only the leader runs"

        # SIGTERM: the leader resigns, the other one leads at once.
        schedulers[first].process.terminate()
        assert schedulers[first].process.wait(10) == 0
        schedulers[first].wait_for("resigning")
        schedulers[second].wait_for("leading with fence")
        took_over = dashboard.wait_for(f"leader: {second}")
        first_fence = int(first_line.rstrip(")").split()[-1])
        assert int(took_over.rstrip(")").split()[-1]) > first_fence

        count = len(runs())
        deadline = time.monotonic() + 10
        while len(runs()) < count + 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        names = [run.split()[0] for run in runs()]
        assert names[count:] and set(names[count:]) == {second}
        # A leader after another, never both at once: the runs do not interleave.
        assert names == sorted(names, key=[first, second].index)

        # kill -9 of the second: nobody leads once its lease ran out.
        schedulers[second].process.kill()
        schedulers[second].process.wait(10)
        dashboard.wait_for("leader: nobody", timeout=10)
    finally:
        r.close()
        for output in (*schedulers.values(), dashboard):
            output.process.kill()
            output.process.wait()


# -- from the command line ------------------------------------------------------------


@pytest.mark.parametrize(
    "script, args, expected",
    [
        ("cron_once.py", ["--min-hold", "0", "--work", "0"], "ran here"),
        ("checkout.py", ["--order", "7"], "'charged'"),
        ("stock_update.py", ["--sku", "pear", "--delta", "-2"], "pear: 98 in stock"),
        ("stock_update.py", ["--redis", "--sku", "fig", "--delta", "-3"], "fig: 97"),
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
