// The lock manager on a 3-primary Redis Cluster with each client library: every LOCK.*
// command goes to the node that owns its key at once (no MOVED is ever answered), a
// session spread over all three primaries keeps every lock (a keepalive to each), and
// TRYAGAIN (a slot in migration) is asked again instead of reaching the application.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { keySlot, Locks } from "../src/index.js";
import { startCluster, type Cluster, type Server } from "./harness/index.js";
import { LIBRARIES, clustered, type Made } from "./clients.js";
import { lockInfo, sleep, until, untilWaiters } from "./waits.js";

let cluster: Cluster;
before(async () => {
  cluster = await startCluster();
});
after(async () => {
  await cluster.stop();
});

async function movedAnswered(): Promise<number> {
  let total = 0;
  for (const node of cluster.nodes) {
    const stats = String(await node.call("INFO", "errorstats"));
    const match = /errorstat_MOVED:count=(\d+)/.exec(stats);
    total += match?.[1] === undefined ? 0 : Number(match[1]);
  }
  return total;
}

/** Names whose keys (with the "lock:" prefix) fall `perNode` on each primary. */
function spread(prefix: string, perNode: number): string[] {
  const names: string[] = [];
  const counts = new Map<Server, number>();
  for (let i = 0; names.length < perNode * 3; i++) {
    const name = `${prefix}-${i}`;
    const node = cluster.nodeOf(`lock:${name}`);
    if ((counts.get(node) ?? 0) < perNode) {
      counts.set(node, (counts.get(node) ?? 0) + 1);
      names.push(name);
    }
  }
  return names;
}

for (const library of LIBRARIES) {
  describe(`${library}, cluster`, () => {
    const made: Made[] = [];
    const managers: Locks[] = [];
    async function manager(timeout?: number): Promise<Locks> {
      const client = await clustered(library, cluster, timeout === undefined ? {} : { timeout });
      made.push(client);
      const locks = new Locks(client.client);
      managers.push(locks);
      return locks;
    }
    after(async () => {
      for (const locks of managers) await locks.close().catch(() => undefined);
      for (const client of made) await client.close();
    });

    test("every LOCK.* command reaches the key's node at once", async () => {
      const locks = await manager();
      const other = await manager();
      const before = await movedAnswered();
      for (const name of spread(`route-${library}`, 4)) {
        await locks.lock(name, { ttl: 30_000 }, async (lease) => {
          assert.equal(await lease.guard("SET", `{${lease.key}}:data`, "1"), "OK");
          assert.equal((await lockInfo(cluster.nodeOf(lease.key), lease.key)).held, 1);
        });
        // A wait, on the manager's own connection to that node.
        const held = await other.acquire(name, { ttl: 30_000 });
        const waiting = locks.acquire(name, { ttl: 30_000, wait: 30_000 });
        await untilWaiters(cluster.nodeOf(held.key), held.key, 1);
        await other.release(held);
        await locks.release(await waiting);
      }
      assert.equal(await movedAnswered(), before);
    });

    test("a session of 12 locks over 3 primaries keeps all 12; close() ends them on each", async () => {
      const locks = await manager();
      const names = spread(`session-${library}`, 4);
      const leases = [];
      for (const name of names) leases.push(await locks.acquire(name, { ttl: 1_500 }));
      const session = leases[0]?.session ?? "";
      await sleep(4_500); // three leases long
      for (const lease of leases) lease.ensureHeld();
      for (const node of cluster.nodes) {
        assert.equal(((await node.call("LOCK.HELD", session)) as unknown[]).length, 4);
      }
      const held = await locks.held(); // every primary's, put together
      assert.deepEqual(held.map((holding) => holding.key).sort(), leases.map((lease) => lease.key).sort());
      assert.ok(held.every((holding) => holding.mode === "exclusive" && holding.pttl > 0));
      await locks.close();
      for (const lease of leases) {
        assert.equal(lease.lostReason, "closed");
        assert.equal(await cluster.nodeOf(lease.key).call("EXISTS", lease.key), 0);
      }
    });

    test("a client timeout shorter than the wait; an abandoned wait leaves nothing behind", async () => {
      const holder = await manager();
      const waiter = await manager(200);
      for (const name of spread(`timeouts-${library}`, 1)) {
        const held = await holder.acquire(name, { ttl: 30_000 });
        const node = cluster.nodeOf(held.key);
        const waiting = waiter.acquire(name, { ttl: 30_000, wait: 20_000 });
        await untilWaiters(node, held.key, 1);
        await sleep(600); // three client timeouts
        await holder.release(held);
        const lease = await waiting;
        assert.equal((await lockInfo(node, lease.key)).fence, Number(lease.fence));
        // Abandoned: nothing queued, and the release grants nobody.
        const controller = new AbortController();
        const abandoned = holder.acquire(name, { ttl: 30_000, wait: 60_000, signal: controller.signal });
        await untilWaiters(node, held.key, 1);
        controller.abort();
        await assert.rejects(abandoned, (error: unknown) => error instanceof Error && error.name === "AbortError");
        await untilWaiters(node, held.key, 0);
        assert.equal(await waiter.release(lease), true);
        assert.equal(await node.call("EXISTS", held.key), 0);
      }
    });

    test("once on three processes runs the job once", async () => {
      const processes = [await manager(), await manager(), await manager()];
      let runs = 0;
      const name = `cron-${library}`;
      const outcomes = await Promise.all(
        processes.map((locks) => locks.once(name, { minHold: 30_000 }, () => ++runs)),
      );
      assert.equal(runs, 1);
      assert.equal(outcomes.filter((outcome) => outcome === undefined).length, 2);
      assert.ok(Number(await cluster.nodeOf(`lock:${name}`).call("PTTL", `lock:${name}`)) > 0);
    });

    test("lockAll on one slot (hash tags); a slot in migration answers TRYAGAIN, asked again", async () => {
      const locks = await manager();
      const other = await manager();
      const tag = `{mig-${library}}`;
      const names = [`${tag}a`, `${tag}b`];
      const fences = await locks.lockAll(names, { ttl: 30_000 }, (held) => held.fences);
      assert.equal(fences.length, 2);
      // One key held (so it exists on the source), the other not: TRYAGAIN while the
      // slot is migrating.
      const held = await other.acquire(names[0] ?? "", { ttl: 30_000 });
      const source = cluster.nodeOf(held.key);
      const target = cluster.nodes.find((node) => node !== source) ?? source;
      const slot = keySlot(held.key);
      const idOf = async (node: Server): Promise<string> => String(await node.call("CLUSTER", "MYID"));
      await target.call("CLUSTER", "SETSLOT", slot, "IMPORTING", await idOf(source));
      await source.call("CLUSTER", "SETSLOT", slot, "MIGRATING", await idOf(target));
      const tries = async (): Promise<number> => {
        const stats = String(await source.call("INFO", "errorstats"));
        return Number(/errorstat_TRYAGAIN:count=(\d+)/.exec(stats)?.[1] ?? 0);
      };
      const before = await tries();
      const waiting = locks.lockAll(names, { ttl: 30_000, wait: 30_000 }, (all) => all.fences);
      await until("TRYAGAIN answered", async () => (await tries()) > before);
      await source.call("CLUSTER", "SETSLOT", slot, "STABLE");
      await target.call("CLUSTER", "SETSLOT", slot, "STABLE");
      await other.release(held);
      const granted = await waiting;
      assert.ok((granted[0] ?? 0n) > held.fence);
    });
  });
}
