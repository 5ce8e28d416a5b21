// Small helpers of the tests: waiting for a server-side state by polling it (bounded),
// and sleeping.
import type { Server } from "./harness/index.js";

export function sleep(ms: number): Promise<void> {
  return new Promise((done) => setTimeout(done, ms));
}

/** LOCK.INFO of `key` as a record (`held`, `fence`, `waiters`, ...). */
export async function lockInfo(on: Server, key: string): Promise<Record<string, unknown>> {
  const reply = ((await on.call("LOCK.INFO", key)) ?? []) as unknown[];
  const info: Record<string, unknown> = {};
  for (let i = 0; i + 1 < reply.length; i += 2) info[String(reply[i])] = reply[i + 1];
  return info;
}

/** Polls until `check()` is true; fails after `limitMs` (a state that never comes). */
export async function until(what: string, check: () => Promise<boolean>, limitMs = 20_000): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`never happened: ${what}`);
    await sleep(20);
  }
}

export function untilWaiters(on: Server, key: string, count: number): Promise<void> {
  return until(`${count} waiters on ${key}`, async () => Number((await lockInfo(on, key)).waiters) === count);
}
