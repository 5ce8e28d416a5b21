// examples/cron.js on three processes: every schedule slot's job runs exactly once,
// on a standalone server and on a 3-primary cluster, with one of the processes firing
// late (its clock behind), after the job of the slot is already over: the lock kept
// for `minHold` makes it skip, where acquire → run → release would run the job again.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { startCluster, startServer, type Cluster, type Reply, type Server } from "../harness/index.js";
import { requireExampleDeps, runExample, stopAll, type Target } from "./run.js";

// Slots of 2 s; each process fires 3 of them. The late process fires 700 ms after each
// boundary, well after the job (50 ms) ended; minHold (the period, by default) keeps
// the slot's lock until then.
const EVERY = "2000";
const SLOTS = "3";

interface Firing {
  slot: number;
  ran: boolean;
}

function firings(stdout: string): Firing[] {
  return [...stdout.matchAll(/^slot (\d+): (ran here|skipped)$/gm)].map((m) => ({
    slot: Number(m[1]),
    ran: m[2] === "ran here",
  }));
}

async function threeProcesses(target: Target, runs: () => Promise<Reply>): Promise<void> {
  const cron = (...extra: string[]) =>
    runExample("cron.js", ["--every", EVERY, "--slots", SLOTS, "--work", "50", ...extra], target);
  const processes = [cron(), cron(), cron("--late", "700")];
  const outputs = await Promise.all(processes.map((p) => p.finish()));
  const perProcess = outputs.map(firings);
  for (const [i, fired] of perProcess.entries()) {
    assert.equal(fired.length, Number(SLOTS), `process ${i} fired every slot: ${outputs[i]}`);
  }

  const bySlot = new Map<number, Firing[]>();
  for (const fired of perProcess) {
    for (const firing of fired) bySlot.set(firing.slot, [...(bySlot.get(firing.slot) ?? []), firing]);
  }
  for (const [slot, fired] of bySlot) {
    assert.equal(fired.filter((f) => f.ran).length, 1, `slot ${slot} ran once: ${outputs.join("\n")}`);
  }
  // The processes started within one period of each other: some slots were fired by
  // all three, the case the lock is for.
  const contested = [...bySlot.values()].filter((fired) => fired.length === 3);
  assert.ok(contested.length >= 1, `a slot fired by all three: ${outputs.join("\n")}`);

  // What the job recorded, one entry per slot that ran.
  const recorded = ((await runs()) as string[]).map((entry) => Number(entry.split(" ")[0]));
  assert.deepEqual(
    [...recorded].sort((a, b) => a - b),
    [...bySlot.keys()].sort((a, b) => a - b),
    "the job recorded each slot once",
  );
}

describe("examples/cron.js", { timeout: 120_000 }, () => {
  before(requireExampleDeps);
  after(stopAll);

  test("runs once per slot across three processes (standalone)", async () => {
    const server: Server = await startServer();
    try {
      await threeProcesses({ url: server.url, cluster: false }, () =>
        server.call("LRANGE", "report:runs", 0, -1),
      );
    } finally {
      await stopAll();
      await server.stop();
    }
  });

  test("runs once per slot across three processes (3-primary cluster)", async () => {
    const cluster: Cluster = await startCluster();
    try {
      const first = cluster.nodes[0];
      assert.ok(first);
      await threeProcesses({ url: first.url, cluster: true }, () =>
        cluster.nodeOf("report:runs").call("LRANGE", "report:runs", 0, -1),
      );
    } finally {
      await stopAll();
      await cluster.stop();
    }
  });
});
