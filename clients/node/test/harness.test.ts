// The harness itself: a standalone server and a 3-primary cluster start with the module
// loaded, answer LOCK.* commands, and are gone after stop().
import assert from "node:assert/strict";
import { test } from "node:test";
import { command, startCluster, startServer } from "./harness/index.js";

test("a standalone server runs the module and stops", async () => {
  const server = await startServer();
  const reply = await server.call("LOCK.ACQUIRE", "lock:h", 10_000, "TOKEN", "t1");
  assert.ok(Array.isArray(reply) && reply[0] === "t1");
  await server.stop();
  await assert.rejects(command(server.port, ["PING"], 1000));
});

test("a cluster of three primaries routes by slot", async () => {
  const cluster = await startCluster();
  try {
    for (const key of ["lock:a", "lock:b", "lock:c", "lock:d"]) {
      const owner = cluster.nodeOf(key);
      const reply = await owner.call("LOCK.ACQUIRE", key, 10_000);
      assert.ok(Array.isArray(reply));
      const other = cluster.nodes.find((node) => node !== owner);
      const moved = await command(other?.port ?? 0, ["LOCK.ACQUIRE", key, 10_000]);
      assert.ok(moved instanceof Error && moved.message.startsWith("MOVED"));
    }
  } finally {
    await cluster.stop();
  }
});
