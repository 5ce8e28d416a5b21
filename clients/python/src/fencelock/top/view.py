"""How a frame of ``python -m fencelock top`` looks: per primary, a line of gauges
(held locks, waiters, sessions), the wait and hold percentiles, the counters to
alert on, and a table of the hottest locks. Drawn with ``rich`` (tables that fit the
terminal's width, the same output on a terminal and in a pipe); no I/O of its own."""

from __future__ import annotations

from typing import Optional

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from .snapshot import Frame, Percentiles, Server


def frame(view: Frame, clock: str, interactive: bool) -> RenderableType:
    """The whole frame: a title line, then each primary."""
    hint = "  (q quits)" if interactive else ""
    title = Text.assemble(
        ("fencelock top", "bold"),
        f"  {view.url}  {clock}  hottest by {view.order}{hint}",
    )
    parts: list[RenderableType] = [title]
    for server in view.servers:
        parts.append(Text(""))
        parts.extend(_server(server))
    return Group(*parts)


def _server(server: Server) -> list[RenderableType]:
    heading = Text.assemble(("server ", "bold"), (server.address, "bold cyan"))
    if server.problem is not None and server.figure("acquired") is None:
        return [heading, Text(f"  {server.problem}", style="yellow")]
    gauges = Text.assemble(
        "  held ",
        (_figure(server.figure("held_locks")), "bold"),
        "   waiters ",
        (_figure(server.figure("waiters")), "bold"),
        "   sessions ",
        (_figure(server.figure("sessions")), "bold"),
    )
    alerts = Text.assemble(
        "  expired ",
        _figure(server.figure("expired")),
        "   block timeouts ",
        _figure(server.figure("block_timeouts")),
        "   deadlocks ",
        _figure(server.figure("deadlocks")),
        "   contended ",
        _figure(server.figure("contended")),
    )
    return [
        heading,
        gauges,
        _percentiles("waits", server.percentiles("wait")),
        _percentiles("holds", server.percentiles("hold")),
        alerts,
        _hottest(server)
        if server.problem is None
        else Text(f"  {server.problem}", style="yellow"),
    ]


def _percentiles(label: str, line: Percentiles) -> Text:
    if line.p50 is None and line.count is None:
        return Text(f"  {label}  (not measured by this server)", style="dim")
    if line.count == 0:
        return Text(f"  {label:<5}  none since the start or CONFIG RESETSTAT")
    return Text.assemble(
        f"  {label:<5}  p50 ",
        (_usec(line.p50), "bold"),
        "  p99 ",
        (_usec(line.p99), "bold"),
        "  p99.9 ",
        (_usec(line.p999), "bold"),
        f"   count {_figure(line.count)}  mean {_usec(line.mean_usec)}",
    )


def _hottest(server: Server) -> RenderableType:
    table = Table(box=None, pad_edge=False, padding=(0, 2), show_edge=False)
    table.add_column("lock", overflow="fold", ratio=1)
    table.add_column("waiters", justify="right", no_wrap=True)
    table.add_column("longest wait", justify="right", no_wrap=True)
    table.add_column("held", justify="right", no_wrap=True)
    for lock in server.locks:
        table.add_row(
            lock.key,
            str(lock.waiters),
            _ms(lock.longest_wait_ms if lock.waiters else None),
            _ms(lock.held_ms),
        )
    if not server.locks:
        return Text("  no lock is held or waited for", style="dim")
    return table


def _figure(value: Optional[int]) -> str:
    return "-" if value is None else str(value)


def _usec(value: Optional[float]) -> str:
    """A duration in µs as people read it."""
    if value is None:
        return "-"
    if value < 1000:
        return f"{value:.0f} µs"
    return _ms(value / 1000)


def _ms(value: Optional[float]) -> str:
    """A duration in ms as people read it: ms, s, then minutes and hours."""
    if value is None:
        return "-"
    if value < 1000:
        return f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"
    seconds = value / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
