"""Leader election (``fencelock.asyncio.Election``): one leader among candidates, a
campaign that waits for a resignation or an expiry, fences that grow from leader to
leader, ``proclaim`` seen by ``leader()`` and ``observe()``, ``observe`` through a
``DEBUG RELOAD``, a restart, ``CLIENT KILL`` and a Sentinel failover, the loss of a
leadership told as a lease's, and the election in a manager's session. Against real
servers. What only tasks do (cancellation, ``cancel_on_lost``) is
tests/test_asyncio_election.py."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any, Optional

import pytest
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.asyncio.sentinel
from redis.backoff import NoBackoff
from servers import Server, wait_until
from setups import Node, Sentinel, start_replica, stopping

import fencelock.asyncio
from fencelock.asyncio import (
    Election,
    Leader,
    Leadership,
    LockLost,
    LockNotAcquired,
    Locks,
)

from .helpers import close_iterator, join, next_of, set_within, sleep, spawn, until

SERVICE = "election-service"


def client_of(server: Any, **kwargs: Any) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(port=server.port, **kwargs)


def no_retry(server: Any, **kwargs: Any) -> redis.asyncio.Redis:
    """A client without redis-py's own retries: ``observe`` reconnects by itself."""
    return client_of(server, retry=redis.asyncio.retry.Retry(NoBackoff(), 0), **kwargs)


async def observers(client: redis.asyncio.Redis) -> int:
    """Clients blocked in ``LOCK.OBSERVE`` now."""
    return sum(
        1
        for entry in await client.client_list()
        if entry.get("cmd") == "lock.observe" and "b" in entry.get("flags", "")
    )


async def waiting_observers(client: redis.asyncio.Redis, count: int = 1) -> None:
    async def arrived() -> bool:
        return await observers(client) == count

    await until(arrived, 5, "the observer to wait")


async def waiters(client: redis.asyncio.Redis, key: str) -> int:
    info = await fencelock.asyncio.lock_info(client, key)
    assert info is not None, f"no lock at {key}"
    return info["waiters"]


async def result_of(task: Any, outcome: dict[str, Any], timeout: float) -> Any:
    """What ``spawn``'s call returned (its error raised), waiting up to ``timeout``.
    An observer still waiting when a test fails is left behind, never waited for."""
    await join(task, timeout)
    if "error" in outcome:
        raise outcome["error"]
    assert "result" in outcome, f"no answer within {timeout} s"
    return outcome["result"]


async def test_nobody_leads_a_free_election(any_r: redis.asyncio.Redis) -> None:
    election = Election(any_r, "free", ttl=10)
    assert election.key == "lock:free"
    assert await election.leader() is None
    states = election.observe()
    assert await next_of(states) is None, "the current state at once"
    await close_iterator(states)


async def test_one_leader_among_candidates_the_next_one_on_resign(
    r: redis.asyncio.Redis,
) -> None:
    elections = [Election(r, "one", ttl=10) for _ in range(3)]
    first = await elections[0].campaign("a")
    assert isinstance(first, Leadership)
    assert first.value == "a" and first.fence > 0 and not first.lost.is_set()
    assert await elections[0].leader() == Leader(b"a", first.fence)
    with pytest.raises(LockNotAcquired):
        await elections[1].campaign("b", timeout=0)

    led: list[Leadership] = []

    async def lead(election: Election, value: str) -> None:
        led.append(await election.campaign(value))

    waiting = [
        spawn(functools.partial(lead, e, v))
        for e, v in ((elections[1], "b"), (elections[2], "c"))
    ]

    async def queued() -> bool:
        return await waiters(r, "lock:one") == 2

    await until(queued, 10, "both candidates to queue")
    assert await first.resign() is True
    assert await first.resign() is False, "once"

    async def leading(count: int) -> bool:
        return len(led) == count

    await until(lambda: leading(1), 5, "the next candidate leads")
    second = led[0]
    assert second.fence > first.fence
    assert isinstance(second.value, str)
    assert await elections[2].leader() == Leader(second.value.encode(), second.fence)
    assert await waiters(r, "lock:one") == 1, "one waits on"
    await second.resign()
    await until(lambda: leading(2), 5, "the last candidate leads")
    assert led[1].fence > second.fence
    await led[1].resign()
    for task, _ in waiting:
        await join(task, 10)
    assert await elections[0].leader() is None


