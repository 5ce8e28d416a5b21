# Generated from tests/_async/test_election.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""Leader election (``fencelock.Election``): one leader among candidates, a
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
import redis
import redis.cluster
import redis.retry
import redis.sentinel
from redis.backoff import NoBackoff
from servers import Server, wait_until
from setups import Node, Sentinel, start_replica, stopping

import fencelock
from fencelock import (
    Election,
    Leader,
    Leadership,
    LockLost,
    LockNotAcquired,
    Locks,
)

from .helpers import close_iterator, join, next_of, set_within, sleep, spawn, until

SERVICE = "election-service"


def client_of(server: Any, **kwargs: Any) -> redis.Redis:
    return redis.Redis(port=server.port, **kwargs)


def no_retry(server: Any, **kwargs: Any) -> redis.Redis:
    """A client without redis-py's own retries: ``observe`` reconnects by itself."""
    return client_of(server, retry=redis.retry.Retry(NoBackoff(), 0), **kwargs)


def observers(client: redis.Redis) -> int:
    """Clients blocked in ``LOCK.OBSERVE`` now."""
    return sum(
        1
        for entry in client.client_list()
        if entry.get("cmd") == "lock.observe" and "b" in entry.get("flags", "")
    )


def waiting_observers(client: redis.Redis, count: int = 1) -> None:
    def arrived() -> bool:
        return observers(client) == count

    until(arrived, 5, "the observer to wait")


def waiters(client: redis.Redis, key: str) -> int:
    info = fencelock.lock_info(client, key)
    assert info is not None, f"no lock at {key}"
    return info["waiters"]


def result_of(task: Any, outcome: dict[str, Any], timeout: float) -> Any:
    """What ``spawn``'s call returned (its error raised), waiting up to ``timeout``.
    An observer still waiting when a test fails is left behind, never waited for."""
    join(task, timeout)
    if "error" in outcome:
        raise outcome["error"]
    assert "result" in outcome, f"no answer within {timeout} s"
    return outcome["result"]


def test_nobody_leads_a_free_election(any_r: redis.Redis) -> None:
    election = Election(any_r, "free", ttl=10)
    assert election.key == "lock:free"
    assert election.leader() is None
    states = election.observe()
    assert next_of(states) is None, "the current state at once"
    close_iterator(states)


def test_one_leader_among_candidates_the_next_one_on_resign(
    r: redis.Redis,
) -> None:
    elections = [Election(r, "one", ttl=10) for _ in range(3)]
    first = elections[0].campaign("a")
    assert isinstance(first, Leadership)
    assert first.value == "a" and first.fence > 0 and not first.lost.is_set()
    assert elections[0].leader() == Leader(b"a", first.fence)
    with pytest.raises(LockNotAcquired):
        elections[1].campaign("b", timeout=0)

    led: list[Leadership] = []

    def lead(election: Election, value: str) -> None:
        led.append(election.campaign(value))

    waiting = [
        spawn(functools.partial(lead, e, v))
        for e, v in ((elections[1], "b"), (elections[2], "c"))
    ]

    def queued() -> bool:
        return waiters(r, "lock:one") == 2

    until(queued, 10, "both candidates to queue")
    assert first.resign() is True
    assert first.resign() is False, "once"

    def leading(count: int) -> bool:
        return len(led) == count

    until(lambda: leading(1), 5, "the next candidate leads")
    second = led[0]
    assert second.fence > first.fence
    assert isinstance(second.value, str)
    assert elections[2].leader() == Leader(second.value.encode(), second.fence)
    assert waiters(r, "lock:one") == 1, "one waits on"
    second.resign()
    until(lambda: leading(2), 5, "the last candidate leads")
    assert led[1].fence > second.fence
    led[1].resign()
    for task, _ in waiting:
        join(task, 10)
    assert elections[0].leader() is None


def test_a_leader_that_stops_is_replaced_after_its_lease(
    any_r: redis.Redis,
) -> None:
    """A leader that stopped refreshing (here a holding taken by hand, never
    refreshed): the waiting candidate leads once its lease runs out, with a higher
    fence; ``observe`` never stays on the stale leader."""
    any_r.execute_command(
        "LOCK.ACQUIRE", "lock:stops", 400, "TOKEN", "old", "VALUE", "old"
    )
    election = Election(any_r, "stops", ttl=5)
    old = election.leader()
    assert old is not None and old.value in ("old", b"old")
    states = election.observe()
    assert next_of(states) == old
    started = time.monotonic()
    with election.campaign("new", timeout=5) as leadership:
        assert time.monotonic() - started > 0.2, "waited for the lease to run out"
        assert leadership.fence > old.fence
        now = next_of(states)
        assert now is not None and now.fence == leadership.fence
        assert now.value in ("new", b"new")
    assert next_of(states) is None, "resigned on leaving"
    close_iterator(states)


