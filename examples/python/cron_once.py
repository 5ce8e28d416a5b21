"""A cron job that must run once across servers.

Every server runs the same crontab; at 06:00 each one starts this script. The job is
decorated with ``@locks.once("daily-report", ...)``: the first server to take
``lock:daily-report`` runs it, the others find the lock held and skip (``once``
returns None for them). ``min_hold`` keeps the lock for that long after the start even
when the job is quick, so a server whose clock is a few minutes late, or whose cron
fires late, still finds it held instead of running the job a second time. Pick it
above the worst clock skew and start delay, and below the job's period (a day here).
A job that fails releases the lock at once, so another server may try again.

    python cron_once.py --url redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import os
import socket
import time

import fencelock
import redis

# Where the report "goes": the list of the runs that happened, for everyone to see.
RUNS_KEY = "daily-report:runs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument(
        "--min-hold", type=float, default=600, help="seconds to keep the lock at least"
    )
    parser.add_argument(
        "--work", type=float, default=1, help="seconds the report takes to build"
    )
    args = parser.parse_args()
    client = redis.Redis.from_url(args.url)
    locks = fencelock.Locks(client)
    me = f"{socket.gethostname()}:{os.getpid()}"

    # The lease is refreshed while the job runs (every ttl/3), so ttl only bounds how
    # long a crashed server keeps the others waiting, not how long the job may take.
    @locks.once("daily-report", ttl=60, min_hold=args.min_hold)
    def daily_report() -> str | None:  # None: ``once`` skipped it
        print(f"{me}: building the daily report", flush=True)
        time.sleep(args.work)
        client.rpush(RUNS_KEY, me)
        return me

    try:
        ran = daily_report()
    finally:
        client.close()
    print("ran here" if ran is not None else "skipped: another server has it")


if __name__ == "__main__":
    main()
