"""Copied as ``sitecustomize.py`` onto the PYTHONPATH of the acode processes a crash
test starts: it SIGKILLs the process at the N-th matching audit event, or counts the
matching events of an uninterrupted run.

An audit hook runs at the exact instant before an operation (the rename that publishes
a file, the fork of ``git commit``), which a timer outside the process hits only by luck.
The hook sends SIGKILL to its own process: the same death as a kill from outside.

Environment (set per process by the harness; absent means the hook does nothing):
  CRASHTEST_KILL_EVENT, CRASHTEST_KILL_MATCH, CRASHTEST_KILL_NTH: kill mode.
  CRASHTEST_COUNT_POINTS (JSON list of [event, match]) and CRASHTEST_COUNT_FILE: count
  mode; the counts are written as a JSON list when the process exits.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

__all__ = ["describe", "install"]


def describe(args: tuple[Any, ...]) -> str:
    """What a match string is searched in: the first two arguments of the event (the
    source and target of a rename, the executable and argv of a Popen, a sleep's
    seconds). Later arguments, such as a child's whole environment, would match anything."""
    return " ".join(repr(arg) for arg in args[:2])


def _install_killer(event: str, match: str, nth: int) -> None:
    seen = 0

    def hook(name: str, args: tuple[Any, ...]) -> None:
        nonlocal seen
        if name != event or match not in describe(args):
            return
        seen += 1
        if seen == nth:
            os.kill(os.getpid(), signal.SIGKILL)

    sys.addaudithook(hook)


def _install_counter(points: list[tuple[str, str]], out: str) -> None:
    counts = [0] * len(points)
    events = {event for event, _ in points}

    def hook(name: str, args: tuple[Any, ...]) -> None:
        if name not in events:
            return
        text = describe(args)
        for index, (event, match) in enumerate(points):
            if name == event and match in text:
                counts[index] += 1

    def dump() -> None:
        with open(out, "w", encoding="utf-8") as handle:
            json.dump(counts, handle)

    import atexit

    atexit.register(dump)
    sys.addaudithook(hook)


def install() -> None:
    env = os.environ
    if "CRASHTEST_KILL_EVENT" in env:
        _install_killer(
            env["CRASHTEST_KILL_EVENT"],
            env.get("CRASHTEST_KILL_MATCH", ""),
            int(env["CRASHTEST_KILL_NTH"]),
        )
    elif "CRASHTEST_COUNT_FILE" in env:
        points = [(str(e), str(m)) for e, m in json.loads(env["CRASHTEST_COUNT_POINTS"])]
        _install_counter(points, env["CRASHTEST_COUNT_FILE"])


# Only as sitecustomize: importing this module from a test must not hook the test run.
if __name__ == "sitecustomize":
    install()
