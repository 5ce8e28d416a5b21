// The node-redis adapter (v5 and later): `createClient`, `createCluster` and
// `createSentinel` (node-redis 6 and later: v5's has no `duplicate()`). The cluster
// client routes by the key given with `sendCommand` (module commands are unknown to it,
// so the key is passed by hand) and follows MOVED and ASK itself; TRYAGAIN, which it hands to the application, is retried here. Links are
// `duplicate()`s without `socketTimeout` or command timeout.
import type { Arg } from "../protocol.js";
import { keySlot } from "../slot.js";
import { type Link, ServerReply, type Transport, routed } from "./types.js";

type Args = Array<string | Buffer>;

export interface NodeRedisClientLike {
  sendCommand(args: Args): Promise<unknown>;
  duplicate(overrides?: Record<string, unknown>): NodeRedisClientLike;
  connect(): Promise<unknown>;
  destroy?(): void;
  disconnect?(): Promise<void>;
  readonly options?: { socket?: Record<string, unknown>; commandOptions?: Record<string, unknown> };
}

export interface NodeRedisShard {
  readonly host: string;
  readonly port: number;
}

export interface NodeRedisClusterLike {
  sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: Args): Promise<unknown>;
  getSlotMaster(slot: number): NodeRedisShard;
  readonly masters: NodeRedisShard[];
  nodeClient(node: NodeRedisShard): Promise<NodeRedisClientLike> | NodeRedisClientLike;
}

export interface NodeRedisSentinelLike {
  sendCommand(isReadonly: boolean | undefined, args: Args): Promise<unknown>;
  duplicate(overrides?: Record<string, unknown>): NodeRedisSentinelLike;
  connect(): Promise<unknown>;
  destroy(): Promise<void> | void;
  getMasterNode(): NodeRedisShard | undefined;
  acquire(): Promise<unknown>;
}

function hasFunctions(client: object, names: string[]): boolean {
  const record = client as Record<string, unknown>;
  return names.every((name) => typeof record[name] === "function");
}

export function isNodeRedisCluster(client: object): client is NodeRedisClusterLike {
  return hasFunctions(client, ["sendCommand", "getSlotMaster", "nodeClient"]);
}

export function isNodeRedisSentinel(client: object): client is NodeRedisSentinelLike {
  return hasFunctions(client, ["sendCommand", "getMasterNode", "acquire", "duplicate"]);
}

/** node-redis 5's Sentinel client: no `duplicate()`. */
export function isOldNodeRedisSentinel(client: object): boolean {
  return hasFunctions(client, ["sendCommand", "getMasterNode", "acquire"]) && !isNodeRedisSentinel(client);
}

export function isNodeRedisClient(client: object): client is NodeRedisClientLike {
  return hasFunctions(client, ["sendCommand", "duplicate", "connect"]);
}

function strings(args: Arg[]): Args {
  return args.map((arg) => (typeof arg === "number" ? String(arg) : arg));
}

function isErrorReply(error: unknown): boolean {
  for (let proto: unknown = error; proto !== null && proto !== undefined; proto = Object.getPrototypeOf(proto)) {
    if ((proto as { constructor?: { name?: string } }).constructor?.name === "ErrorReply") return true;
  }
  return false;
}

/** A node-redis error reply as `ServerReply` (its text only); anything else unchanged. */
function plain(error: unknown): unknown {
  return isErrorReply(error) ? new ServerReply((error as Error).message) : error;
}

async function guarded(sending: Promise<unknown>): Promise<unknown> {
  try {
    return await sending;
  } catch (error) {
    throw plain(error);
  }
}

/** Commands issued in one tick go out in one write (node-redis writes its queue once
 * per tick): one batch, each reply or its `ServerReply`. */
async function batch(send: (args: Args) => Promise<unknown>, commands: Arg[][]): Promise<unknown[]> {
  const settled = await Promise.allSettled(commands.map((args) => send(strings(args))));
  return settled.map((result) => {
    if (result.status === "fulfilled") return result.value;
    const converted = plain(result.reason);
    if (converted instanceof ServerReply) return converted;
    throw converted;
  });
}

function withoutTimeouts(client: NodeRedisClientLike, socket: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    socket: { ...(client.options?.socket ?? {}), ...socket, socketTimeout: undefined },
    // Pings would queue behind a wait; a link's socket has no timeout to keep away.
    pingInterval: undefined,
    commandOptions: { ...(client.options?.commandOptions ?? {}), timeout: undefined, rejectInFlight: false },
  };
}

