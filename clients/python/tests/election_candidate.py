"""One candidate of tests/test_election_processes.py, run as a process of its own:
a small scheduler on ``fencelock.Election`` that, while it leads, writes its work
through ``fencelock.fenced`` on a mark, and records what happened in Redis lists for
the test to check.

    python election_candidate.py PORT NAME TTL

- ``leaders``: ``"<fence> <name> <granted> <deadline>"`` once it leads (monotonic
  seconds: one clock for every process of the machine);
- ``deadlines``: ``"<fence> <deadline>"``, the lease's deadline as the leader believes
  it, before each write;
- ``work``: ``"<fence> <name>"``, each write the mark admitted;
- ``refused``: ``"<fence> <name>"``, a write the mark refused (``StaleFence``): a
  newer leader wrote first. It then leaves the leadership and campaigns again.
"""

from __future__ import annotations

import sys
import time

import redis

import fencelock

WORK_EVERY = 0.05


def main() -> None:
    port, name, ttl = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    client = redis.Redis(port=port)
    election = fencelock.Election(client, "scheduler", ttl=ttl)
    while True:
        with election.campaign(name, lost_ok=True) as leadership:
            fence = leadership.fence
            granted = time.monotonic()
            deadline = leadership.lease.deadline
            client.rpush("leaders", f"{fence} {name} {granted} {deadline}")
            while True:
                # The write does not ask whether it still leads (``lost``,
                # ``ensure_held``): a leader paused past its lease writes late, and
                # the fence alone must refuse it.
                client.rpush("deadlines", f"{fence} {leadership.lease.deadline}")
                try:
                    fencelock.fenced(
                        client, "mark", fence, "RPUSH", "work", f"{fence} {name}"
                    )
                except fencelock.StaleFence:
                    client.rpush("refused", f"{fence} {name}")
                    break
                time.sleep(WORK_EVERY)


if __name__ == "__main__":
    main()