def test_a_campaign_block_resigns_on_leaving(r: redis.Redis) -> None:
    election = Election(r, "with", ttl=10)
    with election.campaign("me") as leadership:
        assert isinstance(leadership, Leadership)
        assert election.leader() == Leader(b"me", leadership.fence)
        leadership.ensure_held(check=True)
    assert leadership.resigned
    assert election.leader() is None


def test_values_are_str_when_the_client_decodes(server: Server) -> None:
    decoded = client_of(server, decode_responses=True)
    raw = client_of(server)
    decoded.flushall()
    try:
        with Election(decoded, "types", ttl=10).campaign(b"bytes-given") as led:
            assert Election(decoded, "types", ttl=10).leader() == Leader(
                "bytes-given", led.fence
            )
            assert Election(raw, "types", ttl=10).leader() == Leader(
                b"bytes-given", led.fence
            )
            info = fencelock.lock_info(decoded, "lock:types")
            assert info is not None and info["value"] == "bytes-given"
        with Election(raw, "empty", ttl=10).campaign("") as led:
            assert Election(raw, "empty", ttl=10).leader() == Leader(b"", led.fence)
    finally:
        decoded.close()
        raw.close()


def test_proclaim_is_seen_by_leader_and_observers(
    r: redis.Redis,
) -> None:
    election = Election(r, "proclaim", ttl=10)
    states = election.observe()
    assert next_of(states) is None
    leadership = election.campaign("host-1")
    assert next_of(states) == Leader(b"host-1", leadership.fence)
    leadership.proclaim("host-1:busy")
    assert leadership.value == "host-1:busy"
    assert election.leader() == Leader(b"host-1:busy", leadership.fence)
    assert next_of(states) == Leader(b"host-1:busy", leadership.fence)

    # A waiting observer is answered by the change.
    coming = spawn(lambda: next_of(states))
    waiting_observers(r)
    leadership.proclaim(b"host-1:idle")
    assert result_of(*coming, 5) == Leader(b"host-1:idle", leadership.fence)
    leadership.proclaim(b"host-1:idle")  # the same value: no change to see
    coming = spawn(lambda: next_of(states))
    sleep(0.3)
    assert not coming[1], "no answer yet"
    leadership.resign()
    assert result_of(*coming, 5) is None
    close_iterator(states)
    with pytest.raises(LockLost):
        leadership.proclaim("after")


def test_observe_skips_what_came_and_went_never_the_latest(
    r: redis.Redis,
) -> None:
    election = Election(r, "latest", ttl=10)
    states = election.observe()
    assert next_of(states) is None
    for value in ("a", "b", "c"):
        (election.campaign(value)).resign()
    last = election.campaign("d")
    assert next_of(states) == Leader(b"d", last.fence), "the latest, at once"
    last.resign()
    assert next_of(states) is None
    close_iterator(states)


def test_fences_increase_across_leaders(r: redis.Redis) -> None:
    election = Election(r, "fences", ttl=10)
    fences = []
    for value in range(5):
        with election.campaign(str(value)) as leadership:
            fences.append(leadership.fence)
    r.delete("lock:fences")
    with election.campaign("after-del") as leadership:
        fences.append(leadership.fence)
    assert fences == sorted(fences) and len(set(fences)) == len(fences)


def test_a_deleted_leadership_is_lost_as_a_lease(r: redis.Redis) -> None:
    reported: list[Leadership] = []
    election = Election(r, "deleted", ttl=0.6)
    with pytest.raises(LockLost) as left:
        with election.campaign("me", on_lost=reported.append) as leadership:
            r.delete("lock:deleted")
            assert set_within(leadership.lost, 3), "the refresher found it gone"
            assert leadership.lost_reason == LockLost.GONE
            with pytest.raises(LockLost):
                leadership.ensure_held()
            with pytest.raises(LockLost):
                leadership.proclaim("still me?")
    assert left.value.reason == LockLost.GONE
    assert reported == [leadership]
    assert leadership.resign() is False

    with election.campaign("ok", lost_ok=True) as leadership:
        r.delete("lock:deleted")
        with pytest.raises(LockLost):
            leadership.proclaim("refused at once")
    assert leadership.lost.is_set() and not leadership.resigned


def test_a_leader_is_refreshed_while_it_leads(r: redis.Redis) -> None:
    election = Election(r, "refreshed", ttl=0.6)
    with election.campaign("steady") as leadership:
        sleep(1.5)
        leadership.ensure_held(check=True)
        assert election.leader() == Leader(b"steady", leadership.fence)


