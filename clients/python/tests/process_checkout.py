"""A checkout as pre-fork servers run it, for tests/test_process_models.py: one
module-level client and lock manager, used once by the parent process at start-up
(a migration step under a lock) before the server forks its workers, then in every
worker. A charge takes longer than the lock's ttl, so only the worker's refresher
keeps the lock through it: each order must be charged once, however many times it
is submitted at once.

- ``app``: a WSGI app for ``gunicorn --preload`` (``/checkout?order=<n>``).
- ``celery``: a Celery app whose prefork worker runs ``charge(order)``; the start-up
  step runs in the worker's main process (``worker_init``) before the pool forks.

``FENCELOCK_URL`` is the server with the module; Celery's broker and results are on
its database 1."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any, Callable
from urllib.parse import parse_qs

import redis

import fencelock

TTL = 0.5
CHARGE = 0.8  # longer than the ttl
URL = os.environ.get("FENCELOCK_URL", "redis://127.0.0.1:6379/0")

client = redis.Redis.from_url(URL)
locks = fencelock.Locks(client)


def start_up() -> None:
    """What the parent process does once before it forks: a step under a lock."""
    with locks.lock("migrations", ttl=TTL):
        client.incr("started")


def charge(order: str) -> str:
    """Charges ``order`` once: "charged", or "already-charged"."""
    with locks.lock(f"order:{order}", ttl=TTL, wait=None) as lease:
        if client.sismember("charged", order):
            return "already-charged"
        time.sleep(CHARGE)  # the payment provider's call
        lease.ensure_held()
        client.rpush("charges", f"{order} {os.getpid()} {lease.fence}")
        client.sadd("charged", order)
        return "charged"


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    order = parse_qs(environ.get("QUERY_STRING", "")).get("order", [""])[0]
    try:
        body, status = charge(order), "200 OK"
    except fencelock.LockLost as lost:
        body, status = f"lost: {lost}", "500 Internal Server Error"
    start_response(status, [("Content-Type", "text/plain")])
    return [body.encode()]


def make_celery() -> Any:
    from celery import Celery, signals

    broker = URL.rsplit("/", 1)[0] + "/1"
    celery = Celery("process_checkout", broker=broker, backend=broker)
    celery.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        worker_prefetch_multiplier=1,
    )
    celery.task(name="charge")(charge)
    signals.worker_init.connect(lambda **_: start_up(), weak=False)
    return celery


if os.environ.get("PROCESS_CHECKOUT_CELERY"):
    celery = make_celery()
else:
    start_up()  # gunicorn --preload imports this in its master, before the fork
