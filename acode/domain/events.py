"""Events: immutable records of what happened in a session.

An event's payload is kept as the exact JSON text that was hashed and stored, so
verifying the hash chain never depends on re-encoding.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

__all__ = ["PAYLOAD_VERSION", "Event", "EventType", "canonical_json", "replay_order"]

PAYLOAD_VERSION = 1


class EventType(StrEnum):
    SESSION_CREATED = "session_created"
    PLAN_RECORDED = "plan_recorded"
    STATE_CHANGED = "state_changed"
    SESSION_RESUMED = "session_resumed"
    STEP_STARTED = "step_started"
    STEP_COMPLETED = "step_completed"
    STEP_FAILED = "step_failed"
    STEP_ROLLED_BACK = "step_rolled_back"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_DECIDED = "approval_decided"
    SESSION_DISCARDED = "session_discarded"
    CHECKPOINT_MARKED = "checkpoint_marked"
    WORKTREE_RECORDED = "worktree_recorded"


# One encoder for every call: json.dumps with options builds a new one each time. NaN
# and the infinities are refused (ValueError): they are not JSON, and SQLite's JSON
# functions and PostgreSQL's jsonb, which read the payloads, reject them.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def _one_shot() -> Callable[[object, int], Iterable[str]] | None:
    """CPython's C encoder with ``_ENCODER``'s options, made once. ``_ENCODER.encode``
    makes one on every call, through two Python functions; every event's payload is
    encoded here, and that setup was a third of the time. None where the C encoder is
    missing or takes other arguments: ``_ENCODER.encode`` is the same encoding."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    try:
        # The arguments JSONEncoder.iterencode passes; no markers: see canonical_json.
        encoder: Callable[[object, int], Iterable[str]] = make(
            None, _ENCODER.default, json.encoder.encode_basestring, None,
            ":", ",", True, False, False,
        )  # fmt: skip
    except TypeError:
        return None
    return encoder


_C_ENCODER = _one_shot()


def canonical_json(value: object) -> str:
    """The one JSON encoding acode hashes and stores: sorted keys, no spaces, UTF-8, and
    only finite numbers."""
    if _C_ENCODER is None:
        return _ENCODER.encode(value)
    try:
        return "".join(_C_ENCODER(value, 0))
    except RecursionError:
        # Without markers a cycle recurses until Python stops it: the encoder that
        # keeps them says "Circular reference detected" (ValueError) instead.
        return _ENCODER.encode(value)


@dataclass(frozen=True)
class Event:
    """One entry of a session's append-only log, as stored and hashed."""

    session_id: str
    seq: int
    event_id: str
    ts_us: int
    type: EventType
    payload_json: str
    hash: bytes = field(repr=False)

    @cached_property
    def payload(self) -> dict[str, Any]:
        value = json.loads(self.payload_json)
        if not isinstance(value, dict):
            raise ValueError(f"event {self.seq} payload is not an object")
        return value


def replay_order(events: list[Event]) -> tuple[list[Event], Event | None]:
    """Events in (timestamp, event_id) order, and the first event whose position in
    that order disagrees with its sequence number (None when they agree)."""
    ordered = sorted(events, key=lambda e: (e.ts_us, e.event_id))
    by_seq = sorted(events, key=lambda e: e.seq)
    for a, b in zip(ordered, by_seq, strict=True):
        if a.seq != b.seq:
            return ordered, b
    return ordered, None
