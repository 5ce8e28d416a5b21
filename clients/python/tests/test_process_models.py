"""The guide's process models run for real (clients/python/README.md, "Processes and
fork"), each with the lock manager used by the parent process before it forks:
``gunicorn --preload`` with sync workers serving a WSGI checkout (and with gevent
workers, which monkey-patch after the fork: each order submitted once), and a Celery
prefork worker (tests/process_checkout.py); ``multiprocessing`` with fork and
forkserver is in tests/test_forks.py. Each order, submitted twice at once, is
charged once, although a charge takes longer than the lock's ttl. And gevent: a
greenlet that computes past the ttl without yielding starves the refresher, and the
loss is reported (tests/gevent_holder.py). Written by hand, not generated from
tests/_async: process models and gevent are the sync side's."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast

import pytest
import redis
from servers import Server, free_port, wait_until

HERE = Path(__file__).resolve().parent
ORDERS = [str(n) for n in range(4)]


def installed(package: str) -> None:
    if importlib.util.find_spec(package) is None:
        pytest.skip(
            f"{package} is not installed here (scripts/compat-requirements.txt pins"
            " it in target/venv; the redis-py 5 virtualenv has the client's own needs"
            " only)"
        )


def environment(server: Server, **extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "FENCELOCK_URL": server.url, "PYTHONPATH": path, **extra}


@contextlib.contextmanager
def running(command: list[str], env: dict[str, str], log: Path) -> Iterator[None]:
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command, env=env, cwd=HERE, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield
        assert process.poll() is None, log.read_text()
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def charged_once(r: redis.Redis) -> None:
    assert r.get("started") == b"1", "the start-up step ran once, in the parent"
    charges = [
        cast(bytes, entry).decode().split() for entry in r.lrange("charges", 0, -1)
    ]
    assert sorted(order for order, _, _ in charges) == ORDERS, charges


@pytest.mark.parametrize("worker_class", ["sync", "gevent"])
def test_gunicorn_preload_charges_each_order_once(
    server: Server, r: redis.Redis, tmp_path: Path, worker_class: str
) -> None:
    installed("gunicorn")
    # gevent: the worker monkey-patches after the fork, the manager was used before
    # it; each order is submitted once (the race of duplicates is the sync case's).
    submitted = ORDERS + ORDERS
    if worker_class == "gevent":
        installed("gevent")
        submitted = ORDERS
    port = free_port()
    command = [
        *(sys.executable, "-m", "gunicorn", "--preload", "--workers", "3"),
        *("--worker-class", worker_class, "--bind", f"127.0.0.1:{port}"),
        *("--graceful-timeout", "1", "process_checkout:app"),
    ]
    base = f"http://127.0.0.1:{port}/checkout?order="

    def up() -> bool:
        try:
            with urllib.request.urlopen(base + "none", timeout=5):
                return True
        except OSError:
            return False

    def submit(order: str) -> str:
        with urllib.request.urlopen(base + order, timeout=30) as response:
            return str(response.read().decode())

    with running(command, environment(server), tmp_path / "gunicorn.log"):
        wait_until(up, timeout=30, message="gunicorn serving")
        r.delete("charged", "charges")
        with ThreadPoolExecutor(len(submitted)) as pool:
            answers = list(pool.map(submit, submitted))
    repeated = len(submitted) - len(ORDERS)
    assert sorted(answers) == ["already-charged"] * repeated + ["charged"] * 4, answers
    charged_once(r)


def test_a_celery_prefork_worker_charges_each_order_once(
    server: Server, r: redis.Redis, tmp_path: Path
) -> None:
    installed("celery")
    from celery import Celery

    env = environment(server, PROCESS_CHECKOUT_CELERY="1")
    command = [
        *(sys.executable, "-m", "celery", "-A", "process_checkout:celery", "worker"),
        *("--pool", "prefork", "--concurrency", "3", "--loglevel", "warning"),
        *("--without-gossip", "--without-mingle", "--without-heartbeat"),
    ]
    broker = server.url.rsplit("/", 1)[0] + "/1"
    celery = Celery("client", broker=broker, backend=broker)
    try:
        with running(command, env, tmp_path / "celery.log"):
            deadline = time.monotonic() + 60
            while not celery.control.ping(timeout=0.5):
                assert time.monotonic() < deadline, "the worker did not start"
            results = [celery.send_task("charge", args=[o]) for o in ORDERS + ORDERS]
            answers = [result.get(timeout=30) for result in results]
    finally:
        celery.close()
    assert sorted(answers) == ["already-charged"] * 4 + ["charged"] * 4, answers
    charged_once(r)


def test_gevent_a_greenlet_that_starves_the_refresher_reports_the_loss(
    server: Server, r: redis.Redis
) -> None:
    installed("gevent")
    script = str(HERE / "gevent_holder.py")

    def outcome(ttl: str, seconds: str) -> str:
        done = subprocess.run(
            [sys.executable, script, server.url, ttl, seconds],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert outcome("0.3", "1.0") in ("lost deadline", "lost not-held")
    assert outcome("5", "0.1") == "held"