async def test_a_leader_that_stops_is_replaced_after_its_lease(
    any_r: redis.asyncio.Redis,
) -> None:
    """A leader that stopped refreshing (here a holding taken by hand, never
    refreshed): the waiting candidate leads once its lease runs out, with a higher
    fence; ``observe`` never stays on the stale leader."""
    await any_r.execute_command(
        "LOCK.ACQUIRE", "lock:stops", 400, "TOKEN", "old", "VALUE", "old"
    )
    election = Election(any_r, "stops", ttl=5)
    old = await election.leader()
    assert old is not None and old.value in ("old", b"old")
    states = election.observe()
    assert await next_of(states) == old
    started = time.monotonic()
    async with election.campaign("new", timeout=5) as leadership:
        assert time.monotonic() - started > 0.2, "waited for the lease to run out"
        assert leadership.fence > old.fence
        now = await next_of(states)
        assert now is not None and now.fence == leadership.fence
        assert now.value in ("new", b"new")
    assert await next_of(states) is None, "resigned on leaving"
    await close_iterator(states)


async def test_a_campaign_block_resigns_on_leaving(r: redis.asyncio.Redis) -> None:
    election = Election(r, "with", ttl=10)
    async with election.campaign("me") as leadership:
        assert isinstance(leadership, Leadership)
        assert await election.leader() == Leader(b"me", leadership.fence)
        await leadership.ensure_held(check=True)
    assert leadership.resigned
    assert await election.leader() is None


async def test_values_are_str_when_the_client_decodes(server: Server) -> None:
    decoded = client_of(server, decode_responses=True)
    raw = client_of(server)
    await decoded.flushall()
    try:
        async with Election(decoded, "types", ttl=10).campaign(b"bytes-given") as led:
            assert await Election(decoded, "types", ttl=10).leader() == Leader(
                "bytes-given", led.fence
            )
            assert await Election(raw, "types", ttl=10).leader() == Leader(
                b"bytes-given", led.fence
            )
            info = await fencelock.asyncio.lock_info(decoded, "lock:types")
            assert info is not None and info["value"] == "bytes-given"
        async with Election(raw, "empty", ttl=10).campaign("") as led:
            assert await Election(raw, "empty", ttl=10).leader() == Leader(
                b"", led.fence
            )
    finally:
        await decoded.aclose()
        await raw.aclose()


async def test_proclaim_is_seen_by_leader_and_observers(
    r: redis.asyncio.Redis,
) -> None:
    election = Election(r, "proclaim", ttl=10)
    states = election.observe()
    assert await next_of(states) is None
    leadership = await election.campaign("host-1")
    assert await next_of(states) == Leader(b"host-1", leadership.fence)
    await leadership.proclaim("host-1:busy")
    assert leadership.value == "host-1:busy"
    assert await election.leader() == Leader(b"host-1:busy", leadership.fence)
    assert await next_of(states) == Leader(b"host-1:busy", leadership.fence)

    # A waiting observer is answered by the change.
    coming = spawn(lambda: next_of(states))
    await waiting_observers(r)
    await leadership.proclaim(b"host-1:idle")
    assert await result_of(*coming, 5) == Leader(b"host-1:idle", leadership.fence)
    await leadership.proclaim(b"host-1:idle")  # the same value: no change to see
    coming = spawn(lambda: next_of(states))
    await sleep(0.3)
    assert not coming[1], "no answer yet"
    await leadership.resign()
    assert await result_of(*coming, 5) is None
    await close_iterator(states)
    with pytest.raises(LockLost):
        await leadership.proclaim("after")


async def test_observe_skips_what_came_and_went_never_the_latest(
    r: redis.asyncio.Redis,
) -> None:
    election = Election(r, "latest", ttl=10)
    states = election.observe()
    assert await next_of(states) is None
    for value in ("a", "b", "c"):
        await (await election.campaign(value)).resign()
    last = await election.campaign("d")
    assert await next_of(states) == Leader(b"d", last.fence), "the latest, at once"
    await last.resign()
    assert await next_of(states) is None
    await close_iterator(states)


