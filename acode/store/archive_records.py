"""The rows of a whole session as an archive carries them (acode/operations/archive.py):
apart from acode.store.records, which every command loads, since only archiving and
importing build them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from acode.domain.reducer import StepRecord
from acode.store.records import CheckpointRow, MessageRow, SessionRow, SyncStateRow

__all__ = ["ArchivedEvent", "ArchivedFile", "SessionImport"]


class ArchivedEvent(NamedTuple):
    """An event's row as stored, with the checkpoint taken at it (``checkpoint``: its
    summary, None where it is derived or none was taken; ``signature``: its tag, None
    where none was taken): what an archive holds (acode/operations/archive.py)."""

    seq: int
    event_id: str
    ts: int
    type: str
    payload: str
    hash: bytes
    checkpoint: str | None
    signature: bytes | None


class ArchivedFile(NamedTuple):
    """A ``files`` row as stored: a FileRow and the event that recorded it."""

    path: str
    sha256: str | None
    size: int | None
    mtime_ns: int | None
    ctime_ns: int | None
    ino: int | None
    seq: int


class SessionImport(NamedTuple):
    """A whole session as an archive brings it (``EventStore.import_session``): its row
    (``sid`` and ``short_id`` are the store's own, ignored) and every row of every table
    it has, read in the order of these fields, each once, so that an archive read as a
    stream is never held whole."""

    session: SessionRow
    sync_state: SyncStateRow | None  # None: the session was never mirrored
    events: Iterable[ArchivedEvent]
    steps: Iterable[StepRecord]
    old_checkpoints: Iterable[tuple[int, CheckpointRow]]  # (slot, checkpoint)
    messages: Iterable[MessageRow]
    step_ids: Iterable[str]
    files: Iterable[ArchivedFile]
    blobs: Iterable[tuple[str, bytes]]
