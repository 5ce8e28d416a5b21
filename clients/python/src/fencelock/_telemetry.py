"""What the locks tell OpenTelemetry (the ``otel`` extra): a span per acquire and per
holding, histograms of wait and hold time and a counter of losses, through the global
tracer and meter providers. Written once for the sync and asyncio sides: nothing here
waits or sends.

Without ``opentelemetry-api`` installed nothing is imported and every call below
returns a shared do-nothing object after one check of a module constant (``INSTALLED``,
found at import time without importing the package). With it, ``opentelemetry`` is
imported at the first acquire, never by ``import fencelock``; spans and measurements
go to whatever providers the application set (no-ops until it sets some).

Names follow OpenTelemetry's semantic conventions where they have one (database client
spans: ``db.system.name``, ``db.operation.name``, ``db.namespace``, ``server.address``,
``server.port``, ``error.type``); the rest is ``fencelock.*``. ``hold_fields`` is also
what the log record of a loss carries as ``extra=`` (``_async/lease.py``), with the
holding span's trace context (``Holding.trace_fields``), and the record is made while
that span is current, so OpenTelemetry's logging handler links it to the span too.

A holding's span is made current (``Holding.enter``/``leave``, a ``contextvars``
context: a thread's own, a task's own) while the block that holds the lock runs, so
the spans made inside it are its children."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, Optional, Union

from ._protocol import Key
from ._servers import is_cluster
from .errors import Deadlock, LockNotAcquired

# Found without importing it: ``import fencelock`` must not import OpenTelemetry.
INSTALLED = importlib.util.find_spec("opentelemetry") is not None

# Outcomes of an acquire (``fencelock.outcome``).
GRANTED = "granted"
BUSY = "busy"  # one try (wait 0), held by someone else
TIMED_OUT = "timed_out"  # the wait ended before the grant
DEADLOCK = "deadlock"  # refused: the wait would close a cycle
CANCELLED = "cancelled"  # the caller gave up (asyncio: cancelled, ``wait_for``)
REPLAYED = "replayed"  # a run-once duplicate answered with the stored result
ERROR = "error"  # any other failure (``error.type`` says which)

# Seconds: from a free lock's round trip to a wait of minutes. OpenTelemetry's default
# boundaries are meant for milliseconds.
BOUNDARIES = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)

Attributes = dict[str, Union[str, bool, int, float, Sequence[str], Sequence[int]]]


def _text(key: Key) -> str:
    if isinstance(key, str):
        return key
    return bytes(key).decode(errors="replace")


def server_fields(client: Any, key: Key) -> Attributes:
    """``server.address``/``server.port`` (and ``db.namespace``) of the server that
    holds ``key``, as far as the client knows without asking anyone."""
    fields: Attributes = {}
    if is_cluster(client):
        try:
            node = client.get_node_from_key(key)
        except Exception:  # an asyncio cluster client not yet initialised
            return fields
        fields["server.address"] = str(node.host)
        fields["server.port"] = int(node.port)
        return fields
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    if "path" in kwargs:
        fields["server.address"] = str(kwargs["path"])
    elif "host" in kwargs:
        fields["server.address"] = str(kwargs["host"])
        fields["server.port"] = int(kwargs.get("port", 6379))
    if "db" in kwargs:
        fields["db.namespace"] = str(kwargs["db"])
    return fields


def hold_fields(
    client: Any,
    keys: Sequence[Key],
    fence: Union[int, Sequence[int]],
    mode: str,
    duration: float,
    lost: Optional[str],
) -> Attributes:
    """What a holding's span ends with, and a loss's log record carries: the lock
    (one name, or the names of a multi-key lock), its fence(s) and mode, how long it
    was held in seconds, whether it was lost and why (``LockLost.reason``)."""
    fields: Attributes = {"db.system.name": "redis"}
    fields.update(server_fields(client, keys[0]))
    fields.update(_names(keys, fence))
    fields["fencelock.lock.mode"] = mode
    fields["fencelock.hold.duration"] = duration
    fields["fencelock.lost"] = lost is not None
    if lost is not None:
        fields["fencelock.lost.reason"] = lost
        fields["error.type"] = "LockLost"
    return fields


def _names(keys: Sequence[Key], fence: Union[int, Sequence[int], None]) -> Attributes:
    fields: Attributes = {}
    if len(keys) == 1:
        fields["fencelock.lock.name"] = _text(keys[0])
    else:
        fields["fencelock.lock.names"] = [_text(key) for key in keys]
    if isinstance(fence, int):
        fields["fencelock.fence"] = fence
    elif fence is not None:
        fields["fencelock.fences"] = list(fence)
    return fields


class _Otel:
    """The tracer and the instruments, made at the first acquire (the providers'
    proxies forward to the providers the application sets later)."""

    def __init__(self) -> None:
        from opentelemetry import context, metrics, trace

        from ._version import __version__

        self.context = context
        self.trace = trace
        self.tracer = trace.get_tracer("fencelock", __version__)
        meter = metrics.get_meter("fencelock", __version__)
        self.waits = meter.create_histogram(
            "fencelock.wait.duration",
            unit="s",
            description="How long acquires waited, from the request to its outcome",
            explicit_bucket_boundaries_advisory=BOUNDARIES,
        )
        self.holds = meter.create_histogram(
            "fencelock.hold.duration",
            unit="s",
            description="How long locks were held, from the grant to the release or"
            " the loss",
            explicit_bucket_boundaries_advisory=BOUNDARIES,
        )
        self.losses = meter.create_counter(
            "fencelock.losses",
            unit="{loss}",
            description="Leases lost while held, by reason",
        )


_otel: Optional[_Otel] = None


def _instruments() -> _Otel:
    global _otel
    if _otel is None:
        _otel = _Otel()
    return _otel


# Attributes of a measurement: what a dashboard groups by. Never the lock name: names
# such as ``order-<id>`` would make a time series per order (the spans have them).
_METRIC_FIELDS = (
    "db.system.name",
    "db.operation.name",
    "server.address",
    "server.port",
    "fencelock.lock.mode",
    "fencelock.outcome",
    "fencelock.lost",
    "fencelock.lost.reason",
    "error.type",
)


def _metric_fields(fields: Attributes) -> Attributes:
    return {name: fields[name] for name in _METRIC_FIELDS if name in fields}


class Attempt:
    """One acquire's span (``LOCK.ACQUIRE``, ``LOCK.ACQUIREALL``, ``LOCK.ONCE``) and
    its wait measured; a context manager: an exception leaving it is the outcome
    (``LockNotAcquired``: busy or timed out, ``Deadlock``, a cancellation
    ``cancelled``, any other an error)."""

    def __init__(
        self,
        client: Any,
        keys: Sequence[Key],
        operation: str,
        mode: str,
        wait: Optional[float],
    ) -> None:
        self.otel = _instruments()
        self.wait = wait
        self.started = time.monotonic()
        self.fields: Attributes = {
            "db.system.name": "redis",
            "db.operation.name": operation,
        }
        self.fields.update(server_fields(client, keys[0]))
        self.fields.update(_names(keys, None))
        self.fields["fencelock.lock.mode"] = mode
        if wait is not None:
            self.fields["fencelock.wait.timeout"] = float(wait)
        self.span = self.otel.tracer.start_span(
            operation,
            kind=self.otel.trace.SpanKind.CLIENT,
            attributes=self.fields,
        )
        self.outcome: Optional[str] = None

    def __enter__(self) -> Attempt:
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        if error is not None:
            self.failed(error)
        elif self.outcome is None:
            self.not_granted()

    def granted(self, fence: Union[int, Sequence[int]]) -> None:
        self._end(GRANTED, _fence_fields(fence))

    def replayed(self, fence: int) -> None:
        self._end(REPLAYED, _fence_fields(fence))

    def not_granted(self) -> None:
        """Not granted, no error: busy after one try, else the wait ran out."""
        self._end(BUSY if self.wait == 0 else TIMED_OUT, {})

    def failed(self, error: BaseException) -> None:
        if isinstance(error, LockNotAcquired):
            self.not_granted()
            return
        if _cancelled(error):
            # The caller stopped waiting (``asyncio.wait_for``, a task cancelled):
            # neither the lock's answer nor a failure.
            self._end(CANCELLED, {})
            return
        outcome = DEADLOCK if isinstance(error, Deadlock) else ERROR
        self._end(outcome, {"error.type": type(error).__qualname__}, error)

    def _end(
        self, outcome: str, fields: Attributes, error: Optional[BaseException] = None
    ) -> None:
        if self.outcome is not None:
            return
        self.outcome = outcome
        waited = time.monotonic() - self.started
        self.fields.update(fields)
        self.fields["fencelock.outcome"] = outcome
        self.fields["fencelock.wait.duration"] = waited
        self.span.set_attributes(self.fields)
        if error is not None:
            self.span.record_exception(error)
            self.span.set_status(
                self.otel.trace.Status(
                    self.otel.trace.StatusCode.ERROR, type(error).__qualname__
                )
            )
        self.span.end()
        self.otel.waits.record(waited, _metric_fields(self.fields))


def _cancelled(error: BaseException) -> bool:
    """Whether ``error`` is asyncio's cancellation (asyncio is not imported for it: a
    program that never imported it cannot be cancelled by it)."""
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(error, asyncio.CancelledError)


def _fence_fields(fence: Union[int, Sequence[int]]) -> Attributes:
    if isinstance(fence, int):
        return {"fencelock.fence": fence}
    return {"fencelock.fences": list(fence)}


class Holding:
    """One holding's span (``fencelock.hold``), from the grant to its end: released
    (or left, ``min_hold`` running out on the server) or lost (``LockLost.reason``).
    Ends once; what follows changes nothing."""

    def __init__(
        self,
        client: Any,
        keys: Sequence[Key],
        fence: Union[int, Sequence[int]],
        mode: str,
        granted_at: float,
    ) -> None:
        self.otel = _instruments()
        self.client = client
        self.keys = list(keys)
        self.fence = fence
        self.mode = mode
        self.granted_at = granted_at
        # The grant happened ``ago`` seconds before now (monotonic): the span starts
        # then on the wall clock the exporters use.
        ago = max(0.0, time.monotonic() - granted_at)
        started = time.time_ns() - int(ago * 1e9)
        self.span = self.otel.tracer.start_span(
            "fencelock.hold",
            kind=self.otel.trace.SpanKind.INTERNAL,
            start_time=started,
            attributes=hold_fields(client, keys, fence, mode, 0.0, None),
        )
        self.ended = False
        # The context to restore when the block that made the span current ends.
        self.restore: Optional[object] = None

    def enter(self) -> None:
        """Makes the span current in this thread's (task's) context until ``leave``:
        the spans made by the block holding the lock are its children."""
        if self.restore is None:
            current = self.otel.trace.set_span_in_context(self.span)
            self.restore = self.otel.context.attach(current)

    def leave(self) -> None:
        """The block ends: the context ``enter`` found is current again (in the
        same thread or task, as a ``with`` block ends)."""
        restore, self.restore = self.restore, None
        if restore is not None:
            self.otel.context.detach(restore)

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """The span current while the body runs, wherever it runs (the refresher
        that finds a loss): a log record made there belongs to it."""
        restore = self.otel.context.attach(
            self.otel.trace.set_span_in_context(self.span)
        )
        try:
            yield
        finally:
            self.otel.context.detach(restore)

    def trace_fields(self) -> Attributes:
        """The span's trace context as OpenTelemetry writes it in log formats that
        are not its own: ``trace_id``, ``span_id`` and ``trace_flags``, in hex."""
        span = self.span.get_span_context()
        if not span.is_valid:
            return {}
        return {
            "trace_id": format(span.trace_id, "032x"),
            "span_id": format(span.span_id, "016x"),
            "trace_flags": format(int(span.trace_flags), "02x"),
        }

    def end(self, lost: Optional[str] = None) -> None:
        if self.ended:
            return
        self.ended = True
        held = max(0.0, time.monotonic() - self.granted_at)
        fields = hold_fields(self.client, self.keys, self.fence, self.mode, held, lost)
        self.span.set_attributes(fields)
        if lost is not None:
            self.span.set_status(
                self.otel.trace.Status(self.otel.trace.StatusCode.ERROR, lost)
            )
        self.span.end()
        measured = _metric_fields(fields)
        self.otel.holds.record(held, measured)
        if lost is not None:
            self.otel.losses.add(1, measured)


class _Nothing:
    """What every call returns without OpenTelemetry: all of it does nothing."""

    ended = True

    def __enter__(self) -> _Nothing:
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        return None

    def granted(self, fence: Union[int, Sequence[int]]) -> None:
        return None

    def replayed(self, fence: int) -> None:
        return None

    def not_granted(self) -> None:
        return None

    def failed(self, error: BaseException) -> None:
        return None

    def end(self, lost: Optional[str] = None) -> None:
        return None

    def enter(self) -> None:
        return None

    def leave(self) -> None:
        return None

    def current(self) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    def trace_fields(self) -> Attributes:
        return {}


NOTHING = _Nothing()


def acquiring(
    client: Any,
    keys: Sequence[Key],
    operation: str,
    mode: str,
    wait: Optional[float],
) -> Union[Attempt, _Nothing]:
    """The telemetry of one acquire of ``keys`` (``wait``: 0 one try, None without
    limit, else seconds); the caller says ``granted(fence)`` or lets an exception
    (or nothing: not granted) close it."""
    if not INSTALLED:
        return NOTHING
    return Attempt(client, keys, operation, mode, wait)


def holding(
    client: Any,
    keys: Sequence[Key],
    fence: Union[int, Sequence[int]],
    mode: str,
    granted_at: float,
) -> Union[Holding, _Nothing]:
    """The telemetry of a holding granted at ``granted_at`` (monotonic); ``end()``
    or ``end(lost=reason)`` closes it."""
    if not INSTALLED:
        return NOTHING
    return Holding(client, keys, fence, mode, granted_at)
