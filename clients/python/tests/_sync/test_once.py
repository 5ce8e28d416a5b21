# Generated from tests/_async/test_once.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""``Locks.once_result`` and ``@Locks.idempotent`` (run once, ``LOCK.ONCE`` /
``LOCK.DONE``) against a real server: concurrent duplicates get the one run's
result, the keep time, a failed or crashed run retried once under a higher fence,
a lost run stored nowhere, fingerprints, serializers, ``LOCK.INFO``'s run fields.
Threads on the sync side, tasks here (``spawn``)."""

from __future__ import annotations

import ast
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.exceptions

from fencelock import (
    FingerprintMismatch,
    LockLost,
    LockNotAcquired,
    Locks,
)

from .helpers import join, sleep, spawn, until

RUNNER = Path(__file__).resolve().parents[1] / "once_runner.py"


def test_twenty_concurrent_duplicates_one_runs(r: redis.Redis) -> None:
    locks = Locks(r)
    runs: list[int] = []

    def submit() -> tuple[bool, int, Any]:
        with locks.once_result("order-17", ttl=10, keep=60, wait=10) as once:
            if not once.replayed:
                assert once.lease is not None and once.lease.fence == once.fence
                runs.append(once.fence)
                sleep(0.3)  # the others arrive while it runs
                once.set({"order": 17, "status": "paid"})
        return once.replayed, once.fence, once.result

    started = [spawn(submit) for _ in range(20)]
    for task, _ in started:
        join(task, 15)
    outcomes = [outcome for _, outcome in started]
    assert all("result" in outcome for outcome in outcomes), outcomes
    answers = [outcome["result"] for outcome in outcomes]
    assert len(runs) == 1
    assert sorted(replayed for replayed, _, _ in answers) == [False] + [True] * 19
    assert {(fence, str(result)) for _, fence, result in answers} == {
        (runs[0], str({"order": 17, "status": "paid"}))
    }
    locks.close()


def test_kept_for_keep_then_runs_again(r: redis.Redis) -> None:
    locks = Locks(r)
    with locks.once_result("mail-9", keep=0.5) as first:
        assert not first.replayed
        first.set("sent")
    # Closing the session leaves the done record: it is no holding any more.
    locks.close()
    with locks.once_result("mail-9", keep=0.5) as again:
        assert again.replayed and again.lease is None
        assert (again.result, again.fence) == ("sent", first.fence)
    info = locks.info("mail-9")
    assert info is not None
    assert (info["state"], info["mode"], info["held"]) == ("done", "done", False)
    assert (info["fence"], info["result_size"]) == (first.fence, len(b'"sent"'))

    def gone() -> bool:
        return not r.exists("lock:mail-9")

    until(gone, 5, "the keep time to end")
    with locks.once_result("mail-9", keep=0.5) as later_run:
        assert not later_run.replayed and later_run.fence > first.fence
        later_info = locks.info("mail-9")
        assert later_info is not None and later_info["state"] == "running"
        assert later_info["keep_ms"] == 500
    assert later_run.result is None
    locks.close()


def test_an_exception_gives_the_run_up(r: redis.Redis) -> None:
    locks = Locks(r)
    with pytest.raises(RuntimeError, match="card declined"):
        with locks.once_result("pay-3", keep=60) as failed:
            raise RuntimeError("card declined")
    assert r.exists("lock:pay-3") == 0
    with locks.once_result("pay-3", keep=60) as retried:
        assert not retried.replayed and retried.fence > failed.fence
        retried.set("paid")
    with locks.once_result("pay-3", keep=60) as replay:
        assert replay.replayed and replay.result == "paid"
    locks.close()


def start_runner(url: str, name: str, ttl: float) -> subprocess.Popen[bytes]:
    """``once_runner.py`` claiming ``name``: started, and its first line read, before
    any task runs beside the test, so nothing waits on the loop while it blocks."""
    return subprocess.Popen(
        [sys.executable, str(RUNNER), url, name, str(ttl)], stdout=subprocess.PIPE
    )


def test_a_run_killed_mid_work_is_run_once_more(url: str, r: redis.Redis) -> None:
    runner = start_runner(url, "invoice-5", ttl=1)
    try:
        assert runner.stdout is not None
        role, crashed = runner.stdout.readline().decode().split()
        assert role == "running"
        locks = Locks(r)
        runs: list[int] = []

        def duplicate() -> tuple[bool, int, Any]:
            with locks.once_result("invoice-5", ttl=5, keep=60, wait=10) as once:
                if not once.replayed:
                    runs.append(once.fence)
                    sleep(0.3)
                    once.set(["invoice", 5])
            return once.replayed, once.fence, once.result

        started = [spawn(duplicate) for _ in range(5)]

        def queued() -> bool:
            info = locks.info("invoice-5")
            return info is not None and info["waiters"] == 5

        until(queued, 5, "the duplicates to wait")
        os.kill(runner.pid, signal.SIGKILL)
        for task, _ in started:
            join(task, 15)
    finally:
        runner.kill()
        runner.wait()
    answers = [outcome.get("result") for _, outcome in started]
    assert None not in answers, [outcome for _, outcome in started]
    assert len(runs) == 1 and runs[0] > int(crashed)
    assert sorted(replayed for replayed, _, _ in answers) == [False] + [True] * 4
    assert {(fence, tuple(result)) for _, fence, result in answers} == {
        (runs[0], ("invoice", 5))
    }
    locks.close()


def test_a_lost_run_stores_nothing(r: redis.Redis) -> None:
    locks = Locks(r)
    with pytest.raises(LockLost):
        with locks.once_result("report-2", keep=60) as lost:
            r.delete("lock:report-2")  # gone under the run
            lost.set("stale")
    with locks.once_result("report-2", keep=60) as next_run:
        assert not next_run.replayed and next_run.fence > lost.fence
    locks.close()


def test_a_changed_fingerprint_is_refused_running_and_done(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    order = {"order": 8, "amount": 100}
    with locks.once_result("order-8", keep=60, fingerprint=order) as run:
        with pytest.raises(FingerprintMismatch) as running:
            with locks.once_result(
                "order-8", keep=60, wait=0, fingerprint={**order, "amount": 101}
            ):
                pass
        with pytest.raises(LockNotAcquired):
            with locks.once_result("order-8", keep=60, wait=0, fingerprint=order):
                pass
        run.set("paid")
    assert str(running.value) == (
        "FINGERPRINT this key was claimed with another fingerprint"
    )
    assert running.value.key == "lock:order-8"
    with pytest.raises(FingerprintMismatch) as done:
        with locks.once_result("order-8", keep=60, fingerprint="sha256:other"):
            pass
    copy = pickle.loads(pickle.dumps(done.value))
    assert (type(copy), copy.key, str(copy)) == (
        FingerprintMismatch,
        "lock:order-8",
        str(done.value),
    )
    for same in (order, {"amount": 100, "order": 8}, None):
        with locks.once_result("order-8", keep=60, fingerprint=same) as replay:
            assert replay.replayed and replay.result == "paid"
    locks.close()


class Literal:
    """A custom serializer: Python literals as text (``str`` from ``dumps``)."""

    def dumps(self, value: Any) -> str:
        return repr(value)

    def loads(self, data: bytes) -> Any:
        return ast.literal_eval(data.decode())


def test_results_round_trip_through_the_serializer(
    any_r: redis.Redis,
) -> None:
    locks = Locks(any_r)
    values: list[tuple[str, Any, Any]] = [
        ("json", {"id": "o-1", "items": [1, 2.5, None, True], "note": "ü"}, None),
        ("number", 42, None),
        ("custom", {("a", 1), ("b", 2)}, Literal()),
    ]
    for name, value, serializer in values:
        extra = {} if serializer is None else {"serializer": serializer}
        with locks.once_result(name, keep=60, **extra) as first:
            first.set(value)
        with locks.once_result(name, keep=60, **extra) as replay:
            assert replay.replayed and replay.result == value
    # What other clients (and redis-cli) read: the JSON text itself.
    reply = any_r.execute_command("LOCK.ONCE", "lock:number", 1000, "KEEP", 1000)
    assert reply[2] in (b"42", "42")
    locks.close()


def test_bytes_results_are_passed_through(r: redis.Redis) -> None:
    locks = Locks(r)
    raw = bytes(range(256))
    with locks.once_result("blob", keep=60) as first:
        first.set(raw)
    with locks.once_result("blob", keep=60) as replay:
        assert replay.replayed and replay.result == raw
    with pytest.raises(TypeError):
        with locks.once_result("unjsonable", keep=60) as refused:
            refused.set(object())
    assert r.exists("lock:unjsonable") == 0, "the run was given up"
    locks.close()


def test_the_idempotent_decorator(r: redis.Redis) -> None:
    locks = Locks(r)
    charges: list[tuple[str, int]] = []

    @locks.idempotent(
        key=lambda order_id, amount: f"charge-{order_id}",
        keep=60,
        fingerprint=lambda order_id, amount: {"amount": amount},
    )
    def charge(order_id: str, amount: int) -> dict[str, Any]:
        charges.append((order_id, amount))
        if amount < 0:
            raise ValueError("negative amount")
        return {"order": order_id, "charged": amount}

    assert charge.__name__ == "charge"
    first = charge("o-1", 30)
    assert charge("o-1", 30) == first == {"order": "o-1", "charged": 30}
    assert charges == [("o-1", 30)]
    with pytest.raises(FingerprintMismatch):
        charge("o-1", 31)
    with pytest.raises(ValueError):
        charge("o-2", -1)
    with pytest.raises(ValueError):
        charge("o-2", -1)  # not stored: it ran again
    assert charges == [("o-1", 30), ("o-2", -1), ("o-2", -1)]
    locks.close()


def test_a_result_over_the_servers_limit_gives_the_run_up(
    r: redis.Redis,
) -> None:
    locks = Locks(r)
    r.config_set("fencelock.max-result-length", 8)
    try:
        with pytest.raises(redis.exceptions.ResponseError, match="maximum allowed"):
            with locks.once_result("big", keep=60) as too_big:
                too_big.set("x" * 20)
    finally:
        r.config_set("fencelock.max-result-length", 65536)
    assert r.exists("lock:big") == 0, "given up, not left running"
    locks.close()
