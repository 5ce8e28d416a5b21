// The lock manager on a 3-primary cluster whose client connections were all killed
// (`CLIENT KILL TYPE normal`) or closed by an idle node-redis `socketTimeout`: a release
// still reaches the key's node (sent again, with the same token, on a connection of the
// package's own) instead of failing while the client reconnects and leaving the lease
// held.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Locks } from "../src/index.js";
import { startCluster, type Cluster } from "./harness/index.js";
import { LIBRARIES, clustered, type Made } from "./clients.js";
import { sleep, until, untilWaiters } from "./waits.js";

let cluster: Cluster;
before(async () => {
  cluster = await startCluster();
});
after(async () => {
  await cluster.stop();
});

for (const library of LIBRARIES) {
  describe(`${library}, cluster`, () => {
    const made: Made[] = [];
    const managers: Locks[] = [];
    async function manager(options: Parameters<typeof clustered>[2] = {}): Promise<[Locks, Made]> {
      const client = await clustered(library, cluster, options);
      made.push(client);
      const locks = new Locks(client.client);
      managers.push(locks);
      return [locks, client];
    }
    after(async () => {
      for (const locks of managers) await locks.close().catch(() => undefined);
      for (const client of made) await client.close();
    });

    test("every client connection killed: a release still releases", async () => {
      const [locks] = await manager();
      // A few rounds: how the client's reconnect and the release meet varies.
      for (let round = 0; round < 3; round++) {
        const lease = await locks.acquire(`killed-${library}-${round}`, { ttl: 30_000, session: false });
        await sleep(300);
        for (const node of cluster.nodes) await node.call("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes");
        await sleep(500);
        assert.equal(await locks.release(lease), true);
        assert.equal(lease.lost, false);
        assert.equal(await cluster.nodeOf(lease.key).call("EXISTS", lease.key), 0);
      }
    });

    if (library === "node-redis") {
      test("node clients closed by their idle socketTimeout: the waiter's work runs and the lock is released", async () => {
        const [holder] = await manager();
        const [waiter] = await manager({ timeout: 1_000, noPings: true });
        const name = "idle-timeout-cluster";
        const held = await holder.acquire(name, { ttl: 60_000 });
        const node = cluster.nodeOf(held.key);
        const locking = waiter.lock(name, { ttl: 30_000, wait: 30_000 }, (lease) => lease.fence);
        await untilWaiters(node, held.key, 1);
        await sleep(2_000); // twice the socketTimeout: the cluster's idle node clients are closed
        await holder.release(held);
        const fence = await locking;
        assert.ok(fence > held.fence);
        await until("the key released", async () => (await node.call("EXISTS", held.key)) === 0);
      });
    }
  });
}
