"""A lock manager used before ``os.fork()`` (gunicorn ``--preload``, Celery prefork,
``multiprocessing`` with fork): each child starts clean, with its own session and
its own refresher, and the parent's leases stay the parent's. Work longer than the
ttl is done under locks that the children keep alive; a sibling's ``close()``
touches nobody else's locks; the child of an asyncio manager used before the fork is
refused at once. Written by hand, not generated from tests/_async: forks are the
threads' side's process model (the asyncio case is only a refusal)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
import traceback
from typing import Callable, cast

import pytest
import redis
import redis.asyncio
from fork_jobs import TTL, WORK, job, manager
from servers import Server

import fencelock
import fencelock.asyncio

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork"), reason="the platform has no os.fork()"
)


def forked(body: Callable[[], None]) -> int:
    """Runs ``body`` in a forked child, which exits 0 if it returned, 1 (its
    traceback on stderr) if it raised."""
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            body()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    return pid


def exit_code(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def held_by_the_child_throughout(r: redis.Redis, pid: int, key: str) -> None:
    """Tries to take ``key`` while the child holds it, until the child is done (it
    pushes to ``done`` inside its block, before it lets go): nobody else gets it;
    then the child's exit code is 0."""
    other = fencelock.Lock(r, key, timeout=5, thread_local=False)
    taken_while_held = False
    while True:
        finished, status = os.waitpid(pid, os.WNOHANG)
        if finished:
            break
        if other.acquire(blocking=False):
            taken_while_held = taken_while_held or not r.llen("done")
            other.release()
        time.sleep(TTL / 5)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not taken_while_held, "another client took the lock the child held"


def used_in_parent(locks: fencelock.Locks) -> None:
    """What a start-up step does: a lock taken and released, which leaves the
    refresher thread lingering and the session named when the fork comes."""
    with locks.lock("startup", ttl=TTL):
        pass


def test_a_child_keeps_a_lock_three_times_its_ttl(r: redis.Redis) -> None:
    locks = fencelock.Locks(r)
    used_in_parent(locks)

    def child() -> None:
        with locks.lock("job", ttl=TTL) as lease:
            r.rpush("held", lease.fence)
            time.sleep(3 * TTL)
            lease.ensure_held(check=True)
            r.rpush("done", 1)

    pid = forked(child)
    assert r.blpop(["held"], timeout=10) is not None
    held_by_the_child_throughout(r, pid, "lock:job")


def test_the_parents_lease_stays_the_parents(r: redis.Redis) -> None:
    """A fork inside the parent's block: the child neither refreshes, releases nor
    closes the parent's lease; the parent keeps refreshing it past its ttl."""
    locks = fencelock.Locks(r)
    with locks.lock("parent", ttl=TTL) as lease:

        def child() -> None:
            with pytest.raises(fencelock.LockError, match="forked child"):
                locks.release(lease)
            locks.close()  # its own sessions: none

        assert exit_code(forked(child)) == 0
        time.sleep(3 * TTL)
        lease.ensure_held(check=True)
    assert lease.released


def test_a_siblings_close_leaves_the_others_locks_held(r: redis.Redis) -> None:
    locks = fencelock.Locks(r)
    used_in_parent(locks)

    def holder() -> None:
        with locks.lock("a", ttl=TTL) as lease:
            r.rpush("a-held", 1)
            assert r.blpop(["b-closed"], timeout=10) is not None
            time.sleep(2 * TTL)
            lease.ensure_held(check=True)

    def closer() -> None:
        assert r.blpop(["a-held"], timeout=10) is not None
        with locks.lock("b", ttl=TTL):
            pass
        locks.close()
        # Nobody else may take the holder's lock.
        assert not fencelock.Lock(r, "lock:a", timeout=5).acquire(blocking=False)
        r.rpush("b-closed", 1)

    pids = [forked(holder), forked(closer)]
    assert [exit_code(pid) for pid in pids] == [0, 0]


def test_three_forked_workers_charge_each_order_once(r: redis.Redis) -> None:
    """Each of six orders is submitted twice to each of three workers; a charge
    takes longer than the ttl."""
    locks = fencelock.Locks(r)
    used_in_parent(locks)
    orders = [f"order-{n}" for n in range(6)]

    def worker(turn: int) -> Callable[[], None]:
        def work() -> None:
            mine = orders[turn:] + orders[:turn]
            for order in mine + mine:
                with locks.lock(order, ttl=TTL, wait=None) as lease:
                    if r.sismember("charged", order):
                        continue
                    time.sleep(WORK / 2 + TTL / 2)  # the payment call
                    lease.ensure_held()
                    r.rpush("charges", order)
                    r.sadd("charged", order)

        return work

    pids = [forked(worker(2 * turn)) for turn in range(3)]
    assert [exit_code(pid) for pid in pids] == [0, 0, 0]
    charges = sorted(cast(bytes, one).decode() for one in r.lrange("charges", 0, -1))
    assert charges == orders


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_pool_runs_jobs_longer_than_the_ttl_one_at_a_time(
    server: Server, r: redis.Redis, method: str
) -> None:
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    _client, locks = manager(server.url)
    used_in_parent(locks)
    context = multiprocessing.get_context(method)
    with context.Pool(4) as pool:
        results = pool.starmap(job, [(server.url, n) for n in range(6)])
    assert sorted(number for number, _, _ in results) == list(range(6))
    assert [inside for _, inside, _ in results] == [1] * 6
    assert len({fence for _, _, fence in results}) == 6


