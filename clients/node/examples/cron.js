// A scheduled job that runs once per schedule slot, whichever of several processes
// (servers, containers, replicas of a deployment) fires it.
//
// Every process runs this same scheduler. At each slot boundary (every `--every` ms,
// aligned on the clock: 06:00, 06:01, …) each one calls `locks.once(...)` on the lock
// `report:<slot>`: the first to take it runs the job, the others find it held and skip.
// The recipe is *not* acquire → run → release: released at the end of a quick job, the
// lock would be free again when a process whose clock is a little behind, or whose
// timer fired late, calls `once` for the same slot, and the job would run twice.
// `minHold` keeps the lock at least that long after the job started, even after the
// job ended (and after this process exited): pick it above the worst clock skew and
// start delay. The slot is part of the lock's name, so the next slot never waits for
// this one's `minHold`.
//
//   REDIS_URL=redis://127.0.0.1:6379 node cron.js --every 60000
//   REDIS_URL=redis://127.0.0.1:7000 REDIS_CLUSTER=1 node cron.js   # Redis Cluster
//
// Each run is recorded in the list `report:runs` ("<slot> <host>:<pid>") so that the
// processes' work can be seen in one place.
//
// This example uses node-redis. With ioredis instead:
//   import { Redis, Cluster } from 'ioredis';
//   const client = cluster ? new Cluster([url]) : new Redis(url);
//   … client.rpush(RUNS, …) and client.quit() at the end.

import os from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

import { Locks } from 'fencelock';
import { createClient, createCluster } from 'redis';

const RUNS = 'report:runs';

const { values: args } = parseArgs({
  options: {
    every: { type: 'string', default: '60000' }, // the schedule's period, ms
    'min-hold': { type: 'string' }, // default: the period
    work: { type: 'string', default: '200' }, // how long the job takes, ms
    slots: { type: 'string' }, // stop after this many slots (default: run forever)
    late: { type: 'string', default: '0' }, // fire this many ms after each boundary: a
    // process whose clock is behind or whose timer fires late (try it: it skips)
  },
});
const every = Number(args.every);
const minHold = Number(args['min-hold'] ?? every);
const work = Number(args.work);
const slots = args.slots === undefined ? Infinity : Number(args.slots);
const late = Number(args.late);

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const cluster = Boolean(process.env.REDIS_CLUSTER);
const client = cluster ? createCluster({ rootNodes: [{ url }] }) : createClient({ url });
client.on('error', (err) => console.error('redis:', err.message));
await client.connect();

const locks = new Locks(client);
const me = `${os.hostname()}:${process.pid}`;

/**
 * The job itself: building a report, sending the newsletter, closing the books.
 *
 * @param {number} slot
 */
async function dailyReport(slot) {
  console.log(`slot ${slot}: building the report`);
  await sleep(work);
  await client.rPush(RUNS, `${slot} ${me}`);
  return me;
}

try {
  for (let fired = 0; fired < slots; fired += 1) {
    // The slot comes from the schedule, not from the clock when the timer fires: a
    // process that fires late still asks for the slot it was meant to run.
    const slot = Math.floor((Date.now() - late) / every) + 1;
    await sleep(slot * every + late - Date.now());
    // ttl: how long a process that crashed mid-job keeps the others out. The lease
    // is refreshed while the job runs, so the job may take longer than ttl.
    const ran = await locks.once(`report:${slot}`, { ttl: 30_000, minHold }, () =>
      dailyReport(slot),
    );
    console.log(ran === undefined ? `slot ${slot}: skipped` : `slot ${slot}: ran here`);
  }
} finally {
  await locks.close();
  await client.close();
}