async def test_fences_increase_across_leaders(r: redis.asyncio.Redis) -> None:
    election = Election(r, "fences", ttl=10)
    fences = []
    for value in range(5):
        async with election.campaign(str(value)) as leadership:
            fences.append(leadership.fence)
    await r.delete("lock:fences")
    async with election.campaign("after-del") as leadership:
        fences.append(leadership.fence)
    assert fences == sorted(fences) and len(set(fences)) == len(fences)


async def test_a_deleted_leadership_is_lost_as_a_lease(r: redis.asyncio.Redis) -> None:
    reported: list[Leadership] = []
    election = Election(r, "deleted", ttl=0.6)
    with pytest.raises(LockLost) as left:
        async with election.campaign("me", on_lost=reported.append) as leadership:
            await r.delete("lock:deleted")
            assert await set_within(leadership.lost, 3), "the refresher found it gone"
            assert leadership.lost_reason == LockLost.GONE
            with pytest.raises(LockLost):
                leadership.ensure_held()
            with pytest.raises(LockLost):
                await leadership.proclaim("still me?")
    assert left.value.reason == LockLost.GONE
    assert reported == [leadership]
    assert await leadership.resign() is False

    async with election.campaign("ok", lost_ok=True) as leadership:
        await r.delete("lock:deleted")
        with pytest.raises(LockLost):
            await leadership.proclaim("refused at once")
    assert leadership.lost.is_set() and not leadership.resigned


async def test_a_leader_is_refreshed_while_it_leads(r: redis.asyncio.Redis) -> None:
    election = Election(r, "refreshed", ttl=0.6)
    async with election.campaign("steady") as leadership:
        await sleep(1.5)
        await leadership.ensure_held(check=True)
        assert await election.leader() == Leader(b"steady", leadership.fence)


async def test_the_election_in_a_managers_session(r: redis.asyncio.Redis) -> None:
    locks = Locks(r)
    election = Election(r, "session", ttl=0.9, locks=locks)
    with pytest.raises(ValueError):
        Election(redis.asyncio.Redis(), "other", ttl=1, locks=locks)
    leadership = await election.campaign("in-session")
    assert leadership.lease.session is not None
    info = await fencelock.asyncio.lock_info(r, "lock:session")
    assert info is not None and info["in_session"] == 1
    async with locks.lock("other", ttl=0.9):
        await sleep(1.2)  # kept by the session's keepalives
        await leadership.ensure_held(check=True)
    await r.delete("lock:session")
    assert await set_within(leadership.lost, 3), "the keepalive found it gone"
    assert leadership.lost_reason == LockLost.GONE

    again = await election.campaign("again")
    await locks.aclose()
    assert again.lost.is_set() and again.lost_reason == LockLost.CLOSED
    assert await election.leader() is None, "closing the manager ended the leadership"
    with pytest.raises(LockLost) as raised:
        await again.__aexit__(None, None, None)
    assert raised.value.reason == LockLost.CLOSED

    # Leaving the manager's own block closes it the same way.
    async with Locks(r) as locks:
        election = Election(r, "session", ttl=10, locks=locks)
        leadership = await election.campaign("in-session")
        assert leadership.lease.session is not None
    assert leadership.lost_reason == LockLost.CLOSED
    assert await election.leader() is None


async def test_a_campaign_from_the_leader_itself_is_refused(
    r: redis.asyncio.Redis,
) -> None:
    election = Election(r, "self", ttl=10)
    async with election.campaign("me"):
        with pytest.raises(fencelock.asyncio.WrongMode):
            await election.campaign("me again", timeout=5)


