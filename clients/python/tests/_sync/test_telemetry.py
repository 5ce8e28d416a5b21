# Generated from tests/_async/test_telemetry.py by scripts/unasync.py: edit that
# file and run `make python-unasync`, never this one.
"""OpenTelemetry (the ``otel`` extra), read back from the SDK's in-memory span exporter
and metric reader (``telemetry_capture``): a span per acquire with its outcome
(granted, busy, timed out, deadlock, replayed) and fence, a span per holding with its
duration and, when lost, why, current while the block holding the lock runs;
histograms of wait and hold time and a counter of losses; the log record of a loss
with the same fields and the holding span's trace context. (A cancelled asyncio wait
is tests/test_asyncio_telemetry.py.) For the manager, the drop-in,
multi-key locks, shared locks and semaphores, and run once. (That ``import fencelock``
imports no OpenTelemetry, and that nothing is recorded without it, is
tests/test_telemetry_optional.py.)"""

from __future__ import annotations

import logging

import pytest
import redis
from opentelemetry import trace
from opentelemetry.trace import SpanContext
from telemetry_capture import (
    boundaries,
    clear,
    count,
    named,
    only,
    parent_of,
    recorded,
    span_id,
    spans,
    unit,
)

import fencelock
from fencelock import Deadlock, LockLost, LockNotAcquired, MultiLock

from .helpers import drop_in, join, spawn, until

HOLD = "fencelock.hold"


def server_of(r: redis.Redis) -> tuple[str, int]:
    kwargs = r.connection_pool.connection_kwargs
    return kwargs["host"], kwargs["port"]


def test_a_managed_lock_has_an_acquire_span_and_a_holding_span(
    r: redis.Redis,
) -> None:
    clear()
    locks = fencelock.Locks(r, session=False)
    granted_before = count(
        "fencelock.wait.duration",
        fencelock_outcome="granted",
        fencelock_lock_mode="exclusive",
        db_operation_name="LOCK.ACQUIRE",
    )
    with locks.lock("report", ttl=10) as lease:
        fence = lease.fence
        assert spans(HOLD, "lock:report") == [], "the holding has not ended yet"
    acquired = only("LOCK.ACQUIRE", "lock:report")
    host, port = server_of(r)
    assert acquired["db.system.name"] == "redis"
    assert acquired["db.operation.name"] == "LOCK.ACQUIRE"
    assert acquired["server.address"] == host and acquired["server.port"] == port
    assert acquired["db.namespace"] == "0"
    assert acquired["fencelock.lock.mode"] == "exclusive"
    assert acquired["fencelock.outcome"] == "granted"
    assert acquired["fencelock.fence"] == fence
    assert acquired["fencelock.wait.timeout"] == 0.0
    assert acquired["fencelock.wait.duration"] >= 0
    assert "error.type" not in acquired
    held = only(HOLD, "lock:report")
    assert held["fencelock.fence"] == fence
    assert held["fencelock.lost"] is False and "fencelock.lost.reason" not in held
    assert held["fencelock.hold.duration"] >= 0
    assert (
        count(
            "fencelock.wait.duration",
            fencelock_outcome="granted",
            fencelock_lock_mode="exclusive",
            db_operation_name="LOCK.ACQUIRE",
        )
        == granted_before + 1
    )
    assert unit("fencelock.wait.duration") == "s"
    assert unit("fencelock.hold.duration") == "s"
    assert 0.001 in boundaries("fencelock.wait.duration"), "seconds, not ms"


def test_busy_and_timed_out_acquires_and_the_wait_histogram(
    r: redis.Redis,
) -> None:
    clear()
    locks = fencelock.Locks(r, session=False)
    holder = locks.acquire("busy", ttl=10)
    with pytest.raises(LockNotAcquired):
        locks.acquire("busy", ttl=10, wait=0)
    timed_out_before = count("fencelock.wait.duration", fencelock_outcome="timed_out")
    waited_before = recorded("fencelock.wait.duration", fencelock_outcome="timed_out")
    with pytest.raises(LockNotAcquired):
        locks.acquire("busy", ttl=10, wait=0.2)
    locks.release(holder)
    tried, waited = (
        dict(span.attributes or {}) for span in spans("LOCK.ACQUIRE", "lock:busy")[1:]
    )
    assert tried["fencelock.outcome"] == "busy" and "fencelock.fence" not in tried
    assert waited["fencelock.outcome"] == "timed_out"
    assert waited["fencelock.wait.timeout"] == 0.2
    # The histogram has the wait the span has: one value, the same number.
    assert (
        count("fencelock.wait.duration", fencelock_outcome="timed_out")
        == timed_out_before + 1
    )
    assert recorded(
        "fencelock.wait.duration", fencelock_outcome="timed_out"
    ) - waited_before == pytest.approx(waited["fencelock.wait.duration"])


