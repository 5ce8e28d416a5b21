// examples/checkout.js: a double-submitted order is charged once. In the test's own
// process with a payment that waits for the test (so the second submission surely
// arrives while the first is charging), and as two instances of the app started
// from the command line, behind which every order is submitted three times at once
// (on a standalone server and on a 3-primary cluster).
import assert from "node:assert/strict";
import { type AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { pathToFileURL } from "node:url";
import type { Server as HttpServer } from "node:http";

import { Redis } from "ioredis";

import { startCluster, startServer, type Reply, type Server } from "../harness/index.js";
import { examplesDir, requireExampleDeps, runExample, stopAll, type Target } from "./run.js";

type Charge = (orderId: string, amountCents: number) => Promise<void>;

/** What the test uses of examples/checkout.js (plain JavaScript, loaded at run time). */
interface CheckoutModule {
  createApp(
    client: Redis,
    charge?: Charge,
  ): {
    app: { listen(port: number, host: string, ready: () => void): HttpServer };
    locks: { close(): Promise<void> };
  };
}

interface Answer {
  status: number;
  body: { orderId?: string; status?: string; fence?: string; error?: string };
}

async function pay(port: number, orderId: string, amountCents = 1999): Promise<Answer> {
  const response = await fetch(`http://127.0.0.1:${port}/orders/${orderId}/pay`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ amountCents }),
  });
  return { status: response.status, body: (await response.json()) as Answer["body"] };
}

/** The payment provider of the in-process app: records each charge and holds it until
 * the test lets it finish. */
class Payments {
  readonly charges: Array<[string, number]> = [];
  readonly #started = new Map<string, () => void>();
  readonly #startedPromises = new Map<string, Promise<void>>();
  readonly #finish = new Map<string, () => void>();
  readonly #finished = new Map<string, Promise<void>>();

  #latch(orderId: string): void {
    if (this.#startedPromises.has(orderId)) return;
    this.#startedPromises.set(orderId, new Promise((done) => this.#started.set(orderId, done)));
    this.#finished.set(orderId, new Promise((done) => this.#finish.set(orderId, done)));
  }

  readonly charge: Charge = async (orderId, amountCents) => {
    this.#latch(orderId);
    this.charges.push([orderId, amountCents]);
    this.#started.get(orderId)?.();
    await this.#finished.get(orderId);
  };

  /** Resolves once the charge of `orderId` has begun. */
  started(orderId: string): Promise<void> {
    this.#latch(orderId);
    return this.#startedPromises.get(orderId) ?? Promise.resolve();
  }

  finish(orderId: string): void {
    this.#latch(orderId);
    this.#finish.get(orderId)?.();
  }
}

/** The example's app in this process, on a client of its own (so a lock manager and
 * session of its own, as another instance has), listening on a free port. */
async function serve(server: Server, charge: Charge): Promise<{ port: number; close(): Promise<void> }> {
  const script = pathToFileURL(join(examplesDir, "checkout.js")).href;
  const { createApp } = (await import(script)) as CheckoutModule;
  const client = new Redis(server.url);
  const { app, locks } = createApp(client, charge);
  const http = await new Promise<HttpServer>((ready) => {
    const listening: HttpServer = app.listen(0, "127.0.0.1", () => ready(listening));
  });
  return {
    port: (http.address() as AddressInfo).port,
    async close(): Promise<void> {
      http.closeAllConnections();
      await new Promise((done) => http.close(done));
      await locks.close();
      await client.quit();
    },
  };
}

