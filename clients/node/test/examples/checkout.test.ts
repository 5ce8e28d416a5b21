// examples/checkout.js: a double-submitted order is charged once. In the test's own
// process with a payment that waits for the test (so the second submission surely
// arrives while the first is charging), and as two instances of the app started
// from the command line, behind which every order is submitted three times at once.
import assert from "node:assert/strict";
import { type AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { pathToFileURL } from "node:url";
import type { Server as HttpServer } from "node:http";

import { Redis } from "ioredis";

import { startServer, type Server } from "../harness/index.js";
import { examplesDir, requireExampleDeps, runExample, stopAll } from "./run.js";

type Charge = (orderId: string, amountCents: number) => Promise<void>;

interface CheckoutModule {
  createApp(
    client: Redis,
    charge?: Charge,
  ): { app: { listen(port: number, host: string, ready: () => void): HttpServer }; locks: { close(): Promise<void> } };
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

  test("a second submission while the first is charging is answered 409, a third after it 'already-paid'", async () => {
    const { createApp } = (await import(pathToFileURL(join(examplesDir, "checkout.js")).href)) as CheckoutModule;
    const charges: Array<[string, number]> = [];
    let charging!: () => void;
    const started = new Promise<void>((done) => (charging = done));
    let finishCharge!: () => void;
    const finished = new Promise<void>((done) => (finishCharge = done));
    const charge: Charge = async (orderId, amountCents) => {
      charges.push([orderId, amountCents]);
      charging();
      await finished;
    };

    const client = new Redis(server.url);
    const { app, locks } = createApp(client, charge);
    const http = await new Promise<HttpServer>((ready) => {
      const listening: HttpServer = app.listen(0, "127.0.0.1", () => ready(listening));
    });
    try {
      const port = (http.address() as AddressInfo).port;
      const first = pay(port, "42");
      await started;
      const second = await pay(port, "42");
      assert.equal(second.status, 409);
      assert.equal(second.body.status, "in-progress");
      finishCharge();
      const charged = await first;
      assert.equal(charged.status, 200);
      assert.equal(charged.body.status, "charged");
      const third = await pay(port, "42");
      assert.deepEqual([third.status, third.body.status, third.body.fence], [200, "already-paid", charged.body.fence]);
      assert.deepEqual(charges, [["42", 1999]]);
      assert.deepEqual(await server.call("HGETALL", "order:{42}"), [
        "status", "paid", "amountCents", "1999", "fence", charged.body.fence,
      ]);
    } finally {
      await new Promise((done) => http.close(done));
      await locks.close();
      await client.quit();
    }
  });

  test("two instances of the app: ten orders each submitted three times at once are charged once", async () => {
    const target = { url: server.url, cluster: false };
    const apps = [0, 1].map(() => runExample("checkout.js", [], target, { PORT: "0" }));
    const ports = await Promise.all(apps.map(async (app) => Number((await app.line(/^listening on (\d+)$/))[1])));
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
      const charges = outputs.join("").split("\n").filter((line) => line.startsWith(`charging order ${order}:`));
      assert.equal(charges.length, 1, `${order} charged once`);
      assert.equal(await server.call("HGET", `order:{${order}}`, "status"), "paid");
    }
  });
});
