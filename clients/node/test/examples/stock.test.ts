// examples/stock.js: 20 workers sell one item each from a stock of 100 while a worker
// that read the stock first is frozen (SIGSTOP) past its lease. The 20 get the lock
// once its lease has run out on the server; when the frozen worker wakes up, its
// write is refused (its fence is below the mark the 20 raised), so the stock ends at
// exactly 80. On a standalone server and on a 3-primary cluster.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { startCluster, startServer, type Reply } from "../harness/index.js";
import { requireExampleDeps, runExample, stopAll, type Target } from "./run.js";

async function frozenWorkerRefused(target: Target, get: (key: string) => Promise<Reply>): Promise<void> {
  // The frozen worker: a 1 s lease, and a pause between its read and its write long
  // enough for the test to stop the whole process (its refresher with it) there.
  const frozen = runExample("stock.js", ["--workers", "1", "--ttl", "1000", "--stall", "5000"], target);
  await frozen.line(/^read 100$/);
  frozen.child.kill("SIGSTOP");

  // 20 workers, each waiting in the lock's queue: the first is granted the lock when
  // the frozen worker's lease runs out on the server.
  const workers = runExample("stock.js", ["--workers", "20"], target);
  const out = await workers.finish();
  assert.match(out, /^apple: 20 sold, 0 refused, 80 in stock$/m, out);
  const reads = [...out.matchAll(/^read (\d+)$/gm)].map((m) => Number(m[1]));
  assert.deepEqual(
    reads,
    Array.from({ length: 20 }, (_, i) => 100 - i),
    "each worker read what the one before it wrote",
  );

  frozen.child.kill("SIGCONT");
  const late = await frozen.finish();
  assert.match(late, /^refused: StaleFence: /m, late);
  assert.match(late, /^apple: 0 sold, 1 refused, 80 in stock$/m, late);
  assert.equal(await get("{apple}:stock"), "80", "the frozen worker's sale was not written");
}

describe("examples/stock.js", { timeout: 120_000 }, () => {
  before(requireExampleDeps);
  after(stopAll);

  test("20 workers and a frozen one: the stock is exact (standalone)", async () => {
    const server = await startServer();
    try {
      await frozenWorkerRefused({ url: server.url, cluster: false }, (key) => server.call("GET", key));
    } finally {
      await stopAll();
      await server.stop();
    }
  });

  test("20 workers and a frozen one: the stock is exact (3-primary cluster)", async () => {
    const cluster = await startCluster();
    try {
      const first = cluster.nodes[0];
      assert.ok(first);
      await frozenWorkerRefused({ url: first.url, cluster: true }, (key) =>
        cluster.nodeOf(key).call("GET", key),
      );
    } finally {
      await stopAll();
      await cluster.stop();
    }
  });
});