describe("examples/checkout.js", { timeout: 120_000 }, () => {
  let server: Server;
  before(async () => {
    requireExampleDeps();
    server = await startServer();
  });
  after(async () => {
    await stopAll();
    await server?.stop();
  });

  test("a second submission while the first charges: 409; a third after it: 'already-paid'", async () => {
    const payments = new Payments();
    const app = await serve(server, payments.charge);
    try {
      const first = pay(app.port, "42");
      await payments.started("42");
      const second = await pay(app.port, "42");
      assert.equal(second.status, 409);
      assert.equal(second.body.status, "in-progress");
      payments.finish("42");
      const charged = await first;
      assert.equal(charged.status, 200);
      assert.equal(charged.body.status, "charged");
      const third = await pay(app.port, "42");
      assert.deepEqual(
        [third.status, third.body.status, third.body.fence],
        [200, "already-paid", charged.body.fence],
      );
      assert.deepEqual(payments.charges, [["42", 1999]]);
      assert.deepEqual(await server.call("HGETALL", "order:{42}"), [
        "status", "paid", "amountCents", "1999", "fence", charged.body.fence,
      ]);
    } finally {
      await app.close();
    }
  });

  // Found running two instances against a cluster: in the manager's session every
  // request of an instance was one owner to the server, and a request of each waiting
  // for the order the other instance was charging was refused with DEADLOCK (a 500).
  test("two instances each charging an order, asked for the other's: 409, not a deadlock", async () => {
    const payments = new Payments();
    const [a, b] = await Promise.all([serve(server, payments.charge), serve(server, payments.charge)]);
    try {
      const charging = [pay(a.port, "7"), pay(b.port, "8")];
      await Promise.all([payments.started("7"), payments.started("8")]);
      // Both waits at once: a waits for 8 (held by b), b for 7 (held by a).
      const crossed = await Promise.all([pay(a.port, "8"), pay(b.port, "7")]);
      assert.deepEqual(
        crossed.map((answer) => `${answer.status} ${answer.body.status}`),
        ["409 in-progress", "409 in-progress"],
        JSON.stringify(crossed),
      );
      payments.finish("7");
      payments.finish("8");
      const charged = await Promise.all(charging);
      assert.deepEqual(charged.map((answer) => answer.body.status), ["charged", "charged"]);
      assert.deepEqual([...payments.charges].sort(), [["7", 1999], ["8", 1999]]);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  test("two instances: ten orders submitted three times at once, each charged once (standalone)", async () => {
    await twoInstances({ url: server.url, cluster: false }, (key, field) => server.call("HGET", key, field));
  });

  test("two instances: ten orders submitted three times at once, each charged once (cluster)", async () => {
    const cluster = await startCluster();
    try {
      const first = cluster.nodes[0];
      assert.ok(first);
      await twoInstances({ url: first.url, cluster: true }, (key, field) =>
        cluster.nodeOf(key).call("HGET", key, field),
      );
    } finally {
      await stopAll();
      await cluster.stop();
    }
  });
});

/** Two instances of the app started from the command line, behind which every order is
 * submitted three times at once: each is charged once, answered `charged` once, and
 * `in-progress` (409) or `already-paid` the other times. */
async function twoInstances(
  target: Target,
  hget: (key: string, field: string) => Promise<Reply>,
): Promise<void> {
  const apps = [0, 1].map(() => runExample("checkout.js", [], target, { PORT: "0" }));
  const ports = await Promise.all(
    apps.map(async (app) => Number((await app.line(/^listening on (\d+)$/))[1])),
  );
  const orders = Array.from({ length: 10 }, (_, i) => `o${i}`);
  // Each order: twice to one instance, once to the other, all at the same time.
  const answers = await Promise.all(
    orders.flatMap((order, i) => [0, 1, 2].map((n) => pay(ports[(i + n) % 2] ?? 0, order))),
  );
  for (const app of apps) app.child.kill("SIGTERM");
  const outputs = await Promise.all(apps.map((app) => app.finish()));

  for (const order of orders) {
    const mine = answers.filter((answer) => answer.body.orderId === order);
    assert.equal(mine.length, 3);
    const statuses = mine.map((answer) => `${answer.status} ${answer.body.status}`);
    assert.equal(statuses.filter((s) => s === "200 charged").length, 1, `${order}: ${statuses}`);
    for (const other of statuses.filter((s) => s !== "200 charged")) {
      assert.ok(["409 in-progress", "200 already-paid"].includes(other), `${order}: ${statuses}`);
    }
    const lines = outputs.join("").split("\n");
    const charges = lines.filter((line) => line.startsWith(`charging order ${order}:`));
    assert.equal(charges.length, 1, `${order} charged once`);
    assert.equal(await hget(`order:{${order}}`, "status"), "paid");
  }
}
