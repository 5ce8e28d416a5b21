// A held lock: its key, token and fence, and the deadline before which the client may
// count on holding it (ttl after the send of the acquire or of the last confirmed
// refresh, on `performance.now()`'s clock). The moment it is lost — the deadline passed
// with no refresh confirmed, a refresh or keepalive found it gone, a guard refused, the
// manager closed its session — `lost` is set and `signal` aborts with a `LockLost`.
import { now, timerDelay } from "./clock.js";
import { LockLost, NotHeld, StaleFence, type LostReason } from "./errors.js";
import { type Arg, staleHighest } from "./protocol.js";
import { fromReply } from "./replies.js";
import { ServerReply } from "./transport/index.js";

/** What a lease needs from its manager. */
export interface LeaseHost {
  call(key: string, args: Arg[]): Promise<unknown>;
  describe(key: string): Promise<string>;
}

function commandOf(command: ReadonlyArray<Arg | readonly Arg[]>): Arg[] {
  const only = command[0];
  const args = (command.length === 1 && Array.isArray(only) ? only : command) as Arg[];
  if (args.length === 0) throw new TypeError("a guarded or fenced call needs a command to run");
  return [...args];
}

/** Where a lease sent at `sentAt` with `ttl` ends for the client: 1 ms short of the send
 * plus the ttl. The server starts a lease at the whole millisecond it runs the command
 * in, rounded down, so its lease can end up to 1 ms before the send plus the ttl. */
function leaseEnd(sentAt: number, ttl: number): number {
  return sentAt + ttl - 1;
}

export class Lease {
  /** The lock's name, as given (without the manager's prefix). */
  readonly name: string;
  /** The lock's key on the server (the manager's prefix and the name). */
  readonly key: string;
  /** This holding's token: random per acquire. Keep it as secret as a password. */
  readonly token: string;
  /** The fencing token: strictly greater than that of every earlier holder of the key.
   * Pass it to the resource (`fenced`) so it can refuse a stale holder's writes. */
  readonly fence: bigint;
  /** The lease length asked for, in ms. */
  readonly ttl: number;
  /** The session (on the server) this holding belongs to, if any. */
  readonly session: string | undefined;
  /** When the acquire that was granted was sent (`performance.now()` ms). */
  readonly acquiredAt: number;

  #deadline: number;
  #timer: NodeJS.Timeout | undefined;
  readonly #controller = new AbortController();
  #lostError: LockLost | undefined;
  #released = false;
  readonly #host: LeaseHost;

  /** @internal Made by `Locks`. */
  constructor(
    host: LeaseHost,
    fields: {
      name: string;
      key: string;
      token: string;
      fence: bigint;
      ttl: number;
      session: string | undefined;
      sentAt: number;
    },
  ) {
    this.#host = host;
    this.name = fields.name;
    this.key = fields.key;
    this.token = fields.token;
    this.fence = fields.fence;
    this.ttl = fields.ttl;
    this.session = fields.session;
    this.acquiredAt = fields.sentAt;
    this.#deadline = leaseEnd(fields.sentAt, fields.ttl);
    this.#arm();
  }

  /** The time (on `performance.now()`'s clock, in ms) until which the lock is surely
   * held: ttl less 1 ms after the send of the acquire, or of the last refresh (or session
   * keepalive) the server confirmed. The server's lease ends no earlier. */
  get deadline(): number {
    return this.#deadline;
  }

  /** Aborts, with a `LockLost` as its reason, the moment the lease is lost: hand it to
   * `fetch`, streams, timers, so the work under the lock stops with the lock. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Whether the lease was lost (see `lostReason`). Checks the deadline itself: after
   * the process was frozen (a long synchronous step, a paused VM) the deadline timer has
   * not run yet, and the lease would otherwise read as held until it does. */
  get lost(): boolean {
    this.#checkDeadline();
    return this.#lostError !== undefined;
  }

  get lostReason(): LostReason | undefined {
    this.#checkDeadline();
    return this.#lostError?.reason;
  }

  /** Whether it was released (by `Locks.release` or at the end of `Locks.lock`). */
  get released(): boolean {
    return this.#released;
  }

