"""A Celery task that builds the daily report once, however many workers get it.

The report is queued every morning by celery beat on two hosts (so that one host's
failure does not skip it), and a retried or redelivered message can queue it again:
several workers may start the same report at once. The task takes
``lock:report:{<day>}`` without waiting: the worker that gets it builds the report and
marks the day done; the others answer ``"skipped"`` at once, and a copy that comes
after the report was built finds the day done (``"already-built"``). The lock alone
would not be enough: it is free again once the first build is over.

Celery's broker and result backend are a Redis database (``CELERY_BROKER_URL``,
default ``redis://127.0.0.1:6379/1``); the locks are on a server with the fencelock
module (``FENCELOCK_URL``, default ``redis://127.0.0.1:6379/0``), which may be the same
server.

    celery -A celery_report worker --loglevel=info          # on every worker host
    python celery_report.py --day 2026-11-29 --copies 3     # queue it three times
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import time

import fencelock
import redis
from celery import Celery

TASK = "celery_report.build_daily_report"
DONE_KEEP_SECONDS = 7 * 24 * 3600
# How long building a report takes here (the example's stand-in for real work).
WORK_SECONDS = float(os.environ.get("REPORT_WORK_SECONDS", "1"))


def make_app(broker_url: str, locks_url: str) -> Celery:
    """The Celery app with the report task; the workers and the code that queues
    the task each make their own."""
    app = Celery("celery_report", broker=broker_url, backend=broker_url)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        # A task is acknowledged when it is done: a worker that dies mid-report
        # leaves it to be redelivered, and the lock and the done mark make the
        # copy harmless.
        task_acks_late=True,
        worker_prefetch_multiplier=1,
    )
    # Made now, connected on first use: in a prefork pool each child process
    # connects (and starts its refresher thread) itself, after the fork.
    client = redis.Redis.from_url(locks_url)
    locks = fencelock.Locks(client)

    @app.task(name=TASK)
    def build_daily_report(day: str) -> str:
        """Returns "built", "skipped" (another worker is building it now) or
        "already-built" (the day is done)."""
        done = f"report:{{{day}}}:done"
        try:
            with locks.lock(f"report:{{{day}}}", ttl=30, wait=0) as lease:
                if client.exists(done):
                    return "already-built"
                by = f"{socket.gethostname()}:{os.getpid()}"
                time.sleep(WORK_SECONDS)  # build it
                client.rpush(f"report:{{{day}}}:builds", f"{by} fence {lease.fence}")
                client.set(done, lease.fence, ex=DONE_KEEP_SECONDS)
                return "built"
        except fencelock.LockNotAcquired:
            return "skipped"

    return app


app = make_app(
    os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/1"),
    os.environ.get("FENCELOCK_URL", "redis://127.0.0.1:6379/0"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--day", default=datetime.date.today().isoformat())
    parser.add_argument("--copies", type=int, default=3)
    args = parser.parse_args()
    results = [app.send_task(TASK, args=[args.day]) for _ in range(args.copies)]
    print([result.get(timeout=60) for result in results])


if __name__ == "__main__":
    main()
