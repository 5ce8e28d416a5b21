// The lock manager through a Sentinel, with each client library: the acquire, a wait on
// the manager's own connection (resolved through the Sentinel too), a session kept
// past its ttl, close().
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Locks } from "../src/index.js";
import { startSentinel, startServer, type Sentinel, type Server } from "./harness/index.js";
import { LIBRARIES, throughSentinel } from "./clients.js";
import { sleep, untilWaiters } from "./waits.js";

let primary: Server;
let sentinel: Sentinel;
before(async () => {
  primary = await startServer();
  sentinel = await startSentinel(primary);
});
after(async () => {
  await sentinel.stop();
  await primary.stop();
});

for (const library of LIBRARIES) {
  test(`${library} through a Sentinel: lock, wait, session, close`, async () => {
    const [one, two] = [await throughSentinel(library, sentinel), await throughSentinel(library, sentinel)];
    const managers: Locks[] = [];
    try {
      if (library === "node-redis" && typeof (one.client as { duplicate?: unknown }).duplicate !== "function") {
        // node-redis 5: its Sentinel client cannot make the connections waits need.
        assert.throws(() => new Locks(one.client), /node-redis 6 or later/);
        return;
      }
      const first = new Locks(one.client);
      const second = new Locks(two.client);
      managers.push(first, second);
      const name = `sentinel-${library}`;
      // A 3 s lease: on a loaded machine (a load of 13 on 2 cores) a 1.5 s one ran out
      // between keepalives, and the waiter was granted before it was ever seen queued.
      const lease = await first.acquire(name, { ttl: 3_000 });
      const waiting = second.acquire(name, { ttl: 30_000, wait: 30_000 });
      await untilWaiters(primary, lease.key, 1);
      await sleep(6_500); // past two leases: kept by the session's keepalive
      lease.ensureHeld();
      await first.close();
      assert.equal(lease.lostReason, "closed");
      const next = await waiting;
      assert.ok(next.fence > lease.fence);
      assert.equal(await second.release(next), true);
      assert.equal(await primary.call("EXISTS", lease.key), 0);
    } finally {
      for (const locks of managers) await locks.close();
      await one.close();
      await two.close();
    }
  });
}
