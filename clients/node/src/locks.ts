// `Locks`: the lock manager over an application's node-redis or ioredis client.
//
//   const locks = new Locks(client);
//   await locks.lock("{order-42}", { ttl: 30_000, wait: 5_000 }, async (lease) => { ... });
//
// Every acquire sends a fresh random TOKEN (a re-sent acquire is the same grant); a wait
// runs on a connection of the manager's own (acquire.ts); held leases are kept alive by
// one refresher per manager (refresher.ts): in the manager's session, one LOCK.KEEPALIVE
// per server for all of them (sent to every primary of a cluster where it holds one),
// else a LOCK.REFRESH each. `close()` ends the sessions (LOCK.CLOSE on every primary).
import { acquire, releaseQuietly, type Grant } from "./acquire.js";
import { WaitLinks } from "./links.js";
import { now } from "./clock.js";
import { OwnCommands } from "./commands.js";
import { LockLost, LockNotAcquired } from "./errors.js";
import { Lease, type LeaseHost } from "./lease.js";
import {
  type AcquireRequest,
  type Arg,
  newSessionName,
  newToken,
  parseFlag,
  toBigInt,
  toNumber,
  wholeMs,
} from "./protocol.js";
import { Refresher } from "./refresher.js";
import { fromReply } from "./replies.js";
import { ServerReply, type Transport, transportOf } from "./transport/index.js";

/** The lease length when none is given, in ms. */
export const DEFAULT_TTL = 30_000;

export interface LocksOptions {
  /** Put in front of every lock name to make its key (default `"lock:"`). */
  prefix?: string;
  /** Keep the locks held through this manager in its sessions (default true, where the
   * server has sessions): one keepalive per server for all of them, all ended by
   * `close()`. */
  session?: boolean;
  /** Default `lockDelay` of every acquire, in ms (see `LockOptions.lockDelay`). */
  lockDelay?: number;
}

export interface LockOptions {
  /** The lease, in ms (default 30 000); refreshed while held. */
  ttl?: number;
  /** How long to wait in the server's FIFO queue when the lock is busy, in ms: 0 (the
   * default) tries once, `Infinity` waits without limit. Busy for the whole wait:
   * `LockNotAcquired`. */
  wait?: number;
  /** In the manager's session (default: the manager's `session`); false gives the
   * lease a refresh of its own. */
  session?: boolean;
  /** The public value of the holding (`VALUE`: shown by LOCK.INFO and LOCK.OBSERVE). */
  value?: string | Buffer;
  /** If the lease runs out (its holder died or stalled), the key stays taken by
   * nobody this long, in ms (`LOCKDELAY`; default: the server's `fencelock.lock-delay`). */
  lockDelay?: number;
  /** Abandons the wait when it aborts: nothing stays queued and nothing granted stays
   * held; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

export interface OnceOptions {
  /** The lease while the job runs, in ms (default 30 000); refreshed while it runs. */
  ttl?: number;
  /** Keep the lock at least this long after the acquire, in ms, even when the job is
   * done sooner: a process whose clock or timer runs late finds it still held and
   * skips, instead of running the job a second time. */
  minHold?: number;
  lockDelay?: number;
}

export interface LockAllOptions {
  ttl?: number;
  /** As for `lock`: 0 (the default) tries once, `Infinity` waits without limit. */
  wait?: number;
  session?: boolean;
  lockDelay?: number;
  signal?: AbortSignal;
}

/** The leases of `lockAll`, one per name, in the order given. */
export class HeldLocks {
  readonly #controller = new AbortController();

