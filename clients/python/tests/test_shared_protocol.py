"""The pure parts of shared locks and semaphores, without a server: the arguments
an acquire sends for each mode, the parsing of ``WRONGMODE`` replies and of
``LOCK.INFO`` from a module without shared holders, and when no permit is free. The
same for both sides, so written once here, not generated."""

from __future__ import annotations

from typing import Any

from redis.exceptions import ResponseError

from fencelock._protocol import acquire_args, wrong_mode
from fencelock.info import no_permit_free, parse_info


def test_the_mode_is_sent_as_shared_or_limit() -> None:
    assert acquire_args("k", 10, "t", None) == ("LOCK.ACQUIRE", "k", 10, "TOKEN", "t")
    assert acquire_args("k", 10, "t", 5, shared=True)[-3:] == ("BLOCK", 5, "SHARED")
    # LIMIT implies SHARED: only LIMIT is sent.
    assert acquire_args("k", 10, "t", None, shared=True, limit=3)[-2:] == ("LIMIT", 3)
    assert "SHARED" not in acquire_args("k", 10, "t", None, limit=3)


def test_wrongmode_replies_are_parsed_from_their_end() -> None:
    def parsed(text: str) -> Any:
        return wrong_mode(ResponseError(text))

    assert parsed("WRONGMODE lock:x is a semaphore with limit 5") == ("semaphore", 5)
    assert parsed("WRONGMODE this is a key is held shared") == ("shared", None)
    assert parsed("WRONGMODE k is held exclusively") == ("exclusive", None)
    assert parsed("WRONGMODE something new") == (None, None)
    assert parsed("WRONGTYPE Operation against a key") is None
    assert parsed("ERR invalid limit") is None


def test_lock_info_of_a_module_without_shared_holders() -> None:
    old = [b"held", 1, b"fence", 7, b"ttl-ms", 900, b"waiters", 2]
    assert parse_info(old) == {
        "held": True,
        "fence": 7,
        "ttl_ms": 900,
        "waiters": 2,
        "mode": "exclusive",
        "holders": 1,
        "limit": None,
        "waiters_exclusive": 2,
        "waiters_shared": 0,
        "in_session": 0,
        "value": None,
        "state": None,
        "keep_ms": None,
        "result_size": None,
    }


def test_no_permit_free() -> None:
    base: Any = {"held": True, "waiters": 0, "mode": "semaphore", "limit": 3}
    assert not no_permit_free(None, 3)
    assert not no_permit_free({**base, "holders": 2}, 3)
    assert no_permit_free({**base, "holders": 3}, 3)
    assert no_permit_free({**base, "holders": 2, "limit": 2}, 5), "the key's limit"
    assert no_permit_free({**base, "holders": 1, "waiters": 1}, 3), "FIFO"
    assert no_permit_free({**base, "holders": 1, "mode": "exclusive"}, 3)
    quarantined = {**base, "held": False, "holders": 0, "mode": "quarantined"}
    assert no_permit_free(quarantined, 3), "how many permits it keeps: unknown"
