"""Type aliases for the redis-py clients the package accepts. Only imported for type
checking at runtime-free cost: redis-py's cluster modules stay unimported until used."""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    import redis
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.cluster

    SyncClient = Union[redis.Redis, redis.cluster.RedisCluster]
    AsyncClient = Union[redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster]
