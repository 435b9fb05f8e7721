"""The replay cursor: what a resumed session recorded at each step position, read as
the calls reach the positions.

Calls take positions in the order the history recorded them, so the cursor reads the
session's events in order, a window of rows at a time (one query per window, not per
step), each row checked against the keyed chain as its window is read
(``History.window``): no recorded result is returned before it is authenticated. It
decodes the events about steps one at a time as the calls reach them, keeping the
newest event of each position it decoded but did not pass, with the `steps` rows of
the window's positions to check them against. A payload lives from its step's call
to the next one, not for a whole window.

``completed`` is the way of a resumed library caller's loop: the recorded result of a
completed python step called again with its id, or ``GENERAL`` for anything else
there, which the session's general way then decides (and refuses, for a different
id, kind or input). The other methods serve that general way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from acode.domain.reducer import (
    DEFAULT_STEP_KIND,
    STEP_EVENT_TYPES,
    StepRecord,
    StepStatus,
    step_record,
    step_status,
)
from acode.engine.history import EventRow, History
from acode.errors import CheckpointError

__all__ = ["GENERAL", "NO_INPUT", "REPLAY_WINDOW", "ReplayCursor", "Scanned"]

# Rows read at once: a thousand keeps the queries per step negligible, and more decoded
# payloads held at once make each step slower (docs/benchmarks.md, "Figures behind design choices").
REPLAY_WINDOW = 1024

# ``ReplayCursor.completed``'s answer when the general way must decide.
GENERAL = object()

# The input hash of a step called with no input, the common case: events and step rows
# leave it out (a missing input hash means this one), which saves 47 bytes a step.
NO_INPUT = hashlib.sha256(b"{}").hexdigest()[:32]

# The newest event the cursor read about one step position: its status, seq, type and
# payload (a plain tuple: a replay makes one for every step it reads).
Scanned = tuple[StepStatus, int, str, dict[str, Any]]

# Looked up for every event a replay reads: a dict's get, not a call.
_STATUS = {type_: step_status(type_) for type_ in STEP_EVENT_TYPES}
_COMPLETED = StepStatus.COMPLETED

# The decoder's own entry point skips json.loads's checks and whitespace scans (a third
# of the decoding), acode writing canonical JSON; anything else goes through json.loads,
# which also names an error.
_DECODE = json.JSONDecoder().raw_decode

# Makes the error of a history found edited: (what, hint or None for the usual one).
Edited = Callable[[str, "str | None"], CheckpointError]


def _object(payload_json: str) -> dict[str, Any]:
    try:
        value, end = _DECODE(payload_json)
    except ValueError:
        end = -1
    if end != len(payload_json):
        value = json.loads(payload_json)
    if type(value) is not dict:
        raise ValueError("an event's payload is not a JSON object")
    return value


class ReplayCursor:
    """The recorded step positions below ``recorded_until`` of ``history``'s session."""

    __slots__ = (
        "_edited",
        "_events",
        "_history",
        "_next_event",
        "_rows",
        "_scan_done",
        "_scanned_hash",
        "_scanned_position",
        "_scanned_seq",
        "_window",
        "recorded_until",
    )

    def __init__(self, history: History, recorded_until: int, edited: Edited) -> None:
        self._history = history
        self._edited = edited
        self.recorded_until = recorded_until
        self._window: dict[int, Scanned] = {}
        self._rows: dict[int, StepRecord] = {}  # the `steps` rows of the window's positions
        self._events: list[EventRow] = []  # the window's rows, checked
        self._next_event = 0  # the index in _events of the next one to decode
        self._scanned_seq = 0  # events up to here are read
        self._scanned_hash: bytes | None = None  # the hash of event _scanned_seq, checked
        self._scanned_position = -1  # the highest position the decoded events name
        self._scan_done = recorded_until == 0  # no window is left to read

    def completed(self, position: int, step_id: str) -> Any:
        """The recorded result at ``position`` when it is that of a completed python
        step ``step_id`` called with no input and with no `steps` row to check it
        against; else GENERAL. A resumed library caller's loop calls this for every
        step it had done: it does the least a call must."""
        window = self._window
        window.pop(position - 1, None)  # replayed
        if self._scanned_position <= position:
            self._scan(position)
        found = window.get(position)
        if found is None or found[0] is not _COMPLETED or position in self._rows:
            return GENERAL
        payload = found[3]
        if (
            payload.get("step") != step_id
            or payload.get("kind", DEFAULT_STEP_KIND) != DEFAULT_STEP_KIND
            or (payload.get("input_hash") or NO_INPUT) != NO_INPUT
        ):
            return GENERAL
        return payload["result"]

    def scanned(self, position: int) -> Scanned | None:
        """The newest event about the step at recorded position ``position``."""
        self._window.pop(position - 1, None)  # replayed
        if self._scanned_position <= position:
            self._scan(position)
        return self._window.get(position)

    def record(self, position: int) -> StepRecord | None:
        """The record at ``position``; None past the recorded ones."""
        if position >= self.recorded_until:
            return None
        found = self.scanned(position)
        if found is None:
            # Every position below the recorded ones has events about its step.
            raise self._edited(
                f"the record of step position {position} is missing from the history",
                "refusing to run the step again; inspect with `acode resume --verify`",
            )
        status, seq, event_type, payload = found
        try:
            record = step_record(status, seq, payload)
        except (KeyError, TypeError, ValueError):
            raise self._edited(f"event {seq} ({event_type}) names no step", None) from None
        row = self._rows.get(position)
        if row is not None and row != record:
            raise self._edited(
                f"step {row.step_id!r} is {row.status.value} in the steps table, but its "
                f"events say {record.status.value} (event {record.event_seq})",
                None,
            )
        return record

    def outcome(self, record: StepRecord) -> tuple[str, dict[str, Any]]:
        """The type and payload of the event holding ``record``'s outcome."""
        cached = self._window.get(record.position)
        if cached is not None and cached[1] == record.event_seq:
            return cached[2], cached[3]
        event = self._history.event(record.event_seq)
        return event.type.value, event.payload

    def _scan(self, position: int) -> None:
        """Decode the events about steps into the window until one names a position
        past ``position``, or none is left (the newest event of ``position`` is known
        then). One loop with no call per event but the decoding: every replayed step
        passes here."""
        window, events = self._window, self._events
        index, at = self._next_event, self._scanned_position
        while at <= position:
            if index == len(events):
                if self._scan_done:
                    break
                self._scanned_position = at
                self._read_window(position)
                events, index = self._events, 0
                continue
            row = events[index]
            index += 1
            status = _STATUS.get(row[3])
            if status is None:
                continue  # not about a step
            text = row[4]
            try:
                # _object's way, spelled out for the common case: one call less a step.
                payload, end = _DECODE(text)
                if end != len(text) or type(payload) is not dict:
                    payload = _object(text)
                named = int(payload["position"])
            except (KeyError, TypeError, ValueError):
                raise self._edited(f"event {row[0]} ({row[3]}) names no step", None) from None
            if named < at:
                raise self._edited(f"event {row[0]} goes back to step position {named}", None)
            window[named] = (status, row[0], row[3], payload)
            at = named
        self._next_event, self._scanned_position = index, at

    def _read_window(self, position: int) -> None:
        """The next window of events, each checked against the chain as it is read, and
        the `steps` rows of the positions still to replay that its events can name:
        from ``position`` up to one more per event than the highest position decoded
        (every position has an event, and positions follow each other)."""
        history = self._history
        events = history.window(self._scanned_seq, self._scanned_hash, REPLAY_WINDOW)
        self._scan_done = len(events) < REPLAY_WINDOW
        if events:
            self._scanned_seq, self._scanned_hash = events[-1][0], events[-1][5]
        self._events, self._next_event = events, 0
        last = max(position, self._scanned_position) + len(events)
        rows = history.store.step_rows(history.row.sid, position, last)
        self._rows = {r.position: r for r in rows}
