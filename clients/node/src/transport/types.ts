// The one interface the locks use to reach the servers, whatever the client library
// (node-redis or ioredis) and topology (standalone, Sentinel, Cluster). Adapters
// (ioredis.ts, node-redis.ts) implement it; nothing above this folder knows which
// library it talks to.
import type { Arg } from "../protocol.js";

/** A server's error reply, as the adapters hand it up: its text only (the client's
 * own error objects carry the command's arguments, and so the token). */
export class ServerReply extends Error {
  override get name(): string {
    return "ServerReply";
  }
}

/** One connection of this package's own to one server node: for waits (a wait holds
 * its connection for as long as it waits) and for refreshes (never queued behind a
 * wait). No client-side command timeout: a timeout shorter than a wait would leave
 * the wait queued on the server. */
export interface Link {
  /** One command; an error reply rejects with `ServerReply`, a lost connection with
   * the client's error. */
  send(args: Arg[]): Promise<unknown>;
  /** Several commands in one write; each reply, or its `ServerReply`. A lost
   * connection rejects the whole batch. */
  batch(commands: Arg[][]): Promise<unknown[]>;
  /** Closes the connection at once (the server drops its waits). */
  close(): void;
}

export interface Transport {
  /** "node-redis", "ioredis", with the topology. */
  readonly kind: string;
  /** Whether sessions must be kept on every primary (a cluster). */
  readonly cluster: boolean;
  /** The node that owns `key` ("host:port"; "" for a standalone or Sentinel client). */
  nodeOf(key: string): Promise<string>;
  /** One command on the application's client, sent to the node that owns `key`;
   * MOVED, ASK and TRYAGAIN are followed here. */
  call(key: string, args: Arg[]): Promise<unknown>;
  /** One command on the application's client to `node` (keyless session commands). */
  callNode(node: string, args: Arg[]): Promise<unknown>;
  /** Every primary ("host:port"; one "" for a standalone or Sentinel client). */
  primaries(): Promise<string[]>;
  /** A new connection to `node` (as `nodeOf` names it), made like the application's
   * client (address, auth, TLS, database, Sentinel) but without its timeouts. */
  open(node: string): Promise<Link>;
  /** Makes the client re-read the cluster's slot map (after a MOVED). */
  refreshRouting(): void;
  /** Where `node` is, for messages. */
  describe(node: string): string;
}

/** A MOVED or ASK redirection's target, from the error text ("MOVED 3999 host:port"). */
export function redirection(text: string): { ask: boolean; node: string } | undefined {
  const match = /^(MOVED|ASK) \d+ (\S+)$/.exec(text);
  if (match?.[1] === undefined || match[2] === undefined) return undefined;
  return { ask: match[1] === "ASK", node: match[2] };
}

export function isTryAgain(error: unknown): boolean {
  return error instanceof ServerReply && error.message.startsWith("TRYAGAIN");
}

// As many redirections as the cluster clients follow; TRYAGAIN (a slot being moved
// while a multi-key command's keys are split) is asked again after a pause.
export const MAX_REDIRECTS = 5;
export const TRYAGAIN_PAUSE_MS = 50;
export const MAX_TRYAGAIN = 100;

export function pause(ms: number): Promise<void> {
  return new Promise((done) => setTimeout(done, ms));
}

/** Runs `send(node, asking)` against `node`, following MOVED/ASK to the named node and
 * retrying TRYAGAIN; `refresh` is told after a MOVED. */
export async function routed<T>(
  node: string,
  send: (node: string, asking: boolean) => Promise<T>,
  refresh: () => void,
): Promise<T> {
  let target = node;
  let asking = false;
  let redirects = 0;
  let tries = 0;
  for (;;) {
    try {
      return await send(target, asking);
    } catch (error) {
      if (isTryAgain(error) && tries++ < MAX_TRYAGAIN) {
        await pause(TRYAGAIN_PAUSE_MS);
        continue;
      }
      const moved = error instanceof ServerReply ? redirection(error.message) : undefined;
      if (moved === undefined || redirects++ >= MAX_REDIRECTS) throw error;
      if (!moved.ask) refresh();
      target = moved.node;
      asking = moved.ask;
    }
  }
}
