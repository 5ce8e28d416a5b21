"""A FastAPI endpoint that pays an order once.

A double click, a client's retry or a second tab send ``POST /orders/{id}/pay`` again
while the first request is still charging the card. The handler takes
``lock:checkout:{<id>}`` without waiting (``wait=0``): the request that gets it charges
and records the order paid; one that finds it held answers ``409 Conflict`` (with
``Retry-After``) instead of charging again, and one that comes after the payment
finished finds the order paid and answers 200 ``already-paid``. The hash tag keeps the
lock and the order (``order:{<id>}``) in one slot on Redis Cluster.

    python fastapi_checkout.py --url redis://127.0.0.1:6379/0 --port 8000
    curl -X POST 127.0.0.1:8000/orders/42/pay -H 'content-type: application/json' \\
        -d '{"amount_cents": 1999}'
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal

import redis.asyncio as redis
import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fencelock.asyncio import LockNotAcquired, Locks
from pydantic import BaseModel

# The payment provider's call: order id, amount in cents.
Charge = Callable[[str, int], Awaitable[None]]


class Payment(BaseModel):
    amount_cents: int


class Paid(BaseModel):
    order_id: str
    status: Literal["charged", "already-paid"]
    amount_cents: int
    # The fence of the request that charged: grows with every grant of the lock.
    fence: int


async def charge_card(order_id: str, amount_cents: int) -> None:
    # A real provider takes an idempotency key (the order id): the last line of
    # defence if a lease is lost mid-charge and a second request charges too.
    print(f"charging order {order_id}: {amount_cents / 100:.2f}", flush=True)
    await asyncio.sleep(0.2)


def create_app(url: str, charge: Charge = charge_card) -> FastAPI:
    """The app, with one Redis client and one lock manager for all its requests."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = redis.Redis.from_url(url)
        app.state.locks = Locks(client)
        try:
            yield
        finally:
            await client.aclose()

    app = FastAPI(title="checkout", lifespan=lifespan)

    @app.post(
        "/orders/{order_id}/pay",
        responses={409: {"description": "Another request is paying this order now"}},
    )
    async def pay(order_id: str, payment: Payment, request: Request) -> Paid:
        locks: Locks = request.app.state.locks
        order = f"order:{{{order_id}}}"
        try:
            # lost_ok: once the card is charged the order is recorded paid and the
            # answer says so, even if the lease ran out meanwhile: the money moved.
            async with locks.lock(
                f"checkout:{{{order_id}}}", ttl=30, wait=0, lost_ok=True
            ) as lease:
                recorded = await locks.client.hgetall(order)
                if recorded.get(b"status") == b"paid":
                    return Paid(
                        order_id=order_id,
                        status="already-paid",
                        amount_cents=int(recorded[b"amount_cents"]),
                        fence=int(recorded[b"fence"]),
                    )
                await charge(order_id, payment.amount_cents)
                await locks.client.hset(
                    order,
                    mapping={
                        "status": "paid",
                        "amount_cents": payment.amount_cents,
                        "fence": lease.fence,
                    },
                )
                return Paid(
                    order_id=order_id,
                    status="charged",
                    amount_cents=payment.amount_cents,
                    fence=lease.fence,
                )
        except LockNotAcquired:
            raise HTTPException(
                status_code=409,
                detail=f"order {order_id} is being paid by another request",
                headers={"Retry-After": "1"},
            ) from None

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(create_app(args.url), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
