"""The OpenTelemetry SDK set up once per test process as the global providers, with an
in-memory span exporter and an in-memory metric reader, and what the telemetry tests
read back from them. The global providers can be set only once per process, so every
test shares them: tests tell their own spans apart by lock name, and their
measurements by counting before and after."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader()

_tracer_provider = TracerProvider()
_tracer_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_tracer_provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))


def spans(name: str, lock: Any) -> list[ReadableSpan]:
    """The ended spans called ``name`` of the lock ``lock`` (a name, or a list of
    names for a multi-key lock), oldest first."""
    found = []
    for span in EXPORTER.get_finished_spans():
        attributes = span.attributes or {}
        names = attributes.get("fencelock.lock.names")
        own = (
            isinstance(names, (list, tuple)) and list(names) == list(lock)
            if names is not None and not isinstance(lock, str)
            else attributes.get("fencelock.lock.name") == lock
        )
        if span.name == name and own:
            found.append(span)
    return found


def named(name: str) -> list[ReadableSpan]:
    """The ended spans called ``name``, whatever they belong to, oldest first."""
    return [span for span in EXPORTER.get_finished_spans() if span.name == name]


def parent_of(span: ReadableSpan) -> Optional[int]:
    """The span id of ``span``'s parent (None for a root span)."""
    return None if span.parent is None else span.parent.span_id


def span_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.span_id


def only(name: str, lock: Any) -> dict[str, Any]:
    """The attributes of the one span ``name`` of ``lock``."""
    found = spans(name, lock)
    assert len(found) == 1, f"one {name} span of {lock!r}, found {len(found)}"
    return dict(found[0].attributes or {})


def points(metric: str, **wanted: Any) -> list[Any]:
    """The data points of ``metric`` whose attributes include ``wanted`` (``_`` in a
    keyword stands for ``.``: ``fencelock_outcome="busy"``)."""
    attributes = {name.replace("_", "."): value for name, value in wanted.items()}
    data = READER.get_metrics_data()
    found = []
    for resource in data.resource_metrics if data is not None else []:
        for scope in resource.scope_metrics:
            for one in scope.metrics:
                if one.name != metric:
                    continue
                for point in one.data.data_points:
                    have = dict(point.attributes or {})
                    if all(have.get(k) == v for k, v in attributes.items()):
                        found.append(point)
    return found


def count(metric: str, **wanted: Any) -> int:
    """How many values ``metric`` recorded (a histogram) or added up to (a counter)
    with those attributes, in every data point."""
    total = 0
    for point in points(metric, **wanted):
        total += point.count if isinstance(point, HistogramDataPoint) else point.value
    return total


def recorded(metric: str, **wanted: Any) -> float:
    """The sum of the values a histogram recorded with those attributes."""
    return float(sum(point.sum for point in points(metric, **wanted)))


def unit(metric: str) -> Optional[str]:
    data = READER.get_metrics_data()
    for resource in data.resource_metrics if data is not None else []:
        for scope in resource.scope_metrics:
            for one in scope.metrics:
                if one.name == metric:
                    return one.unit
    return None


def boundaries(metric: str) -> Sequence[float]:
    for point in points(metric):
        return list(point.explicit_bounds)
    return []


def clear() -> None:
    """Forgets the spans ended so far (each test starts with its own)."""
    EXPORTER.clear()
