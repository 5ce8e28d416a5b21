"""Leader election: a scheduler that runs its job only while it leads, and a dashboard
that shows who leads.

Run the scheduler on every host; one of them leads (``fencelock.Election``) and runs
the job every ``--every`` seconds, the others wait in the server's queue and take
over when the leader stops: at once when it resigns (Ctrl-C, SIGTERM), a ttl after
its last refresh when it dies or hangs. Each run is written through
``fencelock.fenced`` with the leadership's fence, so a leader that was paused past its
lease (a GC pause, a frozen VM) and wakes up still believing it leads cannot write
after its successor: its fence is lower, the mark refuses it. The dashboard prints
the leader each time it changes (``observe``), through restarts and reconnects.

    python leader.py scheduler --url redis://127.0.0.1:6379/0 --name host-1
    python leader.py dashboard --url redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys

import fencelock
import redis

ELECTION = "scheduler"
# The job's output, and the mark that admits only the newest leader's writes.
RUNS_KEY = "scheduler:runs"
MARK_KEY = "scheduler:mark"


def run_job(client: redis.Redis, name: str, fence: int) -> None:
    """The scheduled job: here, one line in the list of runs."""
    fencelock.fenced(client, MARK_KEY, fence, "RPUSH", RUNS_KEY, f"{name} {fence}")


def schedule(client: redis.Redis, name: str, ttl: float, every: float) -> None:
    election = fencelock.Election(client, ELECTION, ttl=ttl)
    while True:
        print(f"{name}: campaigning", flush=True)
        # Leaving the block resigns: the next candidate leads at once.
        with election.campaign(name, lost_ok=True) as leadership:
            print(f"{name}: leading with fence {leadership.fence}", flush=True)
            try:
                while not leadership.lost.is_set():
                    run_job(client, name, leadership.fence)
                    leadership.lost.wait(every)
            except fencelock.StaleFence:
                pass  # a newer leader has written: this one no longer leads
            except SystemExit:
                print(f"{name}: resigning", flush=True)
                raise
        print(f"{name}: lost the leadership", flush=True)


def dashboard(client: redis.Redis, changes: int | None) -> None:
    election = fencelock.Election(client, ELECTION, ttl=1)
    for seen, leader in enumerate(election.observe(), start=1):
        if leader is None:
            print("leader: nobody", flush=True)
        else:
            print(f"leader: {leader.value} (fence {leader.fence})", flush=True)
        if changes is not None and seen >= changes:
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["scheduler", "dashboard"])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--name", default=f"{socket.gethostname()}:{os.getpid()}")
    parser.add_argument("--ttl", type=float, default=10, help="the leader's lease, s")
    parser.add_argument("--every", type=float, default=1, help="seconds between runs")
    parser.add_argument(
        "--changes", type=int, default=None, help="dashboard: exit after n states"
    )
    args = parser.parse_args()
    # SIGTERM (a service manager stopping it) leaves as Ctrl-C does: resigning.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    client = redis.Redis.from_url(args.url, decode_responses=True)
    try:
        if args.mode == "scheduler":
            schedule(client, args.name, args.ttl, args.every)
        else:
            dashboard(client, args.changes)
    except KeyboardInterrupt:
        pass
    finally:
        client.close()


if __name__ == "__main__":
    main()
