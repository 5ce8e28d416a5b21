"""How a frame of ``python -m fencelock top`` looks: per primary, a line of gauges
(held locks, waiters, sessions), the wait and hold percentiles, the counters to
alert on, and a table of the hottest locks. Drawn with ``rich`` (tables that fit the
terminal's width, the same output on a terminal and in a pipe); no I/O of its own.

Given the terminal's height (the interactive view), a frame fits it: each primary
gets its lines first, then the lock rows are shared out, and what did not fit is
said ("+3 more locks", "+1 more primary: …"), never dropped silently."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from .snapshot import Frame, Percentiles, Server


def frame(
    view: Frame, clock: str, interactive: bool, height: Optional[int] = None
) -> RenderableType:
    """The whole frame: a title line, then each primary; at most ``height`` lines
    (None: every lock of every primary)."""
    hint = "  (q quits)" if interactive else ""
    title = Text.assemble(
        ("fencelock top", "bold"),
        f"  {view.url}  {clock}  hottest by {view.order}{hint}",
    )
    parts: list[RenderableType] = [title]
    shown = fit(view.servers, height)
    for server, rows in shown:
        parts.append(Text(""))
        parts.extend(_server(server, rows, folded=height is None))
    left_out = view.servers[len(shown) :]
    if left_out:
        primaries = "primary" if len(left_out) == 1 else "primaries"
        addresses = ", ".join(server.address for server in left_out)
        parts.append(
            Text(
                f"+{len(left_out)} more {primaries}: {addresses}"
                " (the terminal is too small)",
                style="yellow",
                # One line whatever the width: the count first, the names cut.
                no_wrap=True,
                overflow="ellipsis",
            )
        )
    return Group(*parts)


@dataclass(frozen=True)
class _Lines:
    """The lines a primary takes: ``fixed`` whatever its locks, then its table."""

    fixed: int
    locks: int

    def cost(self, rows: int) -> int:
        """Lines with ``rows`` of its locks shown: none (one line: "no lock" or
        "+n more locks"), all (a header and the rows), or some (and "+n more")."""
        if self.locks == 0 or rows == 0:
            return self.fixed + 1
        return self.fixed + 1 + rows + (0 if rows == self.locks else 1)


def _lines(server: Server) -> _Lines:
    if _unreadable(server):
        return _Lines(fixed=2, locks=0)  # the blank line, the heading; the problem
    # The blank line, the heading, the gauges, waits, holds and the counters.
    return _Lines(fixed=6, locks=0 if server.problem else len(server.locks))


def fit(servers: list[Server], height: Optional[int]) -> list[tuple[Server, int]]:
    """The primaries shown in ``height`` lines (the title's among them), each with
    how many of its locks: every primary's own lines first, in order, as many as fit
    with a line left to name the rest; then lock rows, one per primary in turn."""
    if height is None:
        return [(server, len(server.locks)) for server in servers]
    needs = [_lines(server) for server in servers]
    budget = height - 1
    count = len(servers)
    while count > 0:
        naming_the_rest = 1 if count < len(servers) else 0
        if sum(need.cost(0) for need in needs[:count]) + naming_the_rest <= budget:
            break
        count -= 1
    naming_the_rest = 1 if count < len(servers) else 0
    spare = budget - naming_the_rest - sum(need.cost(0) for need in needs[:count])
    rows = [0] * count
    grew = True
    while grew:
        grew = False
        for index in range(count):
            need = needs[index]
            if rows[index] == need.locks:
                continue
            more = need.cost(rows[index] + 1) - need.cost(rows[index])
            if more <= spare:
                spare -= more
                rows[index] += 1
                grew = True
    return list(zip(servers[:count], rows))


def _unreadable(server: Server) -> bool:
    return server.problem is not None and server.figure("acquired") is None


def _server(server: Server, rows: int, folded: bool) -> list[RenderableType]:
    heading = Text.assemble(("server ", "bold"), (server.address, "bold cyan"))
    if _unreadable(server):
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
        "   evicted ",
        _figure(server.figure("evicted")),
    )
    return [
        heading,
        gauges,
        _percentiles("waits", server.percentiles("wait")),
        _percentiles("holds", server.percentiles("hold")),
        alerts,
        _hottest(server, rows, folded)
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


def _hottest(server: Server, rows: int, folded: bool) -> RenderableType:
    if not server.locks:
        return Text("  no lock is held or waited for", style="dim")
    more = len(server.locks) - rows
    left_out = Text(
        f"  +{more} more {'lock' if more == 1 else 'locks'}", style="yellow"
    )
    if rows == 0:
        return left_out
    table = Table(box=None, pad_edge=False, padding=(0, 2), show_edge=False)
    # A long name folds onto more lines where there is room (one frame printed),
    # and is cut to one where the frame must fit the terminal.
    if folded:
        table.add_column("lock", overflow="fold", ratio=1)
    else:
        table.add_column("lock", overflow="ellipsis", no_wrap=True, ratio=1)
    table.add_column("waiters", justify="right", no_wrap=True)
    table.add_column("longest wait", justify="right", no_wrap=True)
    table.add_column("held", justify="right", no_wrap=True)
    for lock in server.locks[:rows]:
        table.add_row(
            lock.key,
            str(lock.waiters),
            _ms(lock.longest_wait_ms if lock.waiters else None),
            _ms(lock.held_ms),
        )
    if more == 0:
        return table
    return Group(table, left_out)


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
