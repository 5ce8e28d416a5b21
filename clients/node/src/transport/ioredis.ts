// The ioredis adapter: `Redis` (standalone, and Sentinel through `new Redis({sentinels,
// name})`) and `Cluster`. ioredis does not know where module commands keep their key
// (its cluster sends them to a random node), so LOCK.* commands go to the node that owns
// the key by the cluster's own slot map, MOVED/ASK/TRYAGAIN followed here. Links are
// `duplicate()`s of a node's connection without `commandTimeout`/`socketTimeout` and
// without re-sending in-flight commands (a re-sent wait is this package's decision: same
// token, for the time left).
import type { Arg } from "../protocol.js";
import { keySlot } from "../slot.js";
import { type Link, ServerReply, type Transport, routed } from "./types.js";

type Replies = Array<[Error | null, unknown]>;

export interface IoPipelineLike {
  call(command: string, ...args: Arg[]): IoPipelineLike;
  exec(): Promise<Replies | null>;
}

export interface IoRedisLike {
  call(command: string, args: Arg[]): Promise<unknown>;
  duplicate(override?: Record<string, unknown>): IoRedisLike;
  pipeline(): IoPipelineLike;
  connect(): Promise<void>;
  disconnect(reconnect?: boolean): void;
  on(event: "error", listener: (error: unknown) => void): unknown;
  readonly status: string;
  readonly options: { host?: string; port?: number; name?: string; sentinels?: unknown };
}

export interface IoClusterLike {
  readonly isCluster: true;
  readonly slots: string[][];
  nodes(role?: "all" | "master" | "slave"): IoRedisLike[];
  call(command: string, args: Arg[]): Promise<unknown>;
  refreshSlotsCache(callback?: (error?: Error) => void): void;
}

export function isIoRedis(client: object): client is IoRedisLike {
  const candidate = client as Partial<IoRedisLike>;
  return (
    typeof candidate.call === "function" &&
    typeof candidate.duplicate === "function" &&
    typeof candidate.pipeline === "function" &&
    typeof candidate.status === "string"
  );
}

export function isIoCluster(client: object): client is IoClusterLike {
  const candidate = client as Partial<IoClusterLike>;
  return candidate.isCluster === true && typeof candidate.nodes === "function";
}

/** An ioredis error reply as `ServerReply` (its text only); anything else unchanged. */
function plain(error: unknown): unknown {
  if (error instanceof Error && error.name === "ReplyError") return new ServerReply(error.message);
  return error;
}

async function send(client: IoRedisLike, args: Arg[]): Promise<unknown> {
  try {
    return await client.call(String(args[0]), args.slice(1));
  } catch (error) {
    throw plain(error);
  }
}

async function batch(client: IoRedisLike, commands: Arg[][]): Promise<unknown[]> {
  const pipeline = client.pipeline();
  for (const args of commands) pipeline.call(String(args[0]), ...args.slice(1));
  const replies = (await pipeline.exec()) ?? [];
  return replies.map(([error, reply]) => {
    if (error === null) return reply;
    const converted = plain(error);
    if (converted instanceof ServerReply) return converted;
    throw converted;
  });
}

// Options of a link, over the application's own.
const LINK_OPTIONS: Record<string, unknown> = {
  commandTimeout: undefined,
  socketTimeout: undefined,
  blockingTimeout: undefined,
  autoResendUnfulfilledCommands: false,
  enableAutoPipelining: false,
  maxRetriesPerRequest: 1,
  enableOfflineQueue: true,
};

function link(from: IoRedisLike, override: Record<string, unknown> = {}): Link {
  // Connected on first use (ioredis queues commands until then): `close()` works at
  // any moment, also while connecting.
  const own = from.duplicate({ ...LINK_OPTIONS, ...override, lazyConnect: false });
  // Its failures reach the commands sent on it; unheard, ioredis would log each one.
  own.on("error", () => undefined);
  return {
    send: (args) => send(own, args),
    batch: (commands) => batch(own, commands),
    close: () => own.disconnect(),
  };
}

function address(client: IoRedisLike): string {
  return `${client.options.host ?? "localhost"}:${client.options.port ?? 6379}`;
}

export function ioRedisTransport(client: IoRedisLike): Transport {
  const sentinel = client.options.sentinels !== undefined && client.options.sentinels !== null;
  return {
    kind: sentinel ? "ioredis (Sentinel)" : "ioredis",
    cluster: false,
    nodeOf: () => Promise.resolve(""),
    call: (_key, args) => send(client, args),
    callNode: (_node, args) => send(client, args),
    primaries: () => Promise.resolve([""]),
    open: () => Promise.resolve(link(client)),
    refreshRouting: () => undefined,
    describe: () => (sentinel ? `the master ${client.options.name ?? ""} of its Sentinels` : address(client)),
  };
}

export function ioClusterTransport(cluster: IoClusterLike): Transport {
  async function ready(): Promise<void> {
    if (cluster.slots.length === 0 || cluster.nodes("master").length === 0) {
      // Queued until the cluster is connected and its slot map read.
      await cluster.call("PING", []);
    }
  }

  // A node connection the package's own connections are made like (duplicate()): kept,
  // since while the cluster reconnects (its connections killed) it lists no node.
  let template: IoRedisLike | undefined;

  function instance(node: string): IoRedisLike | undefined {
    const all = cluster.nodes("all");
    template = all[0] ?? template;
    return all.find((candidate) => address(candidate) === node);
  }

  async function onNode(node: string, asking: boolean, args: Arg[]): Promise<unknown> {
    const target = instance(node);
    if (target === undefined) {
      throw new ServerReply(`TRYAGAIN node ${node} is not connected yet`);
    }
    if (!asking) return send(target, args);
    const [, reply] = await batch(target, [["ASKING"], args]);
    if (reply instanceof ServerReply) throw reply;
    return reply;
  }

  const refresh = (): void => cluster.refreshSlotsCache(() => undefined);

  async function nodeOf(key: string): Promise<string> {
    await ready();
    const owner = cluster.slots[keySlot(key)]?.[0];
    if (owner === undefined) throw new Error(`no node serves the slot of ${JSON.stringify(key)}`);
    return owner;
  }

  return {
    kind: "ioredis (Cluster)",
    cluster: true,
    nodeOf,
    async call(key, args) {
      return routed(await nodeOf(key), (node, asking) => onNode(node, asking, args), refresh);
    },
    async callNode(node, args) {
      await ready();
      return onNode(node, false, args);
    },
    async primaries() {
      await ready();
      return cluster.nodes("master").map(address);
    },
    async open(node) {
      await ready();
      const from = instance(node) ?? template;
      if (from === undefined) throw new Error("the cluster has no node");
      const [host, port] = [node.slice(0, node.lastIndexOf(":")), Number(node.slice(node.lastIndexOf(":") + 1))];
      return link(from, { host, port, readOnly: false });
    },
    refreshRouting: refresh,
    describe: (node) => node,
  };
}
