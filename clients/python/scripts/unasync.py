"""Writes the sync modules of the package and the sync tests from their asyncio sources.

``src/fencelock/_async/*.py`` is the source; each module there that is not hand-written
twice becomes ``src/fencelock/_sync/<same name>.py`` by plain textual rules (``async
def`` -> ``def``, ``await x`` -> ``x``, ``AsyncClient`` -> ``SyncClient``, …), the
pattern httpcore uses. What really differs between threads and tasks (shielding,
cancellation, task-locals, events, the refresher) lives in the hand-written
``_compat.py`` and ``_refresher.py`` of each side, which the rules never touch.

The tests are written once the same way: ``tests/_async/test_*.py`` is the source of
``tests/_sync/test_*.py``; each side's ``conftest.py`` and ``helpers.py`` (sleeping,
a call made later: a task or a timer thread) are written by hand.

    python scripts/unasync.py          # rewrite the generated modules
    python scripts/unasync.py --check  # exit 1 if any is out of date (make python-lint)

Hand-written here (about forty lines) rather than taken from the ``unasync`` package:
that package rewrites names only, while the docstrings must change too ("awaited",
``fencelock.asyncio``), and the check mode is what CI needs."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[1]
PACKAGE = CLIENT / "src" / "fencelock"
TESTS = CLIENT / "tests"
# (asyncio source, generated sync side, what is written by hand on both sides: what
# threads and tasks really do differently).
TREES = [
    (PACKAGE / "_async", PACKAGE / "_sync", {"_compat.py", "_refresher.py"}),
    (TESTS / "_async", TESTS / "_sync", {"__init__.py", "conftest.py", "helpers.py"}),
]

# ruff's line length (pyproject.toml): the generated files pass ``ruff check`` too.
LINE_LENGTH = 88

RULES = [
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\basynccontextmanager\b", "contextmanager"),
    (r"\bAsyncExitStack\b", "ExitStack"),
    (r"\benter_async_context\b", "enter_context"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncClient\b", "SyncClient"),
    (r"\bredis\.asyncio\b", "redis"),
    (r"\bfencelock\.asyncio\b", "fencelock"),
    (r"\bfencelock\._async\b", "fencelock._sync"),
    (r"\baclose\b", "close"),
    (r"\bAwaitable\[(\w+)\]", r"\1"),
]


def header(source: Path) -> str:
    where = source.relative_to(source.parents[2]).as_posix()
    first = f"# Generated from {where} by scripts/unasync.py: edit that"
    if len(first) <= LINE_LENGTH:
        return first + "\n# file and run `make python-unasync`, never this one.\n"
    # A long source name: the same words wrapped, within ruff's line length.
    return (
        f"# Generated from {where}\n"
        "# by scripts/unasync.py: edit that file and run `make python-unasync`,\n"
        "# never this one.\n"
    )


# A source line that must read otherwise on the sync side (redis-py's sync and asyncio
# locks order ``acquire``'s arguments differently) carries its sync form after this.
SYNC_FORM = re.compile(r"^(\s*).*?\s*# sync: (.*)$", re.MULTILINE)


def convert(source: Path, target: Path) -> str:
    text = SYNC_FORM.sub(r"\1\2", source.read_text())
    for pattern, replacement in RULES:
        text = re.sub(pattern, replacement, text)
    return formatted(target, header(source) + text)


def formatted(path: Path, text: str) -> str:
    """As ``ruff format`` leaves it (lines that lost an ``await`` may join), so that
    the generated files pass ``ruff format --check`` as they are written."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(path), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def expected() -> dict[Path, str]:
    return {
        target / path.name: convert(path, target / path.name)
        for source, target, hand_written in TREES
        for path in sorted(source.glob("*.py"))
        if path.name not in hand_written
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report drift")
    args = parser.parse_args()
    stale = []
    generated = expected()
    for target, text in generated.items():
        if target.exists() and target.read_text() == text:
            continue
        stale.append(target.relative_to(CLIENT).as_posix())
        if not args.check:
            target.write_text(text)
    # A generated file whose source is gone goes too.
    for _, target_dir, hand_written in TREES:
        for path in sorted(target_dir.glob("*.py")):
            if path in generated or path.name in hand_written:
                continue
            stale.append(path.relative_to(CLIENT).as_posix())
            if not args.check:
                path.unlink()
    if args.check and stale:
        print(
            "out of date (edit _async/, then `make python-unasync`): "
            + ", ".join(stale),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
