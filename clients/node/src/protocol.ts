// The fencelock wire protocol: argument lists of the LOCK.* commands, the parsing of
// their replies, tokens and durations. Pure functions, no I/O.
import { randomBytes } from "node:crypto";

export type Arg = string | number | Buffer;
export type Key = string;

/** 128 bits from the OS CSPRNG as 32 hex characters, the shape of a server token.
 * Sent with every acquire so that a re-sent acquire is the module's idempotent
 * re-acquire, not a second, orphaned grant. */
export function newToken(): string {
  return randomBytes(16).toString("hex");
}

/** A session's name: as random, and as secret, as a token. */
export const newSessionName = newToken;

/** A duration in whole milliseconds (at least 1), for ttl-ms, BLOCK and LOCKDELAY. */
export function wholeMs(ms: number, what: string): number {
  if (typeof ms !== "number" || Number.isNaN(ms) || ms <= 0 || !Number.isFinite(ms)) {
    throw new RangeError(`${what} must be a positive number of milliseconds, not ${String(ms)}`);
  }
  return Math.max(1, Math.ceil(ms));
}

/** The BLOCK argument for `leftMs` of a wait: undefined (one try) when nothing is
 * left, rounded up so it never ends early; 0 (the server's "forever") for Infinity. */
export function blockMs(leftMs: number): number | undefined {
  if (leftMs === Infinity) return 0;
  if (leftMs <= 0) return undefined;
  return Math.max(1, Math.ceil(leftMs));
}

export interface AcquireRequest {
  keys: readonly Key[];
  /** One key: LOCK.ACQUIRE; several: LOCK.ACQUIREALL. */
  all: boolean;
  ttlMs: number;
  token: string;
  session?: string | undefined;
  lockDelayMs?: number | undefined;
  value?: string | Buffer | undefined;
}

export function acquireArgs(request: AcquireRequest, block: number | undefined): Arg[] {
  const args: Arg[] = request.all
    ? ["LOCK.ACQUIREALL", request.keys.length, ...request.keys]
    : ["LOCK.ACQUIRE", request.keys[0] ?? ""];
  args.push(request.ttlMs, "TOKEN", request.token);
  if (request.session !== undefined) args.push("SESSION", request.session);
  if (block !== undefined) args.push("BLOCK", block);
  if (request.lockDelayMs !== undefined) args.push("LOCKDELAY", request.lockDelayMs);
  if (request.value !== undefined) args.push("VALUE", request.value);
  return args;
}

export function toBigInt(reply: unknown): bigint {
  if (typeof reply === "bigint") return reply;
  if (typeof reply === "number") return BigInt(reply);
  if (typeof reply === "string") return BigInt(reply);
  if (Buffer.isBuffer(reply)) return BigInt(reply.toString());
  throw new TypeError(`expected an integer reply, got ${typeof reply}`);
}

export function toNumber(reply: unknown): number {
  return Number(toBigInt(reply));
}

/** The fences of a grant: `[token, fence]` (ACQUIRE) or `[token, [fence, ...]]`
 * (ACQUIREALL); null when busy. */
export function parseGrant(reply: unknown): bigint[] | null {
  if (reply === null || reply === undefined) return null;
  if (!Array.isArray(reply) || reply.length !== 2) {
    throw new TypeError("unexpected reply to an acquire");
  }
  const fences: unknown = reply[1];
  return Array.isArray(fences) ? fences.map(toBigInt) : [toBigInt(fences)];
}

/** REFRESH and RELEASE answer 1 when the token held the lock, else 0. */
export function parseFlag(reply: unknown): boolean {
  return reply !== null && reply !== undefined && toNumber(reply) === 1;
}

/** LOCK.HELD's `[[key, mode, fence, pttl], ...]` as the set of "key fence" strings. */
export function parseHeld(reply: unknown): Set<string> {
  const held = new Set<string>();
  if (!Array.isArray(reply)) return held;
  for (const entry of reply) {
    if (Array.isArray(entry) && entry.length >= 3) {
      held.add(`${String(entry[0])} ${toBigInt(entry[2]).toString()}`);
    }
  }
  return held;
}

const STALE = /^STALE .*\((\d+)\)\s*$/;
const DEADLOCK = /^DEADLOCK waiting for ([\s\S]*) would wait for ([\s\S]*) held by this owner\s*$/;

/** The code of an error reply: its first word. */
export function errorCode(text: string): string {
  const space = text.indexOf(" ");
  return space < 0 ? text : text.slice(0, space);
}

export function staleHighest(text: string): bigint | undefined {
  const match = STALE.exec(text);
  return match?.[1] === undefined ? undefined : BigInt(match[1]);
}

export function deadlockKeys(text: string): { key: string; held: string } | undefined {
  if (errorCode(text) !== "DEADLOCK") return undefined;
  const match = DEADLOCK.exec(text);
  return { key: match?.[1] ?? "", held: match?.[2] ?? "" };
}

/** How a server without the module answers a LOCK.* command. */
export function isUnknownCommand(text: string): boolean {
  return /^(ERR )?unknown command/i.test(text);
}
