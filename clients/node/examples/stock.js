// A stock read-modify-write, fenced where the stock lives.
//
// Each worker takes the lock `stock:{<sku>}`, reads the quantity and writes the new
// one. The lock keeps workers apart while leases hold; the fence keeps the stock
// right when one does not: a worker frozen past its lease (a long GC pause, a VM
// migration, a laptop lid, `kill -STOP`) wakes up believing it still holds the lock,
// and must not write what it computed from a stale read.
//
// So the read and the write both go through `lease.fenced(mark, …)` (LOCK.FENCED):
// the mark `{<sku>}:mark` remembers the highest fence admitted, the read already
// raises it to this worker's fence, and a command from an older fence is refused
// (`StaleFence`) without running. Checking only the write would not do: a frozen
// worker that read 10 and a newer one that read 10 would both write 9. (The other
// check, `lease.guard(…)`, runs a command only while this token holds the lock.)
// The hash tag `{<sku>}` keeps the lock, the stock and the mark in one slot on a
// Redis Cluster.
//
//   REDIS_URL=redis://127.0.0.1:6379 node stock.js --workers 20
//   REDIS_URL=redis://127.0.0.1:7000 REDIS_CLUSTER=1 node stock.js --workers 20
//   node stock.js --workers 1 --stall 5000 --ttl 1000   # then kill -STOP it, wait, kill -CONT
//
// This example uses ioredis. With node-redis instead:
//   import { createClient, createCluster } from 'redis';
//   const client = cluster ? createCluster({ rootNodes: [{ url }] }) : createClient({ url });
//   await client.connect();   … client.set(…, { NX: true }) and client.close().

import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

import { LockLost, Locks, StaleFence } from 'fencelock';
import { Cluster, Redis } from 'ioredis';

/**
 * Adds `delta` to the stock of `sku` under its lock and returns the new quantity.
 * Throws `StaleFence` (nothing written) when a newer holder has read or written the
 * stock since this worker took the lock. `afterRead` is the place where a real
 * worker computes (a price, a reservation) — and where a test stalls one.
 *
 * @param {Locks} locks
 * @param {string} sku
 * @param {number} delta
 * @param {{ ttl?: number, wait?: number, afterRead?: (qty: number) => Promise<void> }} [options]
 * @returns {Promise<number>}
 */
export async function adjustStock(locks, sku, delta, options = {}) {
  const { ttl = 10_000, wait = 30_000, afterRead } = options;
  const stock = `{${sku}}:stock`;
  const mark = `{${sku}}:mark`;
  /** @type {number | undefined} */
  let written;
  try {
    return await locks.lock(`stock:{${sku}}`, { ttl, wait }, async (lease) => {
      const qty = Number((await lease.fenced(mark, 'GET', stock)) ?? 0);
      if (afterRead) await afterRead(qty);
      // Computed here, as a real update would be: not something one INCRBY could do.
      await lease.fenced(mark, 'SET', stock, String(qty + delta));
      written = qty + delta;
      return written;
    });
  } catch (err) {
    // The mark, not the lease, decides whether the sale counts: a write it admitted
    // came from the newest holder, and is right even if the lease ran out just after
    // (`lock` then throws `LockLost` on the way out). Calling it failed would invite
    // a second sale.
    if (err instanceof LockLost && written !== undefined) return written;
    throw err;
  }
}

async function main() {
  const { values: args } = parseArgs({
    options: {
      sku: { type: 'string', default: 'apple' },
      initial: { type: 'string', default: '100' }, // the stock, if there is none yet
      workers: { type: 'string', default: '20' }, // concurrent workers, one sale each
      delta: { type: 'string', default: '-1' },
      ttl: { type: 'string', default: '10000' }, // each lease, ms
      stall: { type: 'string', default: '0' }, // ms between the read and the write
    },
  });
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const client = process.env.REDIS_CLUSTER ? new Cluster([url]) : new Redis(url);
  const locks = new Locks(client);
  const { sku } = args;
  const stall = Number(args.stall);
  const afterRead = async (/** @type {number} */ qty) => {
    console.log(`read ${qty}`);
    if (stall > 0) await sleep(stall);
  };
  try {
    await client.set(`{${sku}}:stock`, args.initial, 'NX');
    const sales = Array.from({ length: Number(args.workers) }, () =>
      adjustStock(locks, sku, Number(args.delta), { ttl: Number(args.ttl), afterRead }),
    );
    const outcomes = await Promise.allSettled(sales);
    let refused = 0;
    for (const outcome of outcomes) {
      if (outcome.status === 'fulfilled') continue;
      // A worker whose lease ran out before it wrote: the mark refused its write,
      // nothing changed. It may try again (with a new lease and a fresh read).
      if (!(outcome.reason instanceof StaleFence)) throw outcome.reason;
      console.log(`refused: ${outcome.reason.name}: ${outcome.reason.message}`);
      refused += 1;
    }
    const sold = outcomes.length - refused;
    const left = await client.get(`{${sku}}:stock`);
    console.log(`${sku}: ${sold} sold, ${refused} refused, ${left} in stock`);
  } finally {
    await locks.close();
    await client.quit();
  }
}

// Run as a script (`node stock.js`), not when a test imports `adjustStock`.
if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await main();
