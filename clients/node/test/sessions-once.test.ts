// Sessions, close(), the cron recipe (once with minHold), lockAll and deadlocks on a
// standalone server, with each client library.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Deadlock, Lease, LockLost, LockNotAcquired } from "../src/index.js";
import { startServer, type Server } from "./harness/index.js";
import { LIBRARIES, managersOn } from "./clients.js";
import { lockInfo, sleep, untilWaiters } from "./waits.js";

let server: Server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server.stop();
});

for (const library of LIBRARIES) {
  describe(`${library}`, () => {
    const { manager } = managersOn(library, () => server);

    test("a session keeps its leases with one keepalive; close() releases them all", async () => {
      const { locks } = await manager();
      const leases: Lease[] = [];
      for (let i = 0; i < 5; i++) leases.push(await locks.acquire(`session-${library}-${i}`, { ttl: 1_500 }));
      const session = leases[0]?.session;
      assert.ok(session !== undefined && leases.every((lease) => lease.session === session));
      await sleep(4_000); // past two leases
      for (const lease of leases) lease.ensureHeld();
      assert.equal(((await server.call("LOCK.HELD", session)) as unknown[]).length, 5);
      await locks.close();
      for (const lease of leases) {
        assert.equal(lease.lostReason, "closed");
        assert.ok(lease.signal.aborted);
        assert.equal(await server.call("EXISTS", lease.key), 0);
      }
    });

    test("close() during lock(): the work's signal aborts and lock() throws LockLost", async () => {
      const { locks } = await manager();
      await assert.rejects(
        locks.lock(`closing-${library}`, { ttl: 30_000 }, async (lease) => {
          await locks.close();
          assert.ok(lease.signal.aborted);
        }),
        (error: unknown) => error instanceof LockLost && error.reason === "closed",
      );
    });

    test("once on three processes runs the job once and keeps the lock for minHold", async () => {
      const processes = [await manager(), await manager(), await manager()];
      const name = `cron-${library}`;
      let runs = 0;
      const outcomes = await Promise.all(
        processes.map(({ locks }) =>
          locks.once(name, { ttl: 10_000, minHold: 30_000 }, async () => {
            runs++;
            return "done";
          }),
        ),
      );
      assert.equal(runs, 1);
      assert.deepEqual(outcomes.filter((outcome) => outcome === "done").length, 1);
      assert.equal(outcomes.filter((outcome) => outcome === undefined).length, 2);
      // Done at once, yet still held: a late process skips too.
      const pttl = Number(await server.call("PTTL", `lock:${name}`));
      assert.ok(pttl > 10_000, `pttl ${pttl}`);
      assert.equal(await processes[0]?.locks.once(name, { minHold: 30_000 }, () => runs++), undefined);
      assert.equal(runs, 1);
      await server.call("DEL", `lock:${name}`);
    });

    test("once without minHold releases at the end; an error releases and goes on", async () => {
      const { locks } = await manager();
      const name = `once-${library}`;
      assert.equal(await locks.once(name, {}, () => 7), 7);
      assert.equal(await server.call("EXISTS", `lock:${name}`), 0);
      await assert.rejects(locks.once(name, { minHold: 60_000 }, () => Promise.reject(new Error("job failed"))), /job failed/);
      assert.equal(await server.call("EXISTS", `lock:${name}`), 0);
    });

    test("lockAll takes every lock or none, fences in the order of the names", async () => {
      const { locks } = await manager();
      const other = (await manager()).locks;
      const names = [`all-${library}-b`, `all-${library}-a`, `all-${library}-c`];
      await locks.lockAll(names, { ttl: 30_000 }, async (held) => {
        assert.deepEqual(held.leases.map((lease) => lease.name), names);
        for (const [index, lease] of held.leases.entries()) {
          assert.equal(Number(lease.fence), (await lockInfo(server, lease.key)).fence);
          assert.equal(held.fences[index], lease.fence);
        }
        held.ensureHeld();
      });
      for (const name of names) assert.equal(await server.call("EXISTS", `lock:${name}`), 0);
      const busy = await other.acquire(names[1] ?? "", { ttl: 30_000 });
      await assert.rejects(locks.lockAll(names, { ttl: 30_000 }, () => undefined), LockNotAcquired);
      assert.equal(await server.call("EXISTS", `lock:${names[0]}`), 0);
      const waiting = locks.lockAll(names, { ttl: 30_000, wait: 30_000 }, (held) => held.fences);
      await untilWaiters(server, busy.key, 1);
      await other.release(busy);
      const fences = await waiting;
      assert.ok((fences[1] ?? 0n) > busy.fence);
    });

    test("value and lockDelay reach the server (VALUE, LOCKDELAY), also as the manager's default", async () => {
      const { locks } = await manager({ locks: { lockDelay: 60_000 } });
      const lease = await locks.acquire(`delay-${library}`, { ttl: 30_000, value: "worker-7" });
      const info = await lockInfo(server, lease.key);
      assert.equal(info.value, "worker-7");
      // The key lives for the lease plus the delay; the lease itself is the ttl.
      assert.ok(Number(info["ttl-ms"]) <= 30_000);
      assert.ok(Number(await server.call("PTTL", lease.key)) > 60_000);
      await locks.release(lease);
      const own = await locks.acquire(`delay-${library}`, { ttl: 30_000, lockDelay: 90_000 });
      assert.ok(Number(await server.call("PTTL", own.key)) > 90_000);
      await locks.release(own);
    });

    test("a wait that would close a cycle: Deadlock, nothing queued", async () => {
      const first = (await manager()).locks;
      const second = (await manager()).locks;
      const x = await first.acquire(`dl-${library}-x`, { ttl: 30_000 });
      const y = await second.acquire(`dl-${library}-y`, { ttl: 30_000 });
      const waiting = first.acquire(`dl-${library}-y`, { ttl: 30_000, wait: 30_000 });
      await untilWaiters(server, y.key, 1);
      await assert.rejects(second.acquire(`dl-${library}-x`, { ttl: 30_000, wait: 30_000 }), (error: unknown) => {
        assert.ok(error instanceof Deadlock);
        assert.equal(error.key, x.key);
        return true;
      });
      assert.equal(Number((await lockInfo(server, x.key)).waiters), 0);
      await second.release(y);
      await first.release(await waiting);
      await first.release(x);
    });
  });
}
