// An Express endpoint that pays an order once.
//
// A double click, a client's retry or a second tab send `POST /orders/<id>/pay` again
// while the first request is still charging the card — often to another instance of
// the app behind the load balancer. The handler takes the lock `checkout:{<id>}`,
// waiting only briefly (`wait`): the request that gets it charges and records the
// order paid; one that finds it held answers `409 Conflict` ("already being
// processed", with `Retry-After`) instead of charging again; one that comes after the
// payment finds the order paid and answers `200` with `already-paid`.
//
// Each acquire gets a random token from the package, never one made from the order:
// with the order id (or an idempotency key) as the token, two submissions would be
// the same holder to the server, and both would charge. (Sending LOCK.ACQUIRE
// yourself, keep that rule: a random TOKEN per acquire.)
//
// The payment is recorded through `lease.guard(…)` (LOCK.GUARD): the write happens
// only if this request still holds the lock, checked in the same step on the server.
// A request whose lease ran out mid-charge records nothing and answers 500; the
// payment provider's idempotency key (the order id) is the last line of defence there.
// The hash tag `{<id>}` keeps the lock and the order in one slot on Redis Cluster.
//
//   REDIS_URL=redis://127.0.0.1:6379 PORT=3000 node checkout.js
//   curl -X POST localhost:3000/orders/42/pay -H 'content-type: application/json' \
//        -d '{"amountCents": 1999}'
//
// This example uses ioredis. With node-redis instead:
//   import { createClient } from 'redis';
//   const client = createClient({ url }); await client.connect();
//   … client.hGetAll(order) in place of client.hgetall(order), client.close().

import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';

import express from 'express';
import { LockNotAcquired, Locks } from 'fencelock';
import { Cluster, Redis } from 'ioredis';

/**
 * Stands for the payment provider's API. A real one takes an idempotency key (the
 * order id) as well.
 *
 * @param {string} orderId
 * @param {number} amountCents
 */
export async function chargeCard(orderId, amountCents) {
  console.log(`charging order ${orderId}: ${(amountCents / 100).toFixed(2)}`);
  await sleep(200);
}

/**
 * The app, with one Redis client and one lock manager for all its requests.
 *
 * @param {Redis | Cluster} client
 * @param {(orderId: string, amountCents: number) => Promise<void>} [charge]
 */
export function createApp(client, charge = chargeCard) {
  const locks = new Locks(client);
  const app = express();
  app.use(express.json());

  app.post('/orders/:id/pay', async (req, res) => {
    const id = req.params.id;
    const amountCents = Number(req.body?.amountCents);
    if (!Number.isSafeInteger(amountCents) || amountCents <= 0) {
      res.status(400).json({ error: 'amountCents must be a positive integer' });
      return;
    }
    const order = `order:{${id}}`;
    try {
      // ttl: the lease, refreshed while the handler runs; wait: how long a second
      // submission queues before it is told the order is being processed.
      // session: false makes each request an owner of its own. In the manager's
      // session the server would count all requests of this process as one owner:
      // with two instances, each holding one order while a request of each waits for
      // an order the other holds, that owner would seem to wait for itself, and the
      // wait would be refused with `Deadlock` although no request waits for itself.
      const options = { ttl: 30_000, wait: 100, session: false };
      const answer = await locks.lock(`checkout:{${id}}`, options, async (lease) => {
        const recorded = await client.hgetall(order);
        if (recorded.status === 'paid') {
          const { amountCents: paid, fence } = recorded;
          return { status: 'already-paid', amountCents: Number(paid), fence };
        }
        await charge(id, amountCents);
        // The fence grows with every grant of this lock: kept with the order, it says
        // which holder paid it.
        const fence = lease.fence.toString();
        await lease.guard('HSET', order, 'status', 'paid', 'amountCents', String(amountCents),
          'fence', fence);
        return { status: 'charged', amountCents, fence };
      });
      res.json({ orderId: id, ...answer });
    } catch (err) {
      if (!(err instanceof LockNotAcquired)) throw err; // Express 5 answers 500
      res.status(409).set('Retry-After', '1').json({
        orderId: id,
        status: 'in-progress',
        error: `order ${id} is already being processed`,
      });
    }
  });

  return { app, locks };
}

async function main() {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const client = process.env.REDIS_CLUSTER ? new Cluster([url]) : new Redis(url);
  const { app, locks } = createApp(client);
  const server = app.listen(Number(process.env.PORT ?? 3000), '127.0.0.1', () => {
    const address = server.address();
    console.log(`listening on ${typeof address === 'object' && address ? address.port : address}`);
  });
  // Stop cleanly on SIGTERM/SIGINT: no new requests, locks released, client closed.
  const stop = () => {
    server.close(async () => {
      await locks.close();
      await client.quit();
    });
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await main();
