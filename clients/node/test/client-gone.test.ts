// What the package does after a grant does not depend on the application's client:
// node-redis 6 closes an idle client for good when its `socketTimeout` passes, and an
// application may close its client while a lease is held; the grant is still used and
// released. After a loss, `lock()` settles when the work does, not when a stalled
// server answers again; `lease.lost` reads true right after the process was frozen past
// the deadline. Standalone, with each client library.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { LockLost, ServerUnavailable } from "../src/index.js";
import { startServer, type Server } from "./harness/index.js";
import { LIBRARIES, managerOn, managersOn, type Manager } from "./clients.js";
import { sleep, until, untilWaiters } from "./waits.js";

let server: Server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server.stop();
});

/** Whether a client of either library is still open. */
function isOpen(client: unknown): boolean {
  const candidate = client as { isOpen?: boolean; status?: string };
  if (candidate.isOpen !== undefined) return candidate.isOpen;
  return candidate.status === "ready";
}

describe("node-redis, socketTimeout without pings", () => {
  const managers: Manager[] = [];
  after(async () => {
    for (const made of managers.splice(0)) await made.close();
  });

  test("the client closed by its idle socketTimeout during the wait: the work runs and the lock is released", async () => {
    const holder = await managerOn("node-redis", server);
    const waiter = await managerOn("node-redis", server, { timeout: 1_000, noPings: true });
    managers.push(holder, waiter);
    const name = "idle-timeout";
    const held = await holder.locks.acquire(name, { ttl: 60_000 });
    const locking = waiter.locks.lock(name, { ttl: 30_000, wait: 30_000 }, (lease) => lease.fence);
    await untilWaiters(server, held.key, 1);
    await until("the idle client closed", () => Promise.resolve(!isOpen(waiter.made.client)));
    await holder.locks.release(held);
    const fence = await locking;
    assert.ok(fence > held.fence);
    assert.equal(await server.call("EXISTS", held.key), 0);
  });
});

for (const library of LIBRARIES) {
  describe(`${library}`, () => {
    const { manager } = managersOn(library, () => server);

    test("the application's client closed while a lease is held: it is kept, released, and the session closed", async () => {
      const { locks, made } = await manager();
      const own = await locks.acquire(`closed-own-${library}`, { ttl: 1_500, session: false });
      const inSession = await locks.acquire(`closed-session-${library}`, { ttl: 1_500 });
      await made.close();
      await sleep(2_000); // past the ttl: kept alive on the package's connections
      assert.equal(own.lost, false);
      assert.equal(inSession.lost, false);
      assert.equal(await locks.release(own), true);
      assert.equal(await server.call("EXISTS", own.key), 0);
      await locks.close();
      assert.equal(await server.call("EXISTS", inSession.key), 0);
    });

    test("a lease lost while the server is stalled: lock() settles when the work does", async () => {
      const { locks } = await manager();
      const name = `stalled-${library}`;
      let resumed = false;
      let settledPaused: boolean | undefined;
      // Resumed in any case after a while: a lock() that waits for the server fails the
      // test instead of hanging it.
      const resumer = setTimeout(() => {
        resumed = true;
        server.resume();
      }, 15_000);
      try {
        const outcome = locks
          .lock(name, { ttl: 1_000, session: false }, async (lease) => {
            server.pause();
            await new Promise((done) => lease.signal.addEventListener("abort", done, { once: true }));
            return "done";
          })
          .finally(() => (settledPaused = !resumed));
        await assert.rejects(outcome, (error: unknown) => error instanceof LockLost && error.reason === "deadline");
      } finally {
        clearTimeout(resumer);
        resumed = true;
        server.resume();
      }
      assert.equal(settledPaused, true);
      await until("the key gone", async () => (await server.call("EXISTS", `lock:${name}`)) === 0);
    });

    test("close() with the server gone: bounded by the session's ttl, and a message that names LOCK.CLOSE", async () => {
      const gone = await startServer();
      const manager = await managerOn(library, gone);
      try {
        await manager.locks.acquire(`gone-${library}`, { ttl: 1_000 });
        await gone.stop();
        await assert.rejects(
          manager.locks.close(),
          (error: unknown) =>
            error instanceof ServerUnavailable &&
            error.message.startsWith("no answer from ") &&
            error.message.includes("LOCK.CLOSE"),
        );
      } finally {
        await manager.made.close();
        await gone.stop();
      }
    });

    test("lease.lost reads true right after the process was frozen past the deadline", async () => {
      const { locks } = await manager();
      const lease = await locks.acquire(`frozen-${library}`, { ttl: 500, session: false });
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 800); // frozen: no timer runs
      assert.equal(lease.lost, true);
      assert.equal(lease.lostReason, "deadline");
      assert.equal(lease.signal.aborted, true);
      await locks.release(lease);
      assert.equal(await server.call("EXISTS", lease.key), 0);
    });
  });
}
