// The lock manager on a standalone server, with each client library: lock, acquire and
// release, waiting in the queue, errors, guard and fenced.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { LockLost, LockNotAcquired, Locks, ModuleNotLoaded, NotHeld, StaleFence } from "../src/index.js";
import { startServer, type Server } from "./harness/index.js";
import { LIBRARIES, standalone, type Made } from "./clients.js";
import { sleep, untilWaiters } from "./waits.js";

let server: Server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server.stop();
});

for (const library of LIBRARIES) {
  describe(`${library}, standalone`, () => {
    const made: Made[] = [];
    const managers: Locks[] = [];
    async function manager(options = {}): Promise<Locks> {
      const client = await standalone(library, server);
      made.push(client);
      const locks = new Locks(client.client, options);
      managers.push(locks);
      return locks;
    }
    after(async () => {
      for (const locks of managers) await locks.close();
      for (const client of made) await client.close();
    });

    test("lock runs the work holding the lock and releases it after", async () => {
      const locks = await manager();
      const result = await locks.lock(`basic-${library}`, { ttl: 10_000 }, async (lease) => {
        assert.equal(lease.key, `lock:basic-${library}`);
        assert.equal(typeof lease.fence, "bigint");
        const info = (await server.call("LOCK.INFO", lease.key)) as unknown[];
        assert.equal(info[1], 1);
        lease.ensureHeld();
        return 42;
      });
      assert.equal(result, 42);
      assert.equal(await server.call("EXISTS", `lock:basic-${library}`), 0);
    });

    test("a busy lock: LockNotAcquired at once, or the lock after waiting in the queue", async () => {
      const [first, second] = [await manager(), await manager()];
      const name = `busy-${library}`;
      const held = await first.acquire(name, { ttl: 30_000 });
      await assert.rejects(second.acquire(name, { ttl: 30_000 }), LockNotAcquired);
      const waiting = second.acquire(name, { ttl: 30_000, wait: 60_000 });
      await untilWaiters(server, held.key, 1);
      assert.equal(await first.release(held), true);
      const next = await waiting;
      assert.ok(next.fence > held.fence);
      assert.equal(await second.release(next), true);
    });

    test("the lease is refreshed while held: held past its ttl", async () => {
      const locks = await manager({ session: false });
      const lease = await locks.acquire(`refresh-${library}`, { ttl: 1_000 });
      await sleep(3_000);
      lease.ensureHeld();
      assert.ok(Number(await server.call("PTTL", lease.key)) > 0);
      assert.equal(await locks.release(lease), true);
    });

    test("a lock deleted under its holder: signal aborts, lock() throws LockLost", async () => {
      const locks = await manager({ session: false });
      const name = `lost-${library}`;
      await assert.rejects(
        locks.lock(name, { ttl: 900 }, async (lease) => {
          await server.call("DEL", lease.key);
          await new Promise((done) => lease.signal.addEventListener("abort", done, { once: true }));
          assert.ok(lease.signal.reason instanceof LockLost);
          assert.equal(lease.lostReason, "gone");
        }),
        (error: unknown) => error instanceof LockLost && error.reason === "gone" && !error.message.includes("TOKEN"),
      );
    });

    test("guard runs a command only while held; NotHeld (a LockLost) after", async () => {
      const locks = await manager();
      await locks.lock(`guard-${library}`, { ttl: 30_000 }, async (lease) => {
        assert.equal(await lease.guard("SET", `stock-${library}`, "10"), "OK");
        assert.equal(Number(await lease.guard(["DECRBY", `stock-${library}`, "3"])), 7);
      });
      const lease = await locks.acquire(`guard-${library}`, { ttl: 30_000 });
      await server.call("DEL", lease.key);
      await assert.rejects(lease.guard("SET", `stock-${library}`, "0"), (error: unknown) => {
        assert.ok(error instanceof NotHeld);
        assert.ok(error instanceof LockLost);
        assert.ok(!error.message.includes(lease.token));
        return true;
      });
      assert.equal(lease.lost, true);
      assert.equal(await server.call("GET", `stock-${library}`), "7");
      await locks.release(lease);
    });

    test("fenced refuses an older fence with StaleFence", async () => {
      const locks = await manager();
      const name = `fenced-${library}`;
      const mark = `mark-${library}`;
      const old = await locks.acquire(name, { ttl: 30_000 });
      await locks.release(old);
      await locks.lock(name, { ttl: 30_000 }, async (lease) => {
        assert.equal(await lease.fenced(mark, "SET", `ledger-${library}`, "new"), "OK");
      });
      await assert.rejects(old.fenced(mark, "SET", `ledger-${library}`, "old"), (error: unknown) => {
        assert.ok(error instanceof StaleFence);
        assert.ok(error.highest > old.fence);
        return true;
      });
      assert.equal(await server.call("GET", `ledger-${library}`), "new");
    });
  });
}

test("a server without the module: ModuleNotLoaded", async () => {
  const bare = await startServer({ withoutModule: true });
  try {
    for (const library of LIBRARIES) {
      const client = await standalone(library, bare);
      try {
        const locks = new Locks(client.client);
        await assert.rejects(locks.acquire("x"), ModuleNotLoaded);
        await assert.rejects(locks.acquire("x", { wait: 1_000 }), ModuleNotLoaded);
        await locks.close();
      } finally {
        await client.close();
      }
    }
  } finally {
    await bare.stop();
  }
});