/** A link over `own`, connecting in the background: commands wait for the
 * connection, and `close()` works at any moment, also while connecting. */
function clientLink(own: NodeRedisClientLike): Link {
  // A failed connection would otherwise be an unhandled 'error' event.
  (own as unknown as { on?: (event: string, listener: (error: unknown) => void) => void }).on?.(
    "error",
    () => undefined,
  );
  const connected = own.connect();
  connected.catch(() => undefined);
  return {
    send: async (args) => {
      await connected;
      return guarded(own.sendCommand(strings(args)));
    },
    batch: async (commands) => {
      await connected;
      return batch((args) => own.sendCommand(args), commands);
    },
    close: () => {
      if (own.destroy !== undefined) own.destroy();
      else void own.disconnect?.().catch(() => undefined);
    },
  };
}

function address(shard: NodeRedisShard): string {
  return `${shard.host}:${shard.port}`;
}

export function nodeRedisTransport(client: NodeRedisClientLike): Transport {
  const socket = client.options?.socket ?? {};
  const where = `${String(socket.host ?? "localhost")}:${String(socket.port ?? 6379)}`;
  return {
    kind: "node-redis",
    cluster: false,
    nodeOf: () => Promise.resolve(""),
    call: (_key, args) => guarded(client.sendCommand(strings(args))),
    callNode: (_node, args) => guarded(client.sendCommand(strings(args))),
    primaries: () => Promise.resolve([""]),
    open: () => Promise.resolve(clientLink(client.duplicate(withoutTimeouts(client)))),
    refreshRouting: () => undefined,
    describe: () => where,
  };
}

export function nodeRedisClusterTransport(cluster: NodeRedisClusterLike): Transport {
  function shard(node: string): NodeRedisShard {
    const found = cluster.masters.find((master) => address(master) === node);
    if (found === undefined) throw new ServerReply(`TRYAGAIN node ${node} is not known yet`);
    return found;
  }

  async function onNode(node: string, asking: boolean, args: Arg[]): Promise<unknown> {
    const client = await cluster.nodeClient(shard(node));
    if (!asking) return guarded(client.sendCommand(strings(args)));
    const [, reply] = await batch((sent) => client.sendCommand(sent), [["ASKING"], args]);
    if (reply instanceof ServerReply) throw reply;
    return reply;
  }

  return {
    kind: "node-redis (Cluster)",
    cluster: true,
    nodeOf: (key) => Promise.resolve(address(cluster.getSlotMaster(keySlot(key)))),
    // node-redis routes by the key given and follows MOVED/ASK; TRYAGAIN is ours.
    call: (key, args) =>
      routed("", () => guarded(cluster.sendCommand(key, false, strings(args))), () => undefined),
    callNode: (node, args) => routed(node, (target, asking) => onNode(target, asking, args), () => undefined),
    primaries: () => Promise.resolve(cluster.masters.map(address)),
    async open(node) {
      const master = cluster.masters.find((candidate) => address(candidate) === node);
      const from = await cluster.nodeClient(master ?? shard(node));
      return clientLink(from.duplicate(withoutTimeouts(from)));
    },
    refreshRouting: () => undefined,
    describe: (node) => node,
  };
}

export function nodeRedisSentinelTransport(sentinel: NodeRedisSentinelLike): Transport {
  return {
    kind: "node-redis (Sentinel)",
    cluster: false,
    nodeOf: () => Promise.resolve(""),
    call: (_key, args) => guarded(sentinel.sendCommand(false, strings(args))),
    callNode: (_node, args) => guarded(sentinel.sendCommand(false, strings(args))),
    primaries: () => Promise.resolve([""]),
    open() {
      const own = sentinel.duplicate();
      (own as unknown as { on?: (event: string, listener: (error: unknown) => void) => void }).on?.(
        "error",
        () => undefined,
      );
      const connected = own.connect();
      connected.catch(() => undefined);
      return Promise.resolve({
        send: async (args) => {
          await connected;
          return guarded(own.sendCommand(false, strings(args)));
        },
        batch: async (commands) => {
          await connected;
          return batch((args) => own.sendCommand(false, args), commands);
        },
        close: () => void Promise.resolve(own.destroy()).catch(() => undefined),
      });
    },
    refreshRouting: () => undefined,
    describe: () => {
      const master = sentinel.getMasterNode();
      return master === undefined ? "the Sentinels' master" : address(master);
    },
  };
}
