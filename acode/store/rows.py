"""What every store backend makes of its rows: events, step records, checkpoints.

Pure conversions and folds over the values a backend's queries return, so that the
SQLite and the PostgreSQL stores read their rows the same way (one place decides what
an edited row becomes: an error that names it, or a value that fails its signature).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from acode.domain.events import Event, EventType
from acode.domain.ids import SHORT_ID_LENGTH, uuid_text
from acode.domain.reducer import (
    StepRecord,
    StepStatus,
    decode_summary,
    fold,
    step_record,
    step_status,
)
from acode.errors import CheckpointError, ErrorCode
from acode.store.records import CheckpointRow, SessionRow

__all__ = [
    "checkpoint_position",
    "derived_summary",
    "event_from_row",
    "event_id_text",
    "signature_hex",
    "step_from_row",
    "step_records",
]

_STATUS = {status.value: status for status in StepStatus}


def step_from_row(row: tuple[Any, ...]) -> StepRecord:
    # Positional and a dict for the status: a replay builds one of these per step.
    position, step_id, kind, status, attempt, task_id, input_hash, seq = row
    found = _STATUS.get(status)
    if found is None:
        raise CheckpointError(
            f"the steps table gives step {step_id!r} a status acode never writes "
            f"({str(status)[:40]!r}): the database was edited",
            hint="the history is kept unchanged for inspection (`acode session history`)",
            code=ErrorCode.CHAIN_BROKEN,
        )
    return StepRecord(
        position=position,
        step_id=step_id,
        kind=kind,
        status=found,
        attempt=attempt,
        task_id=task_id,
        input_hash=input_hash,
        event_seq=seq,
    )


def signature_hex(value: bytes | None) -> str:
    """A stored signature as the signer writes it (hex); a missing one as nothing,
    which fails verification."""
    return "" if value is None else value.hex()


def checkpoint_position(cp: CheckpointRow, title: str) -> tuple[str | None, str | None]:
    """The task and step a checkpoint was taken at; (None, None) when it is unreadable,
    which loading the session reports (a list of sessions still shows the others)."""
    try:
        summary = decode_summary(cp.summary, title=title, seq=cp.seq)
    except (ValueError, TypeError, KeyError):
        return None, None
    return summary.current_task, summary.current_step


def event_from_row(session_id: str, row: tuple[Any, ...]) -> Event:
    """An event from its columns: (seq, event id, time, type, payload JSON, hash)."""
    seq, event_id, ts, type_, payload, hash_ = row
    try:
        type_ = EventType(str(type_))
    except ValueError:
        raise CheckpointError(
            f"session {session_id[:SHORT_ID_LENGTH]}: event {seq} is of a type acode never "
            f"writes ({str(type_)[:40]!r}): the database was edited",
            hint="the history is kept unchanged for inspection (`acode session history`)",
            code=ErrorCode.CHAIN_BROKEN,
        ) from None
    return Event(
        session_id=session_id,
        seq=int(seq),
        event_id=event_id_text(event_id),
        ts_us=int(ts),
        type=type_,
        payload_json=str(payload),
        hash=bytes(hash_),
    )


def event_id_text(stored: object) -> str:
    # 16 bytes from schema 5 on. Anything else was put there by hand: shown as it is, it
    # fails the hash chain, which names the event.
    if isinstance(stored, bytes) and len(stored) == 16:
        return uuid_text(stored)
    return stored.hex() if isinstance(stored, bytes) else str(stored)


def step_records(rows: Iterable[tuple[int, str, str]]) -> dict[int, StepRecord]:
    """The (seq, type, payload JSON) rows of step events folded, in the order given, into
    each position's record: the last row of a position is its record."""
    records: dict[int, StepRecord] = {}
    for seq, type_, payload in rows:
        status = step_status(type_)
        assert status is not None  # the queries ask for step events only
        record = step_record(status, seq, json.loads(payload))
        records[record.position] = record
    return records


def derived_summary(
    session: SessionRow, base: tuple[int, bytes] | None, rows: Iterable[tuple[Any, ...]]
) -> str:
    """A checkpoint's summary that its row leaves out (schema 5): the newest one written
    before it (``base``: its seq and text) with the events after it (``rows``, up to the
    checkpoint's) folded in. Whatever stops the fold (no summary written, an unreadable
    one, an impossible event) gives "", which fails the signature, so the loader falls
    back as it does for any damaged checkpoint."""
    if base is None:
        return ""
    base_seq, text = base
    try:
        summary = decode_summary(text.decode(), title=session.title, seq=base_seq)
        for row in rows:
            summary = fold(summary, event_from_row(session.id, row))
    except (ValueError, TypeError, KeyError, CheckpointError):
        return ""
    return summary.encode()
