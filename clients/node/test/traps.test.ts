// The traps a client of fencelock must not fall into, each a test that fails if the
// package broke its rule: a client timeout shorter than the wait, an abandoned wait, a
// grant whose reply was lost (re-sent with the same token), a refresh queued behind a
// wait on a shared connection. Standalone, with each client library.
import assert from "node:assert/strict";
import { performance } from "node:perf_hooks";
import { after, before, describe, test } from "node:test";
import { Lease, LockLost, LockNotAcquired } from "../src/index.js";
import { startProxy, startServer, type Server } from "./harness/index.js";
import { LIBRARIES, managersOn } from "./clients.js";
import { lockInfo, sleep, until, untilWaiters } from "./waits.js";

let server: Server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server.stop();
});

for (const library of LIBRARIES) {
  describe(`${library}`, () => {
    const { manager, closeAll: closeManagers } = managersOn(library, () => server);

    test("a client timeout shorter than the wait: the waiter still gets the lock", async () => {
      const holder = await manager();
      // ioredis commandTimeout / node-redis socketTimeout of 200 ms, a wait of 20 s.
      const waiter = await manager({ timeout: 200 });
      const name = `timeout-${library}`;
      const held = await holder.locks.acquire(name, { ttl: 30_000 });
      const waiting = waiter.locks.acquire(name, { ttl: 30_000, wait: 20_000 });
      await untilWaiters(server, held.key, 1);
      await sleep(600); // three client timeouts
      await holder.locks.release(held);
      const lease = await waiting;
      assert.equal((await lockInfo(server, lease.key)).fence, Number(lease.fence));
      assert.equal(await waiter.locks.release(lease), true);
      assert.equal(await server.call("EXISTS", lease.key), 0);
    });

    test("an abandoned wait (AbortSignal) leaves nothing queued and no orphaned grant", async () => {
      const holder = await manager();
      const waiter = await manager({ timeout: 200 });
      const name = `abandon-${library}`;
      const held = await holder.locks.acquire(name, { ttl: 30_000 });
      const controller = new AbortController();
      const waiting = waiter.locks.acquire(name, { ttl: 30_000, wait: 60_000, signal: controller.signal });
      await untilWaiters(server, held.key, 1);
      controller.abort();
      await assert.rejects(waiting, (error: unknown) => error instanceof Error && error.name === "AbortError");
      await untilWaiters(server, held.key, 0);
      await holder.locks.release(held);
      assert.equal(await server.call("EXISTS", held.key), 0);
    });

    test("a grant whose reply was lost is the same grant when asked again", async () => {
      const proxy = await startProxy(server.port);
      try {
        const holder = await manager();
        const waiter = await manager({ port: proxy.port });
        const name = `lost-reply-${library}`;
        const held = await holder.locks.acquire(name, { ttl: 30_000 });
        const waiting = waiter.locks.acquire(name, { ttl: 30_000, wait: 30_000 });
        await untilWaiters(server, held.key, 1);
        proxy.drop();
        await holder.locks.release(held);
        // Granted to the waiter on the server; its reply is lost with the connection.
        await until("the grant", async () => Number((await lockInfo(server, held.key)).held) === 1);
        const granted = (await lockInfo(server, held.key)).fence;
        proxy.cut();
        const lease = await waiting;
        assert.equal(Number(lease.fence), granted);
        assert.ok(lease.fence > held.fence);
        assert.equal(await waiter.locks.release(lease), true);
        assert.equal(await server.call("EXISTS", held.key), 0);
      } finally {
        await closeManagers(); // the proxied ones first, while their proxy is up
        await proxy.close();
      }
    });

    test("a try (wait 0) whose reply was lost: sent again, the same grant", async () => {
      const proxy = await startProxy(server.port);
      try {
        const client = await manager({ port: proxy.port });
        const name = `lost-try-${library}`;
        const key = client.locks.key(name);
        // Asked once per server before the first acquire: asked now, before the drop.
        await client.locks.release(await client.locks.acquire(`${name}-first`));
        proxy.drop();
        const trying = client.locks.acquire(name, { ttl: 30_000 });
        await until("the grant", async () => Number((await lockInfo(server, key)).held) === 1);
        proxy.cut();
        const outcome = await trying.then(
          (lease) => lease,
          (error: unknown) => error,
        );
        // Sent again on a new connection with its TOKEN: the same grant.
        assert.ok(outcome instanceof Lease, `got ${String(outcome)}`);
        assert.equal(Number(outcome.fence), (await lockInfo(server, key)).fence);
        assert.equal(await client.locks.release(outcome), true);
        await until("the key released", async () => (await server.call("EXISTS", key)) === 0, 5_000);
      } finally {
        await closeManagers(); // the proxied ones first, while their proxy is up
        await proxy.close();
      }
    });

    test("a refresh is not held up behind a wait of the same client", async () => {
      const other = await manager();
      const keptAlive = async (session: boolean): Promise<void> => {
        const locks = (await manager({ locks: { session } })).locks;
        const kept = await locks.acquire(`kept-${library}-${session}`, { ttl: 1_500 });
        const busy = await other.locks.acquire(`busy-${library}-${session}`, { ttl: 30_000 });
        // The same client waits 4.5 s, three leases long.
        await assert.rejects(
          locks.acquire(`busy-${library}-${session}`, { ttl: 30_000, wait: 4_500 }),
          LockNotAcquired,
        );
        kept.ensureHeld();
        assert.ok(Number(await server.call("PTTL", kept.key)) > 0);
        assert.equal(await locks.release(kept), true);
        await other.locks.release(busy);
      };
      // A lease of its own (LOCK.REFRESH) and one of a session (LOCK.KEEPALIVE).
      await Promise.all([keptAlive(false), keptAlive(true)]);
    });

    test("the deadline counts from the acquire's send, not from its answer", async () => {
      const proxy = await startProxy(server.port);
      try {
        const client = await manager({ port: proxy.port, locks: { session: false } });
        await client.locks.release(await client.locks.acquire(`first-${library}`));
        proxy.delay(1_000); // every answer a second late
        const lease = await client.locks.acquire(`sent-${library}`, { ttl: 30_000 });
        const answered = performance.now();
        // Sent at least a second before its answer arrived.
        assert.ok(lease.deadline <= answered - 1_000 + 30_000, `${lease.deadline} vs ${answered}`);
        assert.ok(lease.acquiredAt <= answered - 1_000);
        proxy.delay(0);
        await client.locks.release(lease);
      } finally {
        await closeManagers();
        await proxy.close();
      }
    });

    test("a lease that cannot be refreshed is lost at its deadline", async () => {
      const proxy = await startProxy(server.port);
      try {
        const client = await manager({ port: proxy.port, locks: { session: false } });
        const lease = await client.locks.acquire(`deadline-${library}`, { ttl: 1_000 });
        proxy.drop(); // no refresh answer gets through
        await new Promise((done) => lease.signal.addEventListener("abort", done, { once: true }));
        assert.equal(lease.lostReason, "deadline");
        assert.throws(() => lease.ensureHeld(), LockLost);
        proxy.cut();
      } finally {
        await closeManagers(); // the proxied ones first, while their proxy is up
        await proxy.close();
      }
    });
  });
}
