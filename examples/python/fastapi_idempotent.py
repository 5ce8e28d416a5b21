"""A FastAPI checkout that honours the ``Idempotency-Key`` header: every submit of
one key gets the first submit's answer, and the card is charged once.

A double click, a client that lost the reply or a retried webhook sends ``POST
/checkout`` again with the same ``Idempotency-Key``. The handler claims the run of
``checkout:{<key>}`` with ``Locks.once_result``: the first request charges and its
answer (status and body) is stored for ``KEEP`` seconds; a duplicate that arrives
while it charges waits for that answer, one that comes later gets it at once, both
with ``Idempotent-Replayed: true``. The same key with another cart is refused
``422`` (the fingerprint differs); a request without the header ``400``, as the IETF
Idempotency-Key draft says.

If the process charging dies mid-charge, its lease runs out and the next submit of
the key charges, under a higher fence. The payment record checks that fence on every
write (``fenced``, ``LOCK.FENCED`` on the mark ``payment-mark:{<key>}``): the dead
request's late writes, should its process only have stalled, are refused. The hash
tag keeps the run, the mark and the record in one slot on Redis Cluster.

    python fastapi_idempotent.py --url redis://127.0.0.1:6379/0 --port 8000
    curl -X POST 127.0.0.1:8000/checkout -H 'Idempotency-Key: 8e03978e' \\
        -H 'content-type: application/json' -d '{"cart_id": "c-1", "amount_cents": 1999}'

Several worker processes (each makes its own app and manager):

    FENCELOCK_URL=redis://127.0.0.1:6379/0 uvicorn --factory \\
        fastapi_idempotent:app_from_environment --workers 4 --port 8000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import redis.asyncio as redis
import uvicorn
from fastapi import FastAPI, Header, HTTPException, Request
from fastapi.responses import JSONResponse
from fencelock.asyncio import FingerprintMismatch, LockNotAcquired, Locks, fenced
from pydantic import BaseModel

# How long an answer is replayed (Stripe keeps its idempotency keys 24 hours).
KEEP = 24 * 3600
# How long a duplicate waits for the first request's answer before a 409.
WAIT = 30.0

# Connections to Redis the app may open: a waiting duplicate holds one.
POOL_SIZE = 128

# The payment provider's call: Redis client, idempotency key, fence, amount in cents.
Charge = Callable[[Any, str, int, int], Awaitable[None]]


class Cart(BaseModel):
    cart_id: str
    amount_cents: int


def payment_keys(key: str) -> tuple[str, str, str]:
    """The mark, the payment record and its captures of one idempotency key."""
    return f"payment-mark:{{{key}}}", f"payment:{{{key}}}", f"captures:{{{key}}}"


def provider(seconds: float) -> Charge:
    """A payment provider that keeps its records in Redis: it authorizes, takes
    ``seconds``, then captures. Each write passes the fence check of the key's mark,
    so a request given up (a higher fence has written) can no longer charge."""

    async def charge(client: Any, key: str, fence: int, amount_cents: int) -> None:
        mark, record, captures = payment_keys(key)
        await fenced(
            client, mark, fence, "HSET", record, "status", "authorized", "fence", fence
        )
        print(f"charging {key} fence {fence}: {amount_cents / 100:.2f}", flush=True)
        await asyncio.sleep(seconds)
        await fenced(client, mark, fence, "RPUSH", captures, f"{fence}:{amount_cents}")

    return charge


def create_app(url: str, charge: Charge | None = None, *, ttl: float = 10.0) -> FastAPI:
    """The app, with one Redis client and one lock manager for all its requests;
    ``ttl``: how soon after a crash the next submit of its key may charge."""
    pay = provider(0.2) if charge is None else charge

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # A pool that waits for a connection rather than failing: duplicates wait for
        # their answer on pooled connections, never on its last one (the guide's
        # "Bounded pools"), so a burst of submits queues instead of erroring.
        pool = redis.BlockingConnectionPool.from_url(
            url, max_connections=POOL_SIZE, timeout=WAIT
        )
        client = redis.Redis(connection_pool=pool)
        app.state.locks = Locks(client)
        try:
            yield
        finally:
            await app.state.locks.aclose()
            await client.aclose()

    app = FastAPI(title="checkout", lifespan=lifespan)

    @app.post(
        "/checkout",
        status_code=201,
        responses={
            400: {"description": "No Idempotency-Key header"},
            409: {"description": "The first request is still running (after WAIT)"},
            422: {"description": "The key was used with another cart"},
        },
    )
    async def checkout(
        cart: Cart,
        request: Request,
        idempotency_key: str | None = Header(default=None),
    ) -> JSONResponse:
        if not idempotency_key:
            raise HTTPException(400, "an Idempotency-Key header is required")
        locks: Locks = request.app.state.locks
        try:
            async with locks.once_result(
                f"checkout:{{{idempotency_key}}}",
                ttl,
                keep=KEEP,
                wait=WAIT,
                fingerprint=cart.model_dump(),
            ) as once:
                if not once.replayed:
                    await pay(
                        locks.client, idempotency_key, once.fence, cart.amount_cents
                    )
                    order = {
                        "order_id": "ord_" + secrets.token_hex(8),
                        "status": "paid",
                        "amount_cents": cart.amount_cents,
                        "fence": once.fence,
                    }
                    once.set({"status": 201, "body": order})
        except FingerprintMismatch:
            raise HTTPException(
                422, "this Idempotency-Key was used with another request"
            ) from None
        except LockNotAcquired:
            raise HTTPException(
                409,
                "a request with this Idempotency-Key is still being processed",
                headers={"Retry-After": "1"},
            ) from None
        answer = once.result
        headers = {"Idempotent-Replayed": "true"} if once.replayed else None
        return JSONResponse(answer["body"], answer["status"], headers=headers)

    return app


def app_from_environment() -> FastAPI:
    """The app for a server that starts several worker processes (uvicorn
    ``--workers``, gunicorn): each worker makes its own, for the URL in
    ``FENCELOCK_URL``."""
    url = os.environ.get("FENCELOCK_URL", "redis://127.0.0.1:6379/0")
    return create_app(url, provider(0.2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--ttl", type=float, default=10.0, help="the run's lease")
    parser.add_argument(
        "--charge-seconds", type=float, default=0.2, help="the provider's latency"
    )
    args = parser.parse_args()
    app = create_app(args.url, provider(args.charge_seconds), ttl=args.ttl)
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
