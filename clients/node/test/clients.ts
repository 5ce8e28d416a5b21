// The clients the tests run the package with: node-redis and ioredis, standalone and
// cluster, each made as an application would make it, and closed by `close()`.
import { Cluster as IoCluster, Redis as IoRedis, type RedisOptions } from "ioredis";
import { after } from "node:test";
import { createClient, createCluster, createSentinel } from "redis";
import { Locks, type LocksOptions } from "../src/index.js";
import type { Cluster, Sentinel, Server } from "./harness/index.js";

export type Library = "node-redis" | "ioredis";
export const LIBRARIES: readonly Library[] = ["node-redis", "ioredis"];

export interface Made {
  readonly client: unknown;
  close(): Promise<void>;
}

export interface ClientOptions {
  /** ioredis `commandTimeout` / node-redis `socketTimeout` (with pings a third of it
   * apart), in ms. */
  timeout?: number;
  /** ioredis only: more options. */
  ioredis?: Partial<RedisOptions>;
  port?: number;
  /** node-redis: no pings with the `timeout` (an application that sets only
   * `socketTimeout`: its idle client is closed for good once it passes). */
  noPings?: boolean;
}

export async function standalone(library: Library, server: Server, options: ClientOptions = {}): Promise<Made> {
  const port = options.port ?? server.port;
  if (library === "ioredis") {
    const client = new IoRedis({
      host: "127.0.0.1",
      port,
      ...(options.timeout === undefined ? {} : { commandTimeout: options.timeout }),
      ...options.ioredis,
    });
    client.on("error", () => undefined);
    return { client, close: async () => void client.disconnect() };
  }
  const client = createClient({
    socket: {
      host: "127.0.0.1",
      port,
      ...(options.timeout === undefined ? {} : { socketTimeout: options.timeout }),
    },
    // node-redis closes a client whose socket stays idle past socketTimeout: pings keep
    // an idle one open, as an application with a socketTimeout has to.
    ...(options.timeout === undefined || options.noPings === true
      ? {}
      : { pingInterval: Math.floor(options.timeout / 3) }),
  });
  client.on("error", () => undefined);
  await client.connect();
  return { client, close: async () => client.destroy() };
}

export async function clustered(library: Library, cluster: Cluster, options: ClientOptions = {}): Promise<Made> {
  if (library === "ioredis") {
    const client = new IoCluster(
      cluster.startup.map(({ host, port }) => ({ host, port })),
      options.timeout === undefined ? {} : { redisOptions: { commandTimeout: options.timeout } },
    );
    client.on("error", () => undefined);
    return { client, close: async () => void client.disconnect() };
  }
  const client = createCluster({
    rootNodes: cluster.startup.map(({ host, port }) => ({ socket: { host, port } })),
    ...(options.timeout === undefined
      ? {}
      : {
          defaults: {
            socket: { socketTimeout: options.timeout },
            ...(options.noPings === true ? {} : { pingInterval: Math.floor(options.timeout / 3) }),
          },
        }),
  });
  client.on("error", () => undefined);
  await client.connect();
  return { client, close: async () => client.destroy() };
}

/** A lock manager on its own client; `close()` closes both. */
export interface Manager {
  readonly locks: Locks;
  readonly made: Made;
  close(): Promise<void>;
}

export async function managerOn(
  library: Library,
  server: Server,
  options: ClientOptions & { locks?: LocksOptions } = {},
): Promise<Manager> {
  const made = await standalone(library, server, options);
  const locks = new Locks(made.client, options.locks);
  return {
    locks,
    made,
    close: async () => {
      await locks.close().catch(() => undefined);
      await made.close();
    },
  };
}

/** The managers one group of tests makes with `managerOn` on `server()` (read when a
 * manager is made: the server starts in the file's `before`): `manager()` makes one,
 * `closeAll()` closes every one made so far, and runs after the group by itself. */
export function managersOn(
  library: Library,
  server: () => Server,
): {
  manager(options?: Parameters<typeof managerOn>[2]): Promise<Manager>;
  closeAll(): Promise<void>;
} {
  const managers: Manager[] = [];
  async function closeAll(): Promise<void> {
    for (const made of managers.splice(0)) await made.close();
  }
  after(closeAll);
  return {
    async manager(options = {}) {
      const made = await managerOn(library, server(), options);
      managers.push(made);
      return made;
    },
    closeAll,
  };
}

export async function throughSentinel(library: Library, sentinel: Sentinel): Promise<Made> {
  if (library === "ioredis") {
    const client = new IoRedis({ sentinels: [{ host: sentinel.host, port: sentinel.port }], name: sentinel.name });
    client.on("error", () => undefined);
    return { client, close: async () => void client.disconnect() };
  }
  const client = createSentinel({
    name: sentinel.name,
    sentinelRootNodes: [{ host: sentinel.host, port: sentinel.port }],
  });
  client.on("error", () => undefined);
  await client.connect();
  return { client, close: async () => void (await client.destroy()) };
}
