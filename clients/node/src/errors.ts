// The errors of the package. Each names the lock's key and never its token (a token
// in a log line would let a reader release or refresh someone's lock). Every way a
// lease can be lost reaches the application as one type, LockLost, whatever failed on
// the way (kept as its `cause`).

export type LostReason = "deadline" | "gone" | "not-held" | "closed";

const MEANING: Record<LostReason, string> = {
  deadline:
    "its deadline passed with no refresh confirmed, so its lease may have ended on the server",
  gone:
    "the server no longer had it for this token before its lease could have ended: it was" +
    " released or deleted by someone else (a DEL, a FLUSHDB), or lost in a server restart" +
    " or failover",
  "not-held":
    "the server no longer has it for this token: its lease ended, or it was released or" +
    " deleted by someone else",
  closed:
    "its lock manager was closed while it was held, which released every lock of its session",
};

/** The base of every error this package throws. */
export class FencelockError extends Error {
  override get name(): string {
    return this.constructor.name;
  }
}

/** The lock was busy for the whole wait (or at once, with `wait: 0`). */
export class LockNotAcquired extends FencelockError {
  constructor(
    readonly key: string,
    message = `lock ${JSON.stringify(key)} is held by another holder`,
  ) {
    super(message);
  }
}

/** The lease was lost while the application believed it held the lock; `reason` says
 * how: `"deadline"` (no refresh confirmed in time), `"gone"` (the server no longer had
 * it before its lease could have run out), `"not-held"` (the server no longer had it),
 * `"closed"` (its `Locks` was closed, ending its session). */
export class LockLost extends FencelockError {
  constructor(
    readonly key: string,
    readonly reason: LostReason = "not-held",
    options?: { cause?: unknown },
  ) {
    super(`lock ${JSON.stringify(key)} was lost: ${MEANING[reason]}`, options);
  }
}

/** `LOCK.FENCED` refused a command: its fence is below the highest the mark admitted,
 * so a newer holder has written since; nothing ran. */
export class StaleFence extends FencelockError {
  constructor(
    readonly key: string,
    readonly fence: bigint,
    readonly highest: bigint,
  ) {
    super(`mark ${JSON.stringify(key)}: fence ${fence} is below the highest admitted (${highest})`);
  }
}

/** `LOCK.GUARD` refused a command: this lease's token does not hold the lock any more,
 * and nothing ran. A loss of the lease like any other (a `LockLost`, reason `"gone"`
 * when its lease could not have run out yet, else `"not-held"`). */
export class NotHeld extends LockLost {
  constructor(key: string, reason: LostReason = "not-held") {
    super(key, reason);
    this.message = `lock ${JSON.stringify(key)}: this token does not hold the lock, so the guarded command did not run (${MEANING[reason]})`;
  }
}

/** The server refused to let an acquire wait (`-DEADLOCK`): waiting would close a cycle
 * of owners waiting for each other. Nothing was queued; `held` is the key held by this
 * owner where the cycle closes. Release what you hold, or take all locks at once
 * (`lockAll`). */
export class Deadlock extends FencelockError {
  constructor(
    readonly key: string,
    readonly held: string,
    message: string,
  ) {
    super(message);
  }
}

/** The token already holds the lock in another session (`-WRONGSESSION`); nothing
 * changed. Only a chosen token can meet it. */
export class WrongSession extends FencelockError {
  constructor(
    readonly key: string,
    message: string,
  ) {
    super(message);
  }
}

/** The lock is held in another mode (`-WRONGMODE`: shared, a semaphore, exclusive). */
export class WrongMode extends FencelockError {
  constructor(
    readonly key: string,
    message: string,
  ) {
    super(message);
  }
}

/** The server answered a LOCK.* command with "unknown command": the module is not
 * loaded there. (The server's own text, which repeats the arguments and so the token,
 * is not kept.) */
export class ModuleNotLoaded extends FencelockError {
  constructor(
    readonly key: string,
    readonly command: string,
    readonly server: string,
  ) {
    super(
      `${command} is an unknown command on ${server}: the fencelock module is not loaded` +
        " there. Load it at start: `loadmodule /path/to/fencelock.so` in redis.conf, or" +
        " `--loadmodule /path/to/fencelock.so` on the command line.",
    );
  }
}

/** The server could not be reached, or did not answer, after retries. Anything the
 * acquire may have been granted was released (best effort); `cause` is the client's
 * error. */
export class ServerUnavailable extends FencelockError {
  constructor(
    readonly key: string,
    readonly server: string,
    options?: { cause?: unknown },
  ) {
    super(
      // A command of no one lock (a session's) has no key to name.
      (key === "" ? `no answer from ${server}` : `lock ${JSON.stringify(key)}: no answer from ${server}`) +
        (options?.cause instanceof Error ? `: ${options.cause.message}` : ""),
      options,
    );
  }
}

/** Any other error reply of the server to a LOCK.* command (`code` is its first word,
 * as `ERR` or `WRONGTYPE`; the message is the server's). */
export class CommandError extends FencelockError {
  readonly code: string;
  constructor(
    readonly key: string,
    message: string,
  ) {
    super(message);
    const space = message.indexOf(" ");
    this.code = space < 0 ? message : message.slice(0, space);
  }
}
