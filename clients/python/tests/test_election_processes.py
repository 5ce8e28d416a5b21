"""Three candidate processes (tests/election_candidate.py) run a small scheduler on
``fencelock.Election``; the leader is killed (``kill -9``), then the next one paused
past its lease (``SIGSTOP``) and let go on (``SIGCONT``). At most one leader is
valid at any time, by the fences: every leader's work goes through
``fencelock.fenced`` on one mark, so the paused leader's late write is refused; the
fences of successive leaders increase; no leader was granted before the lease of the
one before it ended, by the one clock every process of the machine shares
(monotonic). Written by hand, not generated from tests/_async: candidate processes
killed and paused, one process model."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
import redis
from servers import Server, wait_until

import fencelock

TTL = 1.0
CANDIDATE = Path(__file__).with_name("election_candidate.py")


@pytest.fixture
def candidates(own_server: Server) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    started = {
        name: subprocess.Popen(
            [sys.executable, str(CANDIDATE), str(own_server.port), name, str(TTL)],
            stdout=subprocess.DEVNULL,
        )
        for name in ("c1", "c2", "c3")
    }
    yield started
    for process in started.values():
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)
        process.kill()
        process.wait()


def rows(r: redis.Redis, key: str) -> list[list[str]]:
    return [cast(bytes, entry).decode().split() for entry in r.lrange(key, 0, -1)]


def leader_now(r: redis.Redis) -> tuple[str, int]:
    leader = fencelock.Election(r, "scheduler", ttl=TTL).leader()
    assert leader is not None and isinstance(leader.value, bytes)
    return leader.value.decode(), leader.fence


def work_of(r: redis.Redis, fence: int) -> int:
    return sum(1 for row in rows(r, "work") if int(row[0]) == fence)


def test_at_most_one_leader_through_a_kill_and_a_pause(
    own_server: Server, candidates: dict[str, subprocess.Popen[bytes]]
) -> None:
    r = own_server.client()
    election = fencelock.Election(r, "scheduler", ttl=TTL)
    wait_until(lambda: election.leader() is not None, 15, "a first leader")
    first, first_fence = leader_now(r)
    wait_until(lambda: work_of(r, first_fence) >= 3, 10, "the first leader's work")

    # kill -9 of the leader: the next one leads about a ttl later.
    candidates[first].send_signal(signal.SIGKILL)
    candidates[first].wait()

    def next_leader(after: int) -> bool:
        leader = election.leader()
        return leader is not None and leader.fence > after

    wait_until(lambda: next_leader(first_fence), 10, "a leader after the kill")
    second, second_fence = leader_now(r)
    assert second != first
    wait_until(lambda: work_of(r, second_fence) >= 3, 10, "the second leader's work")

    # SIGSTOP past its ttl: a third leads; SIGCONT: the paused one's late write is
    # refused by the mark.
    paused = candidates[second]
    paused.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    wait_until(lambda: next_leader(second_fence), 10, "a leader after the pause")
    third, third_fence = leader_now(r)
    assert third not in (first, second)
    wait_until(lambda: work_of(r, third_fence) >= 3, 10, "the third leader's work")
    # Past its whole lease however fresh its last refresh was: it wakes up late.
    time.sleep(max(0.0, stopped_at + TTL + 0.1 - time.monotonic()))
    paused.send_signal(signal.SIGCONT)
    wait_until(
        lambda: [str(second_fence), second] in rows(r, "refused"),
        10,
        "the paused leader's late write to be refused",
    )
    # It campaigns again and waits behind the third leader, which goes on.
    time.sleep(0.5)
    assert leader_now(r) == (third, third_fence)
    for process in candidates.values():
        if process.poll() is None:
            process.send_signal(signal.SIGSTOP)

    leaders = [
        (int(f), name, float(at), float(d)) for f, name, at, d in rows(r, "leaders")
    ]
    fences = [fence for fence, *_ in leaders]
    assert fences[:3] == [first_fence, second_fence, third_fence], leaders
    assert fences == sorted(fences) and len(set(fences)) == len(fences)

    # The admitted work never goes back to an older leader's fence.
    admitted = [int(row[0]) for row in rows(r, "work")]
    assert admitted == sorted(admitted)
    assert set(admitted) <= set(fences)
    assert all(int(fence) < third_fence for fence, _ in rows(r, "refused"))

    # No two leases overlap: each leader was granted after the deadline the one
    # before it last believed in.
    last_deadline: dict[int, float] = {}
    for fence, deadline in rows(r, "deadlines"):
        last_deadline[int(fence)] = max(
            last_deadline.get(int(fence), 0), float(deadline)
        )
    for (before, *_), (_, _, granted, _) in zip(leaders, leaders[1:]):
        assert granted > last_deadline.get(before, 0), (before, leaders)
    r.close()