def test_a_lost_holding_says_why_in_its_span_its_counter_and_its_log_record(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    clear()
    locks = fencelock.Locks(r, session=False)
    losses_before = count("fencelock.losses", fencelock_lost_reason="gone")
    lost_holds_before = count("fencelock.hold.duration", fencelock_lost=True)
    caplog.set_level(logging.WARNING, logger="fencelock")
    with pytest.raises(LockLost):
        with locks.lock("lost", ttl=30) as lease:
            r.delete("lock:lost")
            lease.ensure_held(check=True)
    held = only(HOLD, "lock:lost")
    assert held["fencelock.lost"] is True
    assert held["fencelock.lost.reason"] == "gone"
    assert held["error.type"] == "LockLost"
    assert held["fencelock.fence"] == lease.fence
    assert spans(HOLD, "lock:lost")[0].status.status_code.name == "ERROR"
    assert count("fencelock.losses", fencelock_lost_reason="gone") == losses_before + 1
    assert (
        count("fencelock.hold.duration", fencelock_lost=True) == lost_holds_before + 1
    )
    (record,) = [one for one in caplog.records if "lost the lock" in one.message]
    fields = record.__dict__
    for name in (
        "fencelock.lock.name",
        "fencelock.fence",
        "fencelock.lock.mode",
        "fencelock.lost",
        "fencelock.lost.reason",
        "server.address",
        "server.port",
    ):
        assert fields[name] == held[name], name
    assert fields["fencelock.hold.duration"] >= 0
    hold_span = spans(HOLD, "lock:lost")[0].get_span_context()
    assert hold_span is not None
    assert fields["trace_id"] == format(hold_span.trace_id, "032x")
    assert fields["span_id"] == format(hold_span.span_id, "016x")
    assert fields["trace_flags"] == format(int(hold_span.trace_flags), "02x")


class CurrentSpans(logging.Handler):
    """The span current when each record is emitted: what OpenTelemetry's logging
    handler puts in the record as its trace and span id."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[SpanContext] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "lost the lock" in record.getMessage():
            self.seen.append(trace.get_current_span().get_span_context())


def test_a_loss_found_outside_the_block_is_logged_inside_its_holding_span(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    clear()
    locks = fencelock.Locks(r, session=False)
    current = CurrentSpans()
    logger = logging.getLogger("fencelock")
    logger.addHandler(current)
    caplog.set_level(logging.WARNING, logger="fencelock")
    try:
        lease = locks.acquire("lost-outside", ttl=30)
        r.delete("lock:lost-outside")
        with pytest.raises(LockLost):
            lease.ensure_held(check=True)
    finally:
        logger.removeHandler(current)
    (hold_span,) = spans(HOLD, "lock:lost-outside")
    context = hold_span.get_span_context()
    assert context is not None
    assert [(seen.trace_id, seen.span_id) for seen in current.seen] == [
        (context.trace_id, context.span_id)
    ]
    (record,) = [one for one in caplog.records if "lost the lock" in one.message]
    assert record.__dict__["span_id"] == format(context.span_id, "016x")
    assert not trace.get_current_span().get_span_context().is_valid, "restored"
    locks.close()


def test_the_holding_span_is_current_while_the_block_runs(
    r: redis.Redis,
) -> None:
    """Spans made inside a block holding a lock are children of its holding span;
    nested blocks nest; leaving a block (by an exception too) restores what was
    current before it."""
    clear()
    tracer = trace.get_tracer("fencelock-tests")
    locks = fencelock.Locks(r, session=False)
    with locks.lock("outer", ttl=10):
        with tracer.start_as_current_span("work:outer"):
            pass
        with locks.lock("inner", ttl=10):
            with tracer.start_as_current_span("work:inner"):
                pass
        with tracer.start_as_current_span("work:after-inner"):
            pass
    with pytest.raises(ValueError):
        with locks.lock("raising", ttl=10):
            raise ValueError("the block failed")
    with tracer.start_as_current_span("work:after"):
        pass
    (outer,) = spans(HOLD, "lock:outer")
    (inner,) = spans(HOLD, "lock:inner")
    (work_outer,) = named("work:outer")
    (work_inner,) = named("work:inner")
    (after_inner,) = named("work:after-inner")
    (after,) = named("work:after")
    assert parent_of(work_outer) == span_id(outer)
    assert parent_of(inner) == span_id(outer)
    assert parent_of(work_inner) == span_id(inner)
    assert parent_of(after_inner) == span_id(outer)
    assert parent_of(after) is None
    assert not trace.get_current_span().get_span_context().is_valid


def test_the_drop_ins_and_a_run_once_make_their_holding_span_current(
    r: redis.Redis,
) -> None:
    clear()
    tracer = trace.get_tracer("fencelock-tests")
    with drop_in(r, "current-dropin", timeout=10):
        with tracer.start_as_current_span("work:dropin"):
            pass
    with MultiLock(r, ["{c}:a", "{c}:b"], timeout=10):
        with tracer.start_as_current_span("work:multi"):
            pass
    locks = fencelock.Locks(r, session=False)
    with locks.once_result("current-once", keep=60) as once:
        with tracer.start_as_current_span("work:once"):
            once.set("done")
    (work_dropin,) = named("work:dropin")
    (work_multi,) = named("work:multi")
    (work_once,) = named("work:once")
    assert parent_of(work_dropin) == span_id(spans(HOLD, "current-dropin")[0])
    assert parent_of(work_multi) == span_id(spans(HOLD, ["{c}:a", "{c}:b"])[0])
    assert parent_of(work_once) == span_id(spans(HOLD, "lock:current-once")[0])
    assert not trace.get_current_span().get_span_context().is_valid


def test_the_drop_in_lock_has_the_same_spans(r: redis.Redis) -> None:
    clear()
    lock = drop_in(r, "dropin", timeout=10)
    assert lock.acquire(blocking=False)
    fence = lock.fence
    lock.release()
    acquired = only("LOCK.ACQUIRE", "dropin")
    assert acquired["fencelock.outcome"] == "granted"
    assert acquired["fencelock.fence"] == fence
    assert acquired["fencelock.wait.timeout"] == 0.0
    held = only(HOLD, "dropin")
    assert held["fencelock.fence"] == fence and held["fencelock.lost"] is False
    # A release that finds the lease gone ends the holding as lost.
    assert lock.acquire()
    r.delete("dropin")
    with pytest.raises(LockLost):
        lock.release()
    lost = dict(spans(HOLD, "dropin")[1].attributes or {})
    assert lost["fencelock.lost"] is True
    assert lost["fencelock.lost.reason"] == "not-held"


def test_a_drop_in_that_is_not_granted_is_busy_or_timed_out(
    r: redis.Redis,
) -> None:
    clear()
    holder = drop_in(r, "taken", timeout=10)
    assert holder.acquire()
    other = drop_in(r, "taken", timeout=10)
    assert not other.acquire(blocking=False)
    assert not other.acquire(blocking_timeout=0.1)
    holder.release()
    outcomes = [
        (span.attributes or {})["fencelock.outcome"]
        for span in spans("LOCK.ACQUIRE", "taken")
    ]
    assert outcomes == ["granted", "busy", "timed_out"]


def test_the_drop_ins_record_the_wait_asked_for(r: redis.Redis) -> None:
    """``fencelock.wait.timeout`` is the ``blocking_timeout`` given, not what was left
    of it when the request went out."""
    clear()
    lock = drop_in(r, "asked", timeout=10, blocking_timeout=1)
    assert lock.acquire()
    lock.release()
    assert lock.acquire(blocking_timeout=2.5)
    lock.release()
    both = MultiLock(r, ["{w}:a", "{w}:b"], timeout=10, blocking_timeout=1)
    assert both.acquire()
    both.release()
    asked = [
        (span.attributes or {})["fencelock.wait.timeout"]
        for span in spans("LOCK.ACQUIRE", "asked")
    ]
    assert asked == [1.0, 2.5]
    assert only("LOCK.ACQUIREALL", ["{w}:a", "{w}:b"])["fencelock.wait.timeout"] == 1.0


def test_shared_locks_and_semaphores_say_their_mode(
    r: redis.Redis,
) -> None:
    clear()
    locks = fencelock.Locks(r, session=False)
    with locks.lock("pool", ttl=10, limit=3):
        pass
    with locks.lock("table", ttl=10, shared=True):
        pass
    semaphore = fencelock.Semaphore(r, "permits", 2, timeout=10)
    with semaphore:
        pass
    assert only("LOCK.ACQUIRE", "lock:pool")["fencelock.lock.mode"] == "semaphore"
    assert only(HOLD, "lock:pool")["fencelock.lock.mode"] == "semaphore"
    assert only("LOCK.ACQUIRE", "lock:table")["fencelock.lock.mode"] == "shared"
    assert only(HOLD, "lock:table")["fencelock.lock.mode"] == "shared"
    assert only("LOCK.ACQUIRE", "permits")["fencelock.lock.mode"] == "semaphore"
    assert only(HOLD, "permits")["fencelock.lock.mode"] == "semaphore"


def test_multi_key_locks_have_one_acquire_span_with_every_name(
    r: redis.Redis,
) -> None:
    clear()
    both = MultiLock(r, ["{m}:a", "{m}:b"], timeout=10)
    with both:
        fences = both.fences
    acquired = only("LOCK.ACQUIREALL", ["{m}:a", "{m}:b"])
    assert acquired["db.operation.name"] == "LOCK.ACQUIREALL"
    assert list(acquired["fencelock.fences"]) == fences
    held = only(HOLD, ["{m}:a", "{m}:b"])
    assert list(held["fencelock.fences"]) == fences and held["fencelock.lost"] is False
    locks = fencelock.Locks(r)
    with locks.lock_all(["{n}:a", "{n}:b"], ttl=10) as managed:
        managed_fences = managed.fences
    acquired = only("LOCK.ACQUIREALL", ["lock:{n}:a", "lock:{n}:b"])
    assert list(acquired["fencelock.fences"]) == managed_fences
    # The manager's leases are held one by one: a holding span each.
    assert only(HOLD, "lock:{n}:a")["fencelock.fence"] == managed_fences[0]
    assert only(HOLD, "lock:{n}:b")["fencelock.fence"] == managed_fences[1]
    locks.close()


def test_run_once_has_a_claim_span_granted_then_replayed(
    r: redis.Redis,
) -> None:
    clear()
    locks = fencelock.Locks(r, session=False)
    with locks.once_result("charge-1", keep=60) as once:
        once.set("paid")
        fence = once.fence
    with locks.once_result("charge-1", keep=60) as duplicate:
        assert duplicate.replayed
    ran, replayed = (
        dict(span.attributes or {}) for span in spans("LOCK.ONCE", "lock:charge-1")
    )
    assert ran["fencelock.outcome"] == "granted" and ran["fencelock.fence"] == fence
    assert replayed["fencelock.outcome"] == "replayed"
    assert replayed["fencelock.fence"] == fence
    held = only(HOLD, "lock:charge-1")
    assert held["fencelock.fence"] == fence and held["fencelock.lost"] is False


def test_a_refused_wait_is_a_deadlock_outcome(r: redis.Redis) -> None:
    """Token A holds a and waits for b; token B holds b and asks for a."""
    clear()
    a = fencelock.Lock(r, "dl:a", timeout=30, thread_local=False)
    b = fencelock.Lock(r, "dl:b", timeout=30, thread_local=False)
    assert a.acquire(token="A") and b.acquire(token="B")
    waiting = fencelock.Lock(
        r, "dl:b", timeout=30, blocking_timeout=10, thread_local=False
    )
    task, outcome = spawn(lambda: waiting.acquire(token="A"))

    def queued() -> bool:
        info = fencelock.lock_info(r, "dl:b")
        return info is not None and info["waiters"] == 1

    until(queued, 5, "A queued for dl:b")
    with pytest.raises(Deadlock):
        fencelock.Lock(r, "dl:a", timeout=30).acquire(token="B", blocking_timeout=10)
    b.release()
    join(task, 5)
    assert outcome == {"result": True}
    waiting.release()
    a.release()
    refused = dict(spans("LOCK.ACQUIRE", "dl:a")[1].attributes or {})
    assert refused["fencelock.outcome"] == "deadlock"
    assert refused["error.type"] == "Deadlock"
