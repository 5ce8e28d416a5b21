// One acquire (LOCK.ACQUIRE, or LOCK.ACQUIREALL for several keys) with a client token,
// and the clean-up that keeps a failed or abandoned one from leaving anything behind.
//
// A wait (BLOCK) runs on a connection of this package's own (`WaitLinks`), never on the
// application's: a wait holds its connection for as long as it waits, and the
// application's client may have a timeout shorter than the wait (ioredis
// `commandTimeout`, node-redis `socketTimeout`), after which its wait would stay queued
// on the server and be granted to nobody. A lost connection is asked again with the same
// token for the time left (a grant it missed is then the same grant). An abandoned wait
// (the AbortSignal, an error) closes its connection — the server drops the queued wait —
// and releases the token, in case it was granted in between.
import { now } from "./clock.js";
import type { OwnCommands } from "./commands.js";
import type { WaitLinks } from "./links.js";
import { type AcquireRequest, acquireArgs, blockMs, parseGrant } from "./protocol.js";
import { fromReply } from "./replies.js";
import { type Link, ServerReply, type Transport } from "./transport/index.js";
import { MAX_REDIRECTS, MAX_TRYAGAIN, TRYAGAIN_PAUSE_MS, pause, redirection } from "./transport/types.js";

// How often a wait whose connection was lost is asked again before giving up.
const RECONNECTS = 3;
const RECONNECT_PAUSE_MS = 100;
export interface Grant {
  fences: bigint[];
  /** When the granted acquire was sent, and when its answer came (`performance.now()`). */
  sentAt: number;
  answeredAt: number;
}

/** Releases `token`'s holdings of `keys`, ignoring every failure (a clean-up), on the
 * package's own connections (the application's client may be closed by now). */
export async function releaseQuietly(commands: OwnCommands, keys: readonly string[], token: string): Promise<void> {
  await Promise.all(
    keys.map((key) => commands.call(key, ["LOCK.RELEASE", key, token]).catch(() => undefined)),
  );
}

function aborted(signal: AbortSignal | undefined): Promise<never> {
  return new Promise((_, reject) => {
    if (signal === undefined) return;
    const fail = (): void => reject(signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason)));
    if (signal.aborted) fail();
    else signal.addEventListener("abort", fail, { once: true });
  });
}

function race<T>(work: Promise<T>, abort: Promise<never>): Promise<T> {
  work.catch(() => undefined); // settled after an abort: nobody listens any more
  return Promise.race([work, abort]);
}

/** A refusal of the server (nothing granted, nothing queued): no clean-up. */
class Refused extends Error {
  constructor(readonly error: Error) {
    super(error.message);
  }
}

/** Asks for `request`'s keys, waiting up to `waitMs` (0: one try; Infinity: without
 * limit) in the server's queue; the grant, or null when busy for the whole wait. */
export async function acquire(
  transport: Transport,
  commands: OwnCommands,
  links: WaitLinks,
  request: AcquireRequest,
  waitMs: number,
  signal?: AbortSignal,
): Promise<Grant | null> {
  signal?.throwIfAborted();
  const key = request.keys[0] ?? "";
  const command = request.all ? "LOCK.ACQUIREALL" : "LOCK.ACQUIRE";
  const node = await transport.nodeOf(key);
  if (waitMs <= 0) {
    const sentAt = now();
    try {
      const fences = parseGrant(await commands.call(key, acquireArgs(request, undefined)));
      return fences === null ? null : { fences, sentAt, answeredAt: now() };
    } catch (error) {
      if (error instanceof ServerReply) throw fromReply(error, key, command, transport.describe(node));
      // Lost on the way: it may have been granted.
      await releaseQuietly(commands, request.keys, request.token);
      throw fromReply(error, key, command, transport.describe(node));
    }
  }
  const until = now() + waitMs;
  const abort = aborted(signal);
  abort.catch(() => undefined);
  let target = node;
  let link: Link | undefined;
  try {
    link = await race(links.take(target), abort);
    let asking = false;
    let redirects = 0;
    let tries = 0;
    let reconnects = 0;
    for (;;) {
      const sentAt = now();
      let reply: unknown;
      try {
        if (asking) await race(link.send(["ASKING"]), abort);
        reply = await race(link.send(acquireArgs(request, blockMs(until - sentAt))), abort);
      } catch (error) {
        if (signal?.aborted) throw error;
        if (!(error instanceof ServerReply)) {
          // The connection was lost: the same token again, for the time left.
          link.close();
          link = undefined;
          if (reconnects++ >= RECONNECTS) throw error;
          await race(pause(RECONNECT_PAUSE_MS), abort);
          link = await race(links.take(target), abort);
          continue;
        }
        // A slot in migration: asked again while the wait lasts.
        if (error.message.startsWith("TRYAGAIN") && (tries++ < MAX_TRYAGAIN || now() < until)) {
          await race(pause(TRYAGAIN_PAUSE_MS), abort);
          continue;
        }
        const moved = redirection(error.message);
        if (moved !== undefined && redirects++ < MAX_REDIRECTS) {
          if (!moved.ask) transport.refreshRouting();
          links.give(target, link);
          link = undefined;
          target = moved.node;
          asking = moved.ask;
          link = await race(links.take(target), abort);
          continue;
        }
        throw new Refused(fromReply(error, key, command, transport.describe(target)));
      }
      asking = false;
      const fences = parseGrant(reply);
      links.give(target, link);
      link = undefined;
      return fences === null ? null : { fences, sentAt, answeredAt: now() };
    }
  } catch (error) {
    if (error instanceof Refused) {
      if (link !== undefined) links.give(target, link);
      throw error.error;
    }
    // Abandoned: the server drops a wait whose connection closes; a grant that came
    // first is released.
    link?.close();
    await releaseQuietly(commands, request.keys, request.token);
    if (signal?.aborted) throw signal.reason;
    throw fromReply(error, key, command, transport.describe(target));
  }
}