async def test_observe_through_a_reload_and_a_killed_connection(
    tmp_path: Path,
) -> None:
    server = Server(tmp_path / "reload", "--enable-debug-command", "yes")
    r = client_of(server)
    watcher = no_retry(server)
    try:
        election = Election(r, "reload", ttl=10)
        leadership = await election.campaign("v1")
        states = Election(watcher, "reload", ttl=10).observe()
        assert await next_of(states) == Leader(b"v1", leadership.fence)

        coming = spawn(lambda: next_of(states))
        await waiting_observers(r)
        await r.execute_command("DEBUG", "RELOAD")
        await leadership.proclaim("v2")
        assert await result_of(*coming, 5) == Leader(b"v2", leadership.fence)

        coming = spawn(lambda: next_of(states))
        await waiting_observers(r)
        await r.execute_command("CLIENT", "KILL", "TYPE", "normal")
        await waiting_observers(r)  # again, on a new connection
        await leadership.proclaim("v3")
        assert await result_of(*coming, 5) == Leader(b"v3", leadership.fence)

        # Killed with the change in between: the change is answered at once.
        coming = spawn(lambda: next_of(states))
        await waiting_observers(r)
        await r.execute_command("CLIENT", "KILL", "TYPE", "normal")
        await leadership.resign()
        assert await result_of(*coming, 5) is None
        await close_iterator(states)
    finally:
        await watcher.aclose()
        await r.aclose()
        server.stop()


@pytest.mark.parametrize("persistence", [True, False], ids=["saved", "lost"])
async def test_observe_through_a_restart(tmp_path: Path, persistence: bool) -> None:
    first = Server(tmp_path / "restart")
    port = first.port
    r = client_of(first)
    watcher = no_retry(first)
    servers = [first]
    try:
        leadership = await Election(r, "restart", ttl=30).campaign("before")
        states = Election(watcher, "restart", ttl=30).observe()
        assert await next_of(states) == Leader(b"before", leadership.fence)
        coming = spawn(lambda: next_of(states))
        await waiting_observers(r)
        if persistence:
            await r.save()
        first.stop()
        if not persistence:
            (tmp_path / "restart" / "dump.rdb").unlink(missing_ok=True)
        await sleep(0.5)  # the observer finds it down and retries
        servers.append(Server(tmp_path / "restart", port=port))
        if persistence:

            async def again() -> bool:
                return await observers(r) == 1

            await until(again, 10, "the observer to wait again")
            assert not coming[1], "the same state: nothing to tell"
            await leadership.proclaim("after")
            assert await result_of(*coming, 10) == Leader(b"after", leadership.fence)
        else:
            assert await result_of(*coming, 10) is None, "gone with the data"
        await close_iterator(states)
        await leadership.resign()
    finally:
        await watcher.aclose()
        await r.aclose()
        for server in servers:
            server.stop()


async def test_observe_through_a_sentinel_failover(tmp_path: Path) -> None:
    master = Node(tmp_path / "master", "--repl-diskless-sync-delay", "0")
    replica = start_replica(tmp_path / "replica", master)
    sentinel = Sentinel(tmp_path / "sentinel", master, SERVICE)
    with stopping(sentinel, replica, master):
        wait_until(lambda: sentinel.knows_replica(SERVICE, replica), 15, "replica")
        manager = redis.asyncio.sentinel.Sentinel([("127.0.0.1", sentinel.port)])
        # The candidates' client retries (reconnecting to the new master); the
        # observer's does not: observe reconnects by itself.
        client = manager.master_for(
            SERVICE, retry=redis.asyncio.retry.Retry(NoBackoff(), 5)
        )
        watching = manager.master_for(
            SERVICE, retry=redis.asyncio.retry.Retry(NoBackoff(), 0)
        )
        try:
            election = Election(client, "failover", ttl=30)
            leadership = await election.campaign("old-master")
            await client.execute_command("WAIT", 1, 2000)
            states = Election(watching, "failover", ttl=30).observe()
            assert await next_of(states) == Leader(b"old-master", leadership.fence)
            with sentinel.client() as asking:
                asking.execute_command("SENTINEL", "FAILOVER", SERVICE)
            wait_until(
                lambda: sentinel.master_address(SERVICE) == ("127.0.0.1", replica.port),
                20,
                "the Sentinel to switch to the replica",
            )
            # The new master has the leadership (replicated); a new leader there.
            with replica.client() as on_new:
                token = leadership.lease.token
                assert on_new.execute_command("LOCK.RELEASE", "lock:failover", token)
            successor = await Election(client, "failover", ttl=30).campaign(
                "new-master"
            )
            seen: list[Optional[Leader]] = []

            async def until_successor() -> None:
                while True:
                    state = await next_of(states)
                    seen.append(state)
                    if state is not None and state.fence == successor.fence:
                        return

            await result_of(*spawn(until_successor), 30)
            assert seen[-1] == Leader(b"new-master", successor.fence)
            assert successor.fence > leadership.fence
            await close_iterator(states)
            assert await successor.resign()
            assert await leadership.resign() is False, "ended on the new master by hand"
        finally:
            await client.aclose()
            await watching.aclose()
            for one in manager.sentinels:
                await one.aclose()