  constructor(readonly leases: readonly Lease[]) {
    for (const lease of leases) {
      lease.signal.addEventListener("abort", () => this.#controller.abort(lease.signal.reason), { once: true });
    }
  }

  /** The fences, in the order of the names. */
  get fences(): bigint[] {
    return this.leases.map((lease) => lease.fence);
  }

  /** Aborts when any of the leases is lost. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  get lost(): boolean {
    return this.leases.some((lease) => lease.lost);
  }

  /** Throws `LockLost` unless every lease still holds. */
  ensureHeld(): void {
    for (const lease of this.leases) lease.ensureHeld();
  }
}

type Work<T> = (lease: Lease) => Promise<T> | T;

/** One holding of a session, as `LOCK.HELD` lists it. */
export interface Holding {
  key: string;
  mode: string;
  fence: bigint;
  /** The lease left, in ms (-1: made permanent). */
  pttl: number;
}

function holdingOf(entry: unknown): Holding {
  const [key, mode, fence, pttl] = Array.isArray(entry) ? entry : [];
  return { key: String(key), mode: String(mode), fence: toBigInt(fence), pttl: toNumber(pttl) };
}

export class Locks {
  readonly prefix: string;
  readonly #transport: Transport;
  readonly #session: boolean;
  readonly #lockDelay: number | undefined;
  readonly #refresher: Refresher;
  readonly #links: WaitLinks;
  /** Every LOCK.* command of the manager but a guarded write goes on its own
   * connections (commands.ts): none depends on the application's client staying open. */
  readonly #commands: OwnCommands;
  readonly #host: LeaseHost;
  /** This manager's session name per ttl (a keepalive gives all holdings one ttl). */
  #sessions = new Map<number, string>();
  /** Per server: whether it has sessions (asked once). */
  readonly #hasSessions = new Map<string, Promise<boolean>>();

  /** `client`: a connected node-redis client (`createClient`, `createCluster`,
   * `createSentinel`) or an ioredis one (`new Redis(...)`, `new Cluster(...)`). */
  constructor(client: unknown, options: LocksOptions = {}) {
    this.#transport = transportOf(client);
    this.prefix = options.prefix ?? "lock:";
    this.#session = options.session ?? true;
    this.#lockDelay = options.lockDelay === undefined ? undefined : wholeMs(options.lockDelay, "lockDelay");
    this.#refresher = new Refresher(this.#transport);
    this.#links = new WaitLinks(this.#transport);
    this.#commands = new OwnCommands(this.#transport, this.#links);
    const transport = this.#transport;
    this.#host = {
      call: (key: string, args: Arg[]) => transport.call(key, args),
      describe: async (key: string) => transport.describe(await transport.nodeOf(key)),
    };
  }

  /** The key of the lock `name`: the prefix and the name. */
  key(name: string): string {
    return this.prefix + name;
  }

  /** Holds the lock `name` while `work(lease)` runs, and releases it after; resolves
   * with what `work` resolved with. `LockNotAcquired` if it stays busy for the whole
   * wait. If the lease was lost while `work` ran (`lease.signal` aborted then),
   * `LockLost` is thrown after `work` ends, instead of its result; an error of `work`
   * itself goes on unchanged. */
  lock<T>(name: string, work: Work<T>): Promise<T>;
  lock<T>(name: string, options: LockOptions, work: Work<T>): Promise<T>;
  async lock<T>(name: string, options: LockOptions | Work<T>, work?: Work<T>): Promise<T> {
    const [given, run] = typeof options === "function" ? [{}, options] : [options, work];
    if (run === undefined) throw new TypeError("lock() needs a function to run while holding the lock");
    const lease = await this.acquire(name, given);
    return this.#holding(lease, run, () => this.release(lease));
  }