  /** Throws `LockLost` unless the lease still holds: not lost, and its deadline not
   * passed. Call it before an action that must not happen without the lock. */
  ensureHeld(): void {
    this.#checkDeadline();
    if (this.#lostError !== undefined) throw this.#lostError;
    if (this.#released) throw new LockLost(this.key, "not-held");
  }

  /** Runs `command` (`"SET", "{sku:9}:stock", 7`, or one array) only while this lease
   * holds the lock, checked and run in one atomic step on the server (`LOCK.GUARD`);
   * resolves with the command's reply. If the token no longer holds the lock nothing
   * ran: the lease is marked lost and `NotHeld` (a `LockLost`) is thrown. On a cluster,
   * the command's keys must share the lock key's slot (hash tags: `lock:{sku:9}`). */
  async guard(...command: Array<Arg | readonly Arg[]>): Promise<unknown> {
    const args = ["LOCK.GUARD", this.key, this.token, ...commandOf(command)];
    try {
      return await this.#host.call(this.key, args);
    } catch (error) {
      if (error instanceof ServerReply && error.message.startsWith("NOTHELD")) {
        const reason = this.#goneReason();
        const notHeld = new NotHeld(this.key, reason);
        if (!this.#released) this.lose(reason, undefined, notHeld);
        throw notHeld;
      }
      throw fromReply(error, this.key, "LOCK.GUARD", await this.#host.describe(this.key));
    }
  }

  /** Runs `command` through the fence mark `mark` (`LOCK.FENCED mark fence ...`): only
   * if this lease's fence is at least the highest the mark has admitted, which it then
   * becomes. A newer holder's write makes this one's refused: `StaleFence`, nothing
   * ran. On a cluster, `mark` and the command's keys must share a slot. */
  async fenced(mark: string, ...command: Array<Arg | readonly Arg[]>): Promise<unknown> {
    const args = ["LOCK.FENCED", mark, this.fence.toString(), ...commandOf(command)];
    try {
      return await this.#host.call(mark, args);
    } catch (error) {
      const highest = error instanceof ServerReply ? staleHighest(error.message) : undefined;
      if (highest !== undefined) throw new StaleFence(mark, this.fence, highest);
      throw fromReply(error, mark, "LOCK.FENCED", await this.#host.describe(mark));
    }
  }

  /** @internal A refresh or keepalive sent at `sentAt` was confirmed. */
  confirm(sentAt: number): void {
    if (this.#lostError !== undefined || this.#released) return;
    const deadline = leaseEnd(sentAt, this.ttl);
    if (deadline > this.#deadline) {
      this.#deadline = deadline;
      this.#arm();
    }
  }

  /** @internal The server no longer has it: "gone" before the deadline, else "not-held". */
  #goneReason(): LostReason {
    return now() < this.#deadline ? "gone" : "not-held";
  }

  /** @internal The server answered that this token no longer holds the lock. */
  foundGone(cause?: unknown): void {
    this.lose(this.#goneReason(), cause);
  }

  /** @internal Marks the lease lost, once, and aborts its signal. */
  lose(reason: LostReason, cause?: unknown, error?: LockLost): void {
    if (this.#lostError !== undefined) return;
    this.#lostError = error ?? new LockLost(this.key, reason, cause === undefined ? undefined : { cause });
    this.#disarm();
    this.#controller.abort(this.#lostError);
  }

  /** @internal The error a holder gets for this lost lease. */
  lostError(): LockLost {
    return this.#lostError ?? new LockLost(this.key, "not-held");
  }

  /** @internal Released (or given up): no more deadline watch. */
  markReleased(): void {
    this.#released = true;
    this.#disarm();
  }

  /** Lost at the deadline, whether or not its timer has run yet. */
  #checkDeadline(): void {
    if (this.#lostError === undefined && !this.#released && now() >= this.#deadline) this.lose("deadline");
  }

  #arm(): void {
    this.#disarm();
    this.#timer = setTimeout(() => {
      if (now() >= this.#deadline) this.lose("deadline");
      else this.#arm();
    }, timerDelay(this.#deadline - now()));
    this.#timer.unref();
  }

  #disarm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
