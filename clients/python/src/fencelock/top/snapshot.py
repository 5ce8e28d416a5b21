"""One frame of ``python -m fencelock top``, read from the servers: per primary, the
hottest locks (``LOCK.TOP``) and the ``INFO fencelock`` figures (waiters, held locks,
sessions, the wait and hold percentiles, the counters to alert on). Reading only; no
terminal, no rendering (``view.py`` draws a frame, ``screen.py`` refreshes it).

A URL of a Redis Cluster node is read as the whole cluster: every primary is asked,
since each keeps the locks of its own slots."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

import redis
import redis.cluster
from redis.exceptions import ResponseError

# How LOCK.TOP orders its entries: by queued waiters, or by how long the current
# holding has lasted.
ORDERS = ("waiters", "held")


@dataclass(frozen=True)
class HotLock:
    """One entry of ``LOCK.TOP``: a key, its queued waiters, how long the longest of
    them has waited and how long the current holding has lasted (ms; None when the
    server says none)."""

    key: str
    waiters: int
    longest_wait_ms: Optional[int]
    held_ms: Optional[int]


@dataclass(frozen=True)
class Percentiles:
    """A latencystats line of ``INFO fencelock`` (``p50=…,p99=…,p99.9=…``), in µs,
    with the count and sum beside it (None where the server has not got them)."""

    p50: Optional[float]
    p99: Optional[float]
    p999: Optional[float]
    count: Optional[int]
    sum_usec: Optional[int]

    @property
    def mean_usec(self) -> Optional[float]:
        if not self.count or self.sum_usec is None:
            return None
        return self.sum_usec / self.count


@dataclass
class Server:
    """What one primary says: its address, its hottest locks and its INFO figures;
    ``problem`` when it could not say (unreachable, no module, an older module
    without ``LOCK.TOP``)."""

    address: str
    locks: list[HotLock] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    problem: Optional[str] = None

    def figure(self, name: str) -> Optional[int]:
        """A counter or gauge of ``INFO fencelock`` by its name without the
        ``fencelock_`` prefix; None when this server does not have it."""
        value = self.info.get("fencelock_" + name)
        try:
            return None if value is None else int(value)
        except (TypeError, ValueError):
            return None

    def percentiles(self, what: str) -> Percentiles:
        """``what``: ``"wait"`` or ``"hold"``."""
        line = _pairs(self.info.get(f"fencelock_{what}_percentiles_usec"))
        return Percentiles(
            p50=_number(line.get("p50")),
            p99=_number(line.get("p99")),
            p999=_number(line.get("p99.9")),
            count=self.figure(f"{what}s"),
            sum_usec=self.figure(f"{what}_usec_sum"),
        )


@dataclass
class Frame:
    """Every primary's view at one moment, in the order of their addresses."""

    url: str
    order: str
    servers: list[Server]


def connect(url: str) -> Union[redis.Redis, redis.cluster.RedisCluster]:
    """A client for ``url``: a cluster client when the node it names runs in cluster
    mode (asked with ``INFO cluster``), else a plain one."""
    client = redis.Redis.from_url(url, decode_responses=True)
    if str(client.info("cluster").get("cluster_enabled", 0)) != "1":
        return client
    client.close()
    return redis.cluster.RedisCluster.from_url(url, decode_responses=True)


def read(
    client: Union[redis.Redis, redis.cluster.RedisCluster],
    url: str,
    count: int,
    order: str,
) -> Frame:
    """The frame now: ``count`` hottest locks of each primary by ``order``."""
    if isinstance(client, redis.cluster.RedisCluster):
        servers = [
            _read_node(client, node, count, order)
            for node in sorted(client.get_primaries(), key=lambda n: (n.host, n.port))
        ]
    else:
        kwargs = client.connection_pool.connection_kwargs
        address = kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}"
        servers = [_read(client.execute_command, address, count, order)]
    return Frame(url, order, servers)


def _read_node(
    client: redis.cluster.RedisCluster, node: Any, count: int, order: str
) -> Server:
    def ask(*args: Any) -> Any:
        return client.execute_command(*args, target_nodes=node)

    return _read(ask, f"{node.host}:{node.port}", count, order)


def _read(ask: Any, address: str, count: int, order: str) -> Server:
    server = Server(address)
    try:
        info = ask("INFO", "fencelock")
    except (redis.ConnectionError, redis.TimeoutError) as error:
        server.problem = f"cannot be reached: {error}"
        return server
    server.info = _one_node(info)
    if not any(name.startswith("fencelock_") for name in server.info):
        server.problem = "the fencelock module is not loaded there"
        return server
    try:
        reply = ask("LOCK.TOP", "COUNT", count, "BY", order)
    except ResponseError as error:
        if "unknown command" not in str(error).lower():
            raise
        server.problem = "its fencelock module is older: no LOCK.TOP"
        return server
    server.locks = [parse_entry(entry) for entry in reply or []]
    return server


def parse_entry(entry: Any) -> HotLock:
    """``[key, waiters, longest-wait-ms, held-ms]``."""
    key, waiters, longest, held = list(entry)[:4]
    return HotLock(
        key=key.decode(errors="replace") if isinstance(key, bytes) else str(key),
        waiters=int(waiters or 0),
        longest_wait_ms=None if longest is None else int(longest),
        held_ms=None if held is None else int(held),
    )


def _one_node(info: Any) -> dict[str, Any]:
    """The parsed INFO of one server (a cluster client may key it by node name)."""
    if not isinstance(info, dict):
        return {}
    if info and all(isinstance(value, dict) for value in info.values()):
        nested: dict[str, Any] = next(iter(info.values()))
        if any(str(name).startswith("fencelock_") for name in nested):
            return nested
    return info


def _pairs(value: Any) -> dict[str, Any]:
    """``p50=1.0,p99=2.0`` as redis-py parsed it (a dict) or as the text it is."""
    if isinstance(value, dict):
        return {str(name): number for name, number in value.items()}
    if not isinstance(value, str):
        return {}
    pairs = (part.split("=", 1) for part in value.split(",") if "=" in part)
    return {name: number for name, number in pairs}


def _number(value: Any) -> Optional[float]:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None