def test_the_election_in_a_managers_session(r: redis.Redis) -> None:
    locks = Locks(r)
    election = Election(r, "session", ttl=0.9, locks=locks)
    with pytest.raises(ValueError):
        Election(redis.Redis(), "other", ttl=1, locks=locks)
    leadership = election.campaign("in-session")
    assert leadership.lease.session is not None
    info = fencelock.lock_info(r, "lock:session")
    assert info is not None and info["in_session"] == 1
    with locks.lock("other", ttl=0.9):
        sleep(1.2)  # kept by the session's keepalives
        leadership.ensure_held(check=True)
    r.delete("lock:session")
    assert set_within(leadership.lost, 3), "the keepalive found it gone"
    assert leadership.lost_reason == LockLost.GONE

    again = election.campaign("again")
    locks.close()
    assert again.lost.is_set() and again.lost_reason == LockLost.CLOSED
    assert election.leader() is None, "closing the manager ended the leadership"
    with pytest.raises(LockLost) as raised:
        again.__exit__(None, None, None)
    assert raised.value.reason == LockLost.CLOSED

    # Leaving the manager's own block closes it the same way.
    with Locks(r) as locks:
        election = Election(r, "session", ttl=10, locks=locks)
        leadership = election.campaign("in-session")
        assert leadership.lease.session is not None
    assert leadership.lost_reason == LockLost.CLOSED
    assert election.leader() is None


def test_a_campaign_from_the_leader_itself_is_refused(
    r: redis.Redis,
) -> None:
    election = Election(r, "self", ttl=10)
    with election.campaign("me"):
        with pytest.raises(fencelock.WrongMode):
            election.campaign("me again", timeout=5)


def test_observe_through_a_reload_and_a_killed_connection(
    tmp_path: Path,
) -> None:
    server = Server(tmp_path / "reload", "--enable-debug-command", "yes")
    r = client_of(server)
    watcher = no_retry(server)
    try:
        election = Election(r, "reload", ttl=10)
        leadership = election.campaign("v1")
        states = Election(watcher, "reload", ttl=10).observe()
        assert next_of(states) == Leader(b"v1", leadership.fence)

        coming = spawn(lambda: next_of(states))
        waiting_observers(r)
        r.execute_command("DEBUG", "RELOAD")
        leadership.proclaim("v2")
        assert result_of(*coming, 5) == Leader(b"v2", leadership.fence)

        coming = spawn(lambda: next_of(states))
        waiting_observers(r)
        r.execute_command("CLIENT", "KILL", "TYPE", "normal")
        waiting_observers(r)  # again, on a new connection
        leadership.proclaim("v3")
        assert result_of(*coming, 5) == Leader(b"v3", leadership.fence)

        # Killed with the change in between: the change is answered at once.
        coming = spawn(lambda: next_of(states))
        waiting_observers(r)
        r.execute_command("CLIENT", "KILL", "TYPE", "normal")
        leadership.resign()
        assert result_of(*coming, 5) is None
        close_iterator(states)
    finally:
        watcher.close()
        r.close()
        server.stop()


@pytest.mark.parametrize("persistence", [True, False], ids=["saved", "lost"])
def test_observe_through_a_restart(tmp_path: Path, persistence: bool) -> None:
    first = Server(tmp_path / "restart")
    port = first.port
    r = client_of(first)
    watcher = no_retry(first)
    servers = [first]
    try:
        leadership = Election(r, "restart", ttl=30).campaign("before")
        states = Election(watcher, "restart", ttl=30).observe()
        assert next_of(states) == Leader(b"before", leadership.fence)
        coming = spawn(lambda: next_of(states))
        waiting_observers(r)
        if persistence:
            r.save()
        first.stop()
        if not persistence:
            (tmp_path / "restart" / "dump.rdb").unlink(missing_ok=True)
        sleep(0.5)  # the observer finds it down and retries
        servers.append(Server(tmp_path / "restart", port=port))
        if persistence:

            def again() -> bool:
                return observers(r) == 1

            until(again, 10, "the observer to wait again")
            assert not coming[1], "the same state: nothing to tell"
            leadership.proclaim("after")
            assert result_of(*coming, 10) == Leader(b"after", leadership.fence)
        else:
            assert result_of(*coming, 10) is None, "gone with the data"
        close_iterator(states)
        leadership.resign()
    finally:
        watcher.close()
        r.close()
        for server in servers:
            server.stop()