  /** Takes the lock `name` and returns its lease, kept alive (refreshed, or by the
   * manager's session) until `release(lease)` or `close()`. For code that cannot run
   * its work in a callback; otherwise prefer `lock`. */
  async acquire(name: string, options: LockOptions = {}): Promise<Lease> {
    const key = this.key(name);
    const ttl = wholeMs(options.ttl ?? DEFAULT_TTL, "ttl");
    const node = await this.#nodeOf(key);
    const session = (options.session ?? this.#session) ? await this.#sessionFor(node, ttl) : undefined;
    const request: AcquireRequest = {
      keys: [key],
      all: false,
      ttlMs: ttl,
      token: newToken(),
      session,
      lockDelayMs: this.#delay(options.lockDelay),
      value: options.value,
    };
    const grant = await this.#take(request, options.wait ?? 0, options.signal);
    const [lease] = await this.#hold([name], request, grant, node);
    if (lease === undefined) throw new Error("a grant without a fence");
    return lease;
  }

  /** Releases `lease`'s lock (handed to the next waiter at once); resolves with whether
   * it still held it. Stops its refreshes first. */
  async release(lease: Lease): Promise<boolean> {
    this.#refresher.remove(lease);
    if (lease.released) return false;
    let held: boolean;
    try {
      held = parseFlag(await this.#commands.call(lease.key, ["LOCK.RELEASE", lease.key, lease.token]));
    } catch (error) {
      throw fromReply(error, lease.key, "LOCK.RELEASE", await this.#host.describe(lease.key));
    }
    if (!held && !lease.lost) lease.foundGone();
    lease.markReleased();
    return held;
  }

  /** Runs `job` once across processes, the cron recipe: takes the lock `name` without
   * waiting; if another process holds it, resolves with `undefined` at once, without
   * running `job`. Otherwise runs `job(lease)` holding it (refreshed), and then keeps it
   * until `minHold` after the acquire (does not release it early), so that a process
   * that comes late to the same run finds it held. An error of `job` releases it and
   * goes on; a lease lost while `job` ran throws `LockLost` after it. */
  async once<T>(name: string, options: OnceOptions, job: Work<T>): Promise<T | undefined> {
    const minHold = options.minHold ?? 0;
    let lease: Lease;
    try {
      lease = await this.acquire(name, {
        ttl: options.ttl ?? DEFAULT_TTL,
        wait: 0,
        session: false,
        ...(options.lockDelay === undefined ? {} : { lockDelay: options.lockDelay }),
      });
    } catch (error) {
      if (error instanceof LockNotAcquired) return undefined;
      throw error;
    }
    return this.#holding(lease, job, () => this.#leave(lease, minHold));
  }

  /** Holds every lock of `names` while `work(held)` runs, taken in one step, all or none
   * (`LOCK.ACQUIREALL`): a wait queues in every key's queue at once and never holds some
   * while it waits for the rest. `held.leases` and `held.fences` are in the order of
   * `names`. On a cluster the keys must share a slot (hash tags: `{order-42}:...`). */
  async lockAll<T>(
    names: readonly string[],
    options: LockAllOptions,
    work: (held: HeldLocks) => Promise<T> | T,
  ): Promise<T> {
    if (names.length === 0) throw new RangeError("lockAll needs at least one name");
    const keys = names.map((name) => this.key(name));
    if (new Set(keys).size !== keys.length) throw new RangeError("lockAll got a name twice");
    const ttl = wholeMs(options.ttl ?? DEFAULT_TTL, "ttl");
    const node = await this.#nodeOf(keys[0] ?? "");
    const session = (options.session ?? this.#session) ? await this.#sessionFor(node, ttl) : undefined;
    const request: AcquireRequest = {
      keys,
      all: true,
      ttlMs: ttl,
      token: newToken(),
      session,
      lockDelayMs: this.#delay(options.lockDelay),
    };
    const grant = await this.#take(request, options.wait ?? 0, options.signal);
    const leases = await this.#hold(names, request, grant, node);
    const held = new HeldLocks(leases);
    let result: T;
    try {
      result = await work(held);
    } catch (error) {
      await Promise.all(leases.map((lease) => this.release(lease).catch(() => undefined)));
      throw error;
    }
    const released = await Promise.allSettled(leases.map((lease) => this.release(lease)));
    const lost = leases.find((lease) => lease.lost);
    if (lost !== undefined) throw lost.lostError();
    const failed = released.find((outcome) => outcome.status === "rejected");
    if (failed !== undefined) throw (failed as PromiseRejectedResult).reason;
    return result;
  }

  /** What the manager's sessions hold now, as the servers see it: `LOCK.HELD` of each
   * session on every primary, put together (one entry per holding, never a token). */
  async held(): Promise<Holding[]> {
    const names = [...this.#sessions.values()];
    if (names.length === 0) return [];
    const primaries = await this.#transport.primaries();
    const replies = await Promise.all(
      primaries.flatMap((node) =>
        names.map(async (name) => {
          try {
            return await this.#commands.callNode(node, ["LOCK.HELD", name]);
          } catch (error) {
            throw fromReply(error, "", "LOCK.HELD", this.#transport.describe(node));
          }
        }),
      ),
    );
    return replies.flatMap((reply) => (Array.isArray(reply) ? reply : []).map(holdingOf));
  }

  /** Ends the manager's sessions: `LOCK.CLOSE` on every primary releases every lock
   * held in them (each lease is marked lost with reason `"closed"`, its signal aborts)
   * and answers their waiting acquires `LockNotAcquired`; then closes the manager's
   * own connections. Leases of their own (`session: false`, `once`) are left to their
   * holders. The manager can be used again, in new sessions. */
  async close(): Promise<void> {
    const sessions = [...this.#sessions];
    const names = sessions.map(([, name]) => name);
    this.#sessions = new Map();
    const closing: Lease[] = [];
    for (const name of names) {
      for (const lease of this.#refresher.takeSession(name)) {
        lease.lose("closed");
        closing.push(lease);
      }
    }
    let failure: { error: unknown; node: string } | undefined;
    if (names.length > 0) {
      const primaries = await this.#transport.primaries();
      await Promise.all(
        primaries.flatMap((node) =>
          // Bounded by the session's ttl: past it the server has ended the session.
          sessions.map(([ttl, name]) =>
            this.#commands.callNode(node, ["LOCK.CLOSE", name], ttl).catch((error: unknown) => {
              failure ??= { error, node };
            }),
          ),
        ),
      );
    }
    for (const lease of closing) lease.markReleased();
    this.#links.close();
    this.#refresher.stop();
    if (failure !== undefined) {
      const where = `${this.#transport.describe(failure.node)} to LOCK.CLOSE of the manager's sessions`;
      throw fromReply(failure.error, "", "LOCK.CLOSE", where);
    }
  }

  async #nodeOf(key: string): Promise<string> {
    try {
      return await this.#transport.nodeOf(key);
    } catch (error) {
      throw fromReply(error, key, "LOCK.ACQUIRE", "the cluster");
    }
  }

  #delay(lockDelay: number | undefined): number | undefined {
    return lockDelay === undefined ? this.#lockDelay : wholeMs(lockDelay, "lockDelay");
  }

  /** The session for leases of `ttl` on `node`, where that server has sessions. */
  async #sessionFor(node: string, ttl: number): Promise<string | undefined> {
    let known = this.#hasSessions.get(node);
    if (known === undefined) {
      known = this.#commands
        .callNode(node, ["LOCK.KEEPALIVE", newSessionName(), 1])
        .then(
          () => true,
          (error: unknown) => {
            if (error instanceof ServerReply) return false; // unknown command, NOPERM
            this.#hasSessions.delete(node); // not reached: ask again next time
            return false;
          },
        );
      this.#hasSessions.set(node, known);
    }
    if (!(await known)) return undefined;
    let name = this.#sessions.get(ttl);
    if (name === undefined) this.#sessions.set(ttl, (name = newSessionName()));
    return name;
  }

  async #take(request: AcquireRequest, wait: number, signal: AbortSignal | undefined): Promise<Grant> {
    if (typeof wait !== "number" || Number.isNaN(wait) || wait < 0) {
      throw new RangeError(`wait must be 0 or more milliseconds (or Infinity), not ${String(wait)}`);
    }
    const grant = await acquire(this.#transport, this.#commands, this.#links, request, wait, signal);
    const key = request.keys[0] ?? "";
    if (grant === null) throw new LockNotAcquired(key);
    return grant;
  }

  /** The leases of a grant, kept alive from now on. After a long wait the grant may be
   * much younger than its send: one refresh then gives the leases a deadline the
   * client can count on. A session closed meanwhile gives the grant up. */
  async #hold(names: readonly string[], request: AcquireRequest, grant: Grant, node: string): Promise<Lease[]> {
    let sentAt = grant.sentAt;
    const keys = request.keys;
    try {
      if (grant.answeredAt - grant.sentAt > request.ttlMs / 3) {
        sentAt = now();
        const refreshed = await Promise.all(
          keys.map((key) => this.#commands.call(key, ["LOCK.REFRESH", key, request.token, request.ttlMs])),
        );
        if (!refreshed.every(parseFlag)) throw new LockLost(keys[0] ?? "", "not-held");
      }
      if (request.session !== undefined && ![...this.#sessions.values()].includes(request.session)) {
        throw new LockNotAcquired(keys[0] ?? "", `lock ${JSON.stringify(keys[0])}: the lock manager was closed while it was being acquired`);
      }
    } catch (error) {
      await releaseQuietly(this.#commands, keys, request.token);
      throw fromReply(error, keys[0] ?? "", "LOCK.REFRESH", this.#transport.describe(node));
    }
    return keys.map((key, index) => {
      const lease = new Lease(this.#host, {
        name: names[index] ?? key,
        key,
        token: request.token,
        fence: grant.fences[index] ?? 0n,
        ttl: request.ttlMs,
        session: request.session,
        sentAt,
      });
      if (request.session !== undefined) this.#refresher.addToSession(lease, node);
      else this.#refresher.addOwn(lease, node);
      return lease;
    });
  }

  /** Runs `work(lease)`, then `leave()` (or, if it fails, releases); the loss of the lease while it ran is thrown
   * (as `LockLost`) after it, unless `work` failed on its own. */
  async #holding<T>(lease: Lease, work: Work<T>, leave: () => Promise<unknown>): Promise<T> {
    let result: T;
    try {
      result = await work(lease);
    } catch (error) {
      // Released whatever the recipe: a job that failed is to be run again.
      if (lease.lost) this.#releaseLost(lease);
      else await this.release(lease).catch(() => undefined);
      throw error;
    }
    if (lease.lost) {
      // Nothing to wait for: the caller learns of the loss now, even while the server
      // does not answer (paused, cut off).
      this.#releaseLost(lease);
      throw lease.lostError();
    }
    try {
      await leave();
    } catch (error) {
      if (lease.lost) throw new LockLost(lease.key, lease.lostReason, { cause: error });
      throw error;
    }
    if (lease.lost) throw lease.lostError();
    return result;
  }

  /** The release of a lost lease, in the background and bounded by its ttl: the server
   * may still hold the token (its lease not run out yet, or the loss seen on the client
   * only); past the ttl it holds it no more, and nothing is left to release. */
  #releaseLost(lease: Lease): void {
    this.#refresher.remove(lease);
    if (lease.released) return;
    lease.markReleased();
    const args = ["LOCK.RELEASE", lease.key, lease.token];
    void this.#transport
      .nodeOf(lease.key)
      .then((node) => this.#commands.callNode(node, args, lease.ttl))
      .catch(() => undefined);
  }

  /** The end of a `once` job that went well: the lease cut to what is left of
   * `minHold` (a refresh to that many ms), or released when nothing is. */
  async #leave(lease: Lease, minHold: number): Promise<void> {
    const left = Math.ceil(lease.acquiredAt + minHold - now());
    if (left <= 0 || lease.lost) {
      await this.release(lease);
      return;
    }
    this.#refresher.remove(lease);
    let held: boolean;
    try {
      held = parseFlag(await this.#commands.call(lease.key, ["LOCK.REFRESH", lease.key, lease.token, left]));
    } catch (error) {
      throw fromReply(error, lease.key, "LOCK.REFRESH", await this.#host.describe(lease.key));
    }
    if (!held) lease.foundGone();
    lease.markReleased();
  }
}