# A start-up step under a lock, ``close()``, then a fork, in a fresh interpreter (the
# test process has other tests' refresher threads lingering): how many threads the
# process had right after ``close()``, as Python and as the kernel count them (the
# kernel's count is what Python 3.12 reads to warn "This process is multi-threaded,
# use of fork() may lead to deadlocks", counted here too), and whether the child could
# lock with the manager closed in the parent.
FORK_AFTER_CLOSE = """
    import os, sys, threading, traceback, warnings
    import redis, fencelock

    warnings.simplefilter("always", DeprecationWarning)
    client = redis.Redis.from_url(sys.argv[1])
    locks = fencelock.Locks(client, session=sys.argv[2] == "1")
    with locks.lock("startup", ttl=5):
        pass
    locks.close()
    threads = threading.active_count(), len(os.listdir("/proc/self/task"))
    with warnings.catch_warnings(record=True) as warned:
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            with locks.lock("in-the-child", ttl=5) as lease:
                lease.ensure_held(check=True)
            locks.close()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    forks_warned = [w for w in warned if "multi-threaded" in str(w.message)]
    print(*threads, len(forks_warned), os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(
    not os.path.isdir("/proc/self/task"), reason="the kernel's thread list is Linux's"
)
@pytest.mark.parametrize("session", [True, False])
def test_a_fork_right_after_close_is_single_threaded(url: str, session: bool) -> None:
    """``close()`` returns once the refresher thread has ended, which would linger
    2 s after the last lease: the fork that follows is a single-threaded process's,
    and the child locks with the manager closed in the parent. ``close()`` used to
    return while the thread was still ending (without sessions, still lingering)."""
    code = textwrap.dedent(FORK_AFTER_CLOSE)
    result = subprocess.run(
        [sys.executable, "-c", code, url, str(int(session))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "1", "0", "0"], result.stderr


def test_a_dropin_lock_held_by_the_parent_is_not_the_childs(r: redis.Redis) -> None:
    lock = r.lock("dropin", timeout=5, lock_class=fencelock.Lock)
    assert lock.acquire()

    def child() -> None:
        assert not lock.owned()
        with pytest.raises(fencelock.LockError):
            lock.release()

    assert exit_code(forked(child)) == 0
    assert lock.owned()
    lock.release()


def test_an_asyncio_manager_used_before_the_fork_is_refused_in_the_child(
    url: str,
) -> None:
    used = fencelock.asyncio.Locks(redis.asyncio.Redis.from_url(url))
    unused = fencelock.asyncio.Locks(redis.asyncio.Redis.from_url(url))

    async def use(locks: fencelock.asyncio.Locks) -> None:
        async with locks.lock("async", ttl=TTL):
            pass
        await locks.aclose()

    asyncio.run(use(used))

    def child() -> None:
        with pytest.raises(RuntimeError, match=r"used before os\.fork"):
            asyncio.run(use(used))
        asyncio.run(use(unused))  # first used here: it works

    assert exit_code(forked(child)) == 0


def test_an_election_used_before_the_fork_leads_in_the_child(r: redis.Redis) -> None:
    """The parent led once; the child leads for three times the ttl, kept alive by
    its own refresher, while a candidate of the parent's waits."""
    election = fencelock.Election(r, "leader", ttl=TTL)
    with election.campaign("parent"):
        pass

    def child() -> None:
        with election.campaign("child") as leadership:
            r.rpush("leading", leadership.fence)
            time.sleep(3 * TTL)
            leadership.ensure_held(check=True)
            r.rpush("done", 1)

    pid = forked(child)
    assert r.blpop(["leading"], timeout=10) is not None
    held_by_the_child_throughout(r, pid, "lock:leader")


def test_forked_workers_run_an_operation_once_and_a_forked_run_stays_the_parents(
    r: redis.Redis,
) -> None:
    locks = fencelock.Locks(r)
    used_in_parent(locks)

    @locks.idempotent(key=lambda order: f"pay-{order}", keep=60, ttl=TTL)
    def pay(order: int) -> dict[str, int]:
        r.rpush("charged", order)
        time.sleep(3 * TTL)  # kept alive by the child's own session meanwhile
        return {"order": order}

    def worker() -> None:
        r.rpush("answers", str(pay(7)))

    pids = [forked(worker) for _ in range(3)]
    assert [exit_code(pid) for pid in pids] == [0, 0, 0]
    assert r.lrange("charged", 0, -1) == [b"7"]
    assert r.lrange("answers", 0, -1) == [b"{'order': 7}"] * 3

    parent = os.getpid()

    def run_report() -> int:
        with locks.once_result("report", ttl=TTL, keep=60) as once:
            pid = os.fork()
            # The child leaves its copy of the block too: it must store nothing.
            once.set("built" if pid else "the child's copy")
            if pid:
                assert exit_code(pid) == 0
                time.sleep(2 * TTL)  # still the parent's run, kept alive
        return pid

    try:
        pid = run_report()
    except BaseException:
        if os.getpid() != parent:
            traceback.print_exc()
            os._exit(1)
        raise
    if pid == 0:
        os._exit(0)
    with locks.once_result("report", keep=60) as replay:
        assert replay.replayed and replay.result == "built"
    locks.close()
