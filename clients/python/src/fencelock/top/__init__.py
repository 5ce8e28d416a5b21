"""``python -m fencelock top [redis-url]``: like ``htop`` for locks. Per primary
(every primary of a cluster), the hottest locks (``LOCK.TOP``: waiters, the longest
wait, how long the holding has lasted), the held locks, waiters and sessions, the wait
and hold percentiles and the counters to alert on (``INFO fencelock``), refreshed
every second; ``--once`` prints one frame and exits.

Drawn with ``rich`` (the ``top`` extra: ``pip install 'fencelock[top]'``): a widely
used, actively kept library whose tables fit the terminal's width and whose live
display redraws in place on the alternate screen, with the same tables in plain text
when the output is a pipe. A full-screen framework (``textual``) would bring an
event loop and far more than a refreshed table needs; curses alone would mean
writing the table layout by hand. Imported only when ``top`` runs: ``import
fencelock`` never loads it."""

from __future__ import annotations

import sys
from urllib.parse import urlsplit, urlunsplit

from redis.exceptions import ConnectionError, RedisError, TimeoutError


def run(url: str, once: bool, count: int, order: str, interval: float) -> int:
    """The command's exit status: 0, or 1 when the server could not be read, 2 when
    ``rich`` is missing or the interactive view has no terminal."""
    try:
        from rich.console import Console
    except ImportError:
        print(
            "python -m fencelock top needs rich: pip install 'fencelock[top]'",
            file=sys.stderr,
        )
        return 2
    from . import screen, snapshot

    if not once and not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(
            "the interactive view needs a terminal; use --once to print one frame",
            file=sys.stderr,
        )
        return 2
    # What is printed names the server, never its password.
    shown = without_password(url)
    try:
        client = snapshot.connect(url)
        if once:
            screen.once(client, shown, count, order, Console())
        else:
            screen.interactive(client, shown, count, order, interval, Console())
    except (ConnectionError, TimeoutError) as error:
        print(f"cannot reach {shown}: {error}", file=sys.stderr)
        return 1
    except RedisError as error:
        print(f"{shown}: {error}", file=sys.stderr)
        return 1
    return 0


def without_password(url: str) -> str:
    """``url`` with its password, if it has one, shown as ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
