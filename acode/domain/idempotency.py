"""Idempotency keys: ``acode:v1:<session>:<step>:<attempt>``.

A key names one attempt of one step. Completion is detected per (session, step)
whatever the attempt, so a retried step is still recognised as the same step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["STEP_ID_PATTERN", "IdempotencyKey", "generate", "key_prefix", "parse", "step_prefix"]

STEP_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_PREFIX = "acode:v1"
_KEY = re.compile(
    r"acode:v1:(?P<session>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}):(?P<step>[A-Za-z0-9][A-Za-z0-9_.-]{0,63}):(?P<attempt>[1-9][0-9]*)"
)


@dataclass(frozen=True, slots=True)
class IdempotencyKey:
    """What identifies one attempt of one step of a session to outside systems."""

    session_id: str
    step_id: str
    attempt: int

    def __str__(self) -> str:
        return f"{_PREFIX}:{self.session_id}:{self.step_id}:{self.attempt}"


_SESSION = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def generate(session_id: str, step_id: str, attempt: int) -> str:
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"attempts are numbered from 1, got {attempt!r}")
    if not _SESSION.fullmatch(session_id):
        raise ValueError(f"invalid session id {session_id!r}")
    if not STEP_ID_PATTERN.fullmatch(step_id):
        raise ValueError(f"invalid step id {step_id!r}")
    return str(IdempotencyKey(session_id=session_id, step_id=step_id, attempt=attempt))


def key_prefix(session_id: str) -> str:
    """``acode:v1:<session>:``, checked once: a session makes each step's key by adding
    ``<step>:<attempt>``, with step ids it has checked itself."""
    if not _SESSION.fullmatch(session_id):
        raise ValueError(f"invalid session id {session_id!r}")
    return f"{_PREFIX}:{session_id}:"


def parse(key: str) -> IdempotencyKey | None:
    """The parts of a key, or None when ``key`` is not an acode idempotency key."""
    match = _KEY.fullmatch(key)
    if match is None:
        return None
    return IdempotencyKey(
        session_id=match["session"], step_id=match["step"], attempt=int(match["attempt"])
    )


def step_prefix(session_id: str, step_id: str) -> str:
    """The part of every key of this step, whatever the attempt."""
    return f"{_PREFIX}:{session_id}:{step_id}:"
