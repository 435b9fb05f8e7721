"""The structured log: `.agent/state/logs/acode.jsonl`, one JSON object a line.

It records what a person debugging a resume wants to know (every resume attempt and
its outcome, the continuation plan, recovery decisions, changed files), redacted.
Logging never breaks a session: a log that cannot be written is skipped.

The file rotates by size, with the names of ``logging.handlers.RotatingFileHandler``
(acode.jsonl.1 the newest of the old files). That handler is not used: it keeps one file
open and rotates without telling other processes, so two processes of one workspace
would each rename the files, and one would go on writing to a file the other had
already moved (or deleted). Here every line is written under a shared ``flock`` of the
file it goes into, and a rotation holds that file's exclusive lock while it renames: a
line lands whole in the file that is current at that instant, and only old files are
ever dropped.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import suppress
from typing import Any

from acode.domain.config import LogSettings
from acode.security.redaction import redact_json
from acode.system.workspace import StatePaths

__all__ = ["LOG_NAME", "log_event", "set_log_limits"]

LOG_NAME = "acode.jsonl"
# Each process's limits, per workspace, as opening the workspace read them from its
# config.yml; a process that logs without opening it (rare) keeps the defaults.
_limits: dict[str, LogSettings] = {}
# Rotations by other processes between an open and its lock, each followed by a retry:
# beyond this many the line is written to the file it holds (an old one, never lost).
_RETRIES = 8


def set_log_limits(paths: StatePaths, settings: LogSettings) -> None:
    _limits[str(paths.workspace)] = settings


def log_event(paths: StatePaths, event: str, **fields: Any) -> None:
    record = {"ts": _now(), "event": event, **fields}
    line = json.dumps(redact_json(record), ensure_ascii=False, default=str) + "\n"
    try:
        paths.logs.mkdir(parents=True, exist_ok=True, mode=0o700)
        _append(paths, line.encode())
    except OSError:
        return


def _append(paths: StatePaths, data: bytes) -> None:
    import fcntl

    limits = _limits.get(str(paths.workspace), LogSettings())
    path = paths.logs / LOG_NAME
    for attempt in range(_RETRIES + 1):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            last = attempt == _RETRIES
            if not last and not _is_current(fd, path):
                continue  # rotated between our open and our lock
            size = os.fstat(fd).st_size
            if not last and size and size + len(data) > limits.max_bytes:
                # Not atomic (the shared lock is dropped first): checked again below.
                fcntl.flock(fd, fcntl.LOCK_EX)
                if _is_current(fd, path) and os.fstat(fd).st_size + len(data) > limits.max_bytes:
                    try:
                        _rotate(path, limits.keep)
                    except OSError:  # an old file's name taken by a folder, say
                        os.write(fd, data)  # a longer file rather than a lost line
                        return
                continue
            # One write(2) of one line with O_APPEND: lines from concurrent processes
            # never interleave, and a crash loses at most the line being written.
            os.write(fd, data)
            return
        finally:
            os.close(fd)  # and its lock


def _is_current(fd: int, path: os.PathLike[str]) -> bool:
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def _rotate(path: os.PathLike[str], keep: int) -> None:
    """acode.jsonl.(keep-1) to .keep, ..., acode.jsonl to .1: the oldest is replaced."""
    name = os.fspath(path)
    for number in range(keep - 1, 0, -1):
        with suppress(FileNotFoundError):  # fewer old files than ``keep`` so far
            os.rename(f"{name}.{number}", f"{name}.{number + 1}")
    os.rename(name, f"{name}.1")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
