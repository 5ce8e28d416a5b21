// Picks the adapter for an application's client: node-redis (client, cluster,
// Sentinel) or ioredis (Redis, Cluster), told apart by their methods.
import { ioClusterTransport, ioRedisTransport, isIoCluster, isIoRedis } from "./ioredis.js";
import {
  isNodeRedisClient,
  isNodeRedisCluster,
  isNodeRedisSentinel,
  isOldNodeRedisSentinel,
  nodeRedisClusterTransport,
  nodeRedisSentinelTransport,
  nodeRedisTransport,
} from "./node-redis.js";
import type { Transport } from "./types.js";

export type { Link, Transport } from "./types.js";
export { ServerReply } from "./types.js";

export function transportOf(client: unknown): Transport {
  if (typeof client === "object" && client !== null) {
    if (isIoCluster(client)) return ioClusterTransport(client);
    if (isIoRedis(client)) return ioRedisTransport(client);
    if (isNodeRedisCluster(client)) return nodeRedisClusterTransport(client);
    if (isNodeRedisSentinel(client)) return nodeRedisSentinelTransport(client);
    if (isOldNodeRedisSentinel(client)) {
      throw new TypeError(
        "a node-redis Sentinel client needs node-redis 6 or later here (its duplicate() makes" +
          " the connections waits run on); with node-redis 5, use ioredis's Sentinel support or" +
          " a client of the current master",
      );
    }
    if (isNodeRedisClient(client)) return nodeRedisTransport(client);
  }
  throw new TypeError(
    "Locks needs a node-redis client (createClient, createCluster, createSentinel) or an" +
      " ioredis client (new Redis(...), new Cluster(...))",
  );
}
