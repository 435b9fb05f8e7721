"""The structured log: `.agent/state/logs/acode.jsonl`, one JSON object a line.

It records what a person debugging a resume wants to know (every resume attempt and
its outcome, the continuation plan, recovery decisions, changed files), redacted.
Logging never breaks a session: a log that cannot be written is skipped.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from acode.security.redaction import redact_json
from acode.system.workspace import StatePaths

__all__ = ["log_event"]


def log_event(paths: StatePaths, event: str, **fields: Any) -> None:
    record = {"ts": _now(), "event": event, **fields}
    line = json.dumps(redact_json(record), ensure_ascii=False, default=str) + "\n"
    try:
        paths.logs.mkdir(parents=True, exist_ok=True, mode=0o700)
        # One write(2) of one line with O_APPEND: lines from concurrent processes never
        # interleave, and a crash loses at most the line being written.
        fd = os.open(paths.logs / "acode.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        return


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