async def test_observe_on_a_replica_follows_the_primary(tmp_path: Path) -> None:
    primary = Server(tmp_path / "primary", "--repl-diskless-sync-delay", "0")
    replica = start_replica(tmp_path / "replica", primary)
    client, on_replica = client_of(primary), client_of(replica)
    try:
        states = Election(on_replica, "replicated", ttl=10).observe()
        assert await next_of(states) is None
        coming = spawn(lambda: next_of(states))
        await waiting_observers(on_replica)
        leadership = await Election(client, "replicated", ttl=10).campaign("primary")
        assert await result_of(*coming, 5) == Leader(b"primary", leadership.fence)
        await leadership.proclaim("still primary")
        assert await next_of(states) == Leader(b"still primary", leadership.fence)
        await leadership.resign()
        assert await next_of(states) is None
        await close_iterator(states)
    finally:
        await client.aclose()
        await on_replica.aclose()
        replica.stop()
        primary.stop()


async def test_an_election_on_a_cluster(cluster: list[Server]) -> None:
    client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    try:
        elections = [Election(client, f"spread-{n}", ttl=10) for n in range(6)]
        states = [election.observe() for election in elections]
        assert [await next_of(s) for s in states] == [None] * 6
        for n, election in enumerate(elections):
            async with election.campaign(f"node-{n}") as leadership:
                assert await election.leader() == Leader(
                    f"node-{n}".encode(), leadership.fence
                )
                assert await next_of(states[n]) == Leader(
                    f"node-{n}".encode(), leadership.fence
                )
            assert await next_of(states[n]) is None
        for s in states:
            await close_iterator(s)
        other = Election(client, "elsewhere", ttl=10)
        async with other.campaign("x") as leadership:
            assert await other.leader() == Leader(b"x", leadership.fence)
    finally:
        await client.aclose()


# The module of 462e883 (the first LOCK.OBSERVE) freed memory it did not own when a
# wait timed out with no change: Valkey aborted in its timer handler, Redis 7.0 crashed
# at a later error reply (a WRONGTYPE). Fixed on main since (220b12d).
async def test_observe_waits_quietly_through_its_block_timeouts(
    tmp_path: Path,
) -> None:
    server = Server(tmp_path / "quiet")
    r = client_of(server)
    try:
        leadership = await Election(r, "quiet", ttl=10).campaign("steady")
        states = Election(r, "quiet", ttl=10).observe()
        assert await next_of(states) == Leader(b"steady", leadership.fence)
        coming = spawn(lambda: next_of(states))
        await sleep(2.5)  # longer than one BLOCK: the observer asks again, quietly
        assert not coming[1], "no answer yet"
        await r.set("string", "x")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            await r.lpush("string", "x")
        assert await r.ping()
        await leadership.proclaim("changed")
        assert await result_of(*coming, 5) == Leader(b"changed", leadership.fence)
        await leadership.resign()
        await close_iterator(states)
    finally:
        await r.aclose()
        server.stop()


async def test_the_blocks_own_error_goes_on_when_the_server_is_gone(
    tmp_path: Path,
) -> None:
    """A leader's block that fails because the server went away raises its own error,
    not the failed resignation's."""
    server = Server(tmp_path / "gone")
    r = no_retry(server)
    try:
        with pytest.raises(ValueError, match="the job failed"):
            async with Election(r, "gone", ttl=30).campaign("me"):
                server.stop()
                raise ValueError("the job failed")
    finally:
        await r.aclose()
        server.stop()
