"""``python -m fencelock``: the package's command line. One command so far, ``top``
(``fencelock.top``): the hottest locks and the wait and hold percentiles of a server
or a cluster, refreshed every second."""

from __future__ import annotations

import argparse
import sys
from typing import Optional


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fencelock")
    commands = parser.add_subparsers(dest="command", required=True)
    top = commands.add_parser(
        "top",
        help="the hottest locks, waits and holds of a server (or every primary of"
        " a cluster), refreshed every second; q quits",
    )
    top.add_argument(
        "url",
        nargs="?",
        default="redis://localhost:6379",
        help="the server (a cluster node's URL shows every primary);"
        " default redis://localhost:6379",
    )
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    top.add_argument(
        "--count", type=int, default=10, help="locks shown per server (default 10)"
    )
    top.add_argument(
        "--by",
        choices=("waiters", "held"),
        default="waiters",
        help="order: by queued waiters (default) or by how long the holding lasted",
    )
    top.add_argument(
        "--interval",
        type=float,
        default=1.0,
        help="seconds between refreshes (default 1)",
    )
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    if args.interval <= 0:
        parser.error("--interval must be positive")
    from .top import run

    return run(args.url, args.once, args.count, args.by, args.interval)


if __name__ == "__main__":
    sys.exit(main())