def test_observe_through_a_sentinel_failover(tmp_path: Path) -> None:
    master = Node(tmp_path / "master", "--repl-diskless-sync-delay", "0")
    replica = start_replica(tmp_path / "replica", master)
    sentinel = Sentinel(tmp_path / "sentinel", master, SERVICE)
    with stopping(sentinel, replica, master):
        wait_until(lambda: sentinel.knows_replica(SERVICE, replica), 15, "replica")
        manager = redis.sentinel.Sentinel([("127.0.0.1", sentinel.port)])
        # The candidates' client retries (reconnecting to the new master); the
        # observer's does not: observe reconnects by itself.
        client = manager.master_for(SERVICE, retry=redis.retry.Retry(NoBackoff(), 5))
        watching = manager.master_for(SERVICE, retry=redis.retry.Retry(NoBackoff(), 0))
        try:
            election = Election(client, "failover", ttl=30)
            leadership = election.campaign("old-master")
            client.execute_command("WAIT", 1, 2000)
            states = Election(watching, "failover", ttl=30).observe()
            assert next_of(states) == Leader(b"old-master", leadership.fence)
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
            successor = Election(client, "failover", ttl=30).campaign("new-master")
            seen: list[Optional[Leader]] = []

            def until_successor() -> None:
                while True:
                    state = next_of(states)
                    seen.append(state)
                    if state is not None and state.fence == successor.fence:
                        return

            result_of(*spawn(until_successor), 30)
            assert seen[-1] == Leader(b"new-master", successor.fence)
            assert successor.fence > leadership.fence
            close_iterator(states)
            assert successor.resign()
            assert leadership.resign() is False, "ended on the new master by hand"
        finally:
            client.close()
            watching.close()
            for one in manager.sentinels:
                one.close()


def test_observe_on_a_replica_follows_the_primary(tmp_path: Path) -> None:
    primary = Server(tmp_path / "primary", "--repl-diskless-sync-delay", "0")
    replica = start_replica(tmp_path / "replica", primary)
    client, on_replica = client_of(primary), client_of(replica)
    try:
        states = Election(on_replica, "replicated", ttl=10).observe()
        assert next_of(states) is None
        coming = spawn(lambda: next_of(states))
        waiting_observers(on_replica)
        leadership = Election(client, "replicated", ttl=10).campaign("primary")
        assert result_of(*coming, 5) == Leader(b"primary", leadership.fence)
        leadership.proclaim("still primary")
        assert next_of(states) == Leader(b"still primary", leadership.fence)
        leadership.resign()
        assert next_of(states) is None
        close_iterator(states)
    finally:
        client.close()
        on_replica.close()
        replica.stop()
        primary.stop()


def test_an_election_on_a_cluster(cluster: list[Server]) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster[0].port)
    try:
        elections = [Election(client, f"spread-{n}", ttl=10) for n in range(6)]
        states = [election.observe() for election in elections]
        assert [next_of(s) for s in states] == [None] * 6
        for n, election in enumerate(elections):
            with election.campaign(f"node-{n}") as leadership:
                assert election.leader() == Leader(
                    f"node-{n}".encode(), leadership.fence
                )
                assert next_of(states[n]) == Leader(
                    f"node-{n}".encode(), leadership.fence
                )
            assert next_of(states[n]) is None
        for s in states:
            close_iterator(s)
        other = Election(client, "elsewhere", ttl=10)
        with other.campaign("x") as leadership:
            assert other.leader() == Leader(b"x", leadership.fence)
    finally:
        client.close()


# The module of 462e883 (the first LOCK.OBSERVE) freed memory it did not own when a
# wait timed out with no change: Valkey aborted in its timer handler, Redis 7.0 crashed
# at a later error reply (a WRONGTYPE). Fixed on main since (220b12d).
def test_observe_waits_quietly_through_its_block_timeouts(
    tmp_path: Path,
) -> None:
    server = Server(tmp_path / "quiet")
    r = client_of(server)
    try:
        leadership = Election(r, "quiet", ttl=10).campaign("steady")
        states = Election(r, "quiet", ttl=10).observe()
        assert next_of(states) == Leader(b"steady", leadership.fence)
        coming = spawn(lambda: next_of(states))
        sleep(2.5)  # longer than one BLOCK: the observer asks again, quietly
        assert not coming[1], "no answer yet"
        r.set("string", "x")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            r.lpush("string", "x")
        assert r.ping()
        leadership.proclaim("changed")
        assert result_of(*coming, 5) == Leader(b"changed", leadership.fence)
        leadership.resign()
        close_iterator(states)
    finally:
        r.close()
        server.stop()


def test_the_blocks_own_error_goes_on_when_the_server_is_gone(
    tmp_path: Path,
) -> None:
    """A leader's block that fails because the server went away raises its own error,
    not the failed resignation's."""
    server = Server(tmp_path / "gone")
    r = no_retry(server)
    try:
        with pytest.raises(ValueError, match="the job failed"):
            with Election(r, "gone", ttl=30).campaign("me"):
                server.stop()
                raise ValueError("the job failed")
    finally:
        r.close()
        server.stop()
