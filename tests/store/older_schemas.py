"""Rewrite a workspace's database the way an older acode wrote it, to test the upgrades:
the same sessions and events, each step event's payload put back in the older form, so
the hash chain is made again; the caller writes the event rows in the older layout."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acode.domain.chain import event_hash, genesis_hash
from acode.domain.events import Event, EventType, canonical_json
from acode.domain.ids import uuid_bytes, uuid_text
from acode.domain.reducer import (
    DEFAULT_STEP_KIND,
    FIRST_ATTEMPT,
    STEP_EVENT_TYPES,
    SessionSummary,
    fold,
)
from acode.engine.journal import checkpoint_message
from acode.security.signing import Signer
from acode.store.records import CheckpointRow
from acode.store.sqlite.connection import connect
from acode.store.sqlite.migrations import _apply, available_migrations, schema_version
from acode.system.workspace import StatePaths

__all__ = ["OldEvent", "older_database"]


@dataclass(frozen=True)
class OldEvent:
    sid: int
    session_id: str
    title: str
    seq: int
    event_id: str  # text, as every version before 5 stored it
    ts: int
    type: str
    payload: str  # the older form, hashed into ``head``
    head: bytes
    summary: SessionSummary  # the fold up to this event
    checkpointed: bool  # the current version took a checkpoint here


@dataclass(frozen=True)
class OlderDatabase:
    conn: sqlite3.Connection  # in a transaction, the sessions written
    events: list[OldEvent]
    steps: list[tuple[Any, ...]]  # sid, position, step_id, task_id, kind, status, attempt,
    # input_hash, event_seq

    def write_events(self, signer: Signer) -> None:
        """The event rows as schemas 5 and 6 wrote them: 16-byte event ids, the plain
        chain, each checkpoint's summary in its row with a 16-byte tag under ``signer``."""
        for e in self.events:
            checkpoint, tag = None, None
            if e.checkpointed:
                checkpoint = e.summary.encode()
                unsigned = CheckpointRow(e.seq, e.seq, checkpoint, e.head, "", e.ts)
                tag = signer.tag(checkpoint_message(e.session_id, e.title, unsigned))
            self.conn.execute(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    e.sid * 2**32 + e.seq,
                    e.sid,
                    e.seq,
                    uuid_bytes(e.event_id),
                    e.ts,
                    e.type,
                    e.payload,
                    e.head,
                    checkpoint,
                    tag,
                ),
            )


@contextmanager
def older_database(
    ws: Path, version: int, older_step: Callable[[str, dict[str, Any]], None]
) -> Iterator[OlderDatabase]:
    """The database of ``ws`` made again at schema ``version``. Every step event's
    payload gets back the fields that version 5 leaves out at their defaults, then
    ``older_step(session_id, payload)`` edits it further. Commits when the block ends."""
    db = StatePaths(ws).db
    with closing(sqlite3.connect(db)) as new:
        # The columns every version since the first has (schema 7 added two).
        sessions = new.execute(
            "SELECT sid, id, title, state, workspace, parent_id, kind, config, config_hash,"
            " created_at, updated_at, archived FROM sessions"
        ).fetchall()
        rows = new.execute(
            "SELECT sid, seq, event_id, ts, type, payload, signature FROM events ORDER BY id"
        ).fetchall()
        steps = new.execute(
            "SELECT sid, position, step_id, task_id, kind, status, attempt, input_hash,"
            " event_seq FROM steps ORDER BY id"
        ).fetchall()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    conn = connect(db)
    for migration in available_migrations():
        if migration.number <= version:
            _apply(conn, migration)
    conn.execute("BEGIN")
    for row in sessions:
        conn.execute(f"INSERT INTO sessions VALUES ({', '.join('?' * len(row))})", row)
    names = {row[0]: (row[1], row[2]) for row in sessions}  # sid -> (id, title)
    heads: dict[int, bytes] = {}
    summaries: dict[int, SessionSummary | None] = {}
    events = []
    for sid, seq, stored_id, ts, type_, payload_json, signature in rows:
        session_id, title = names[sid]
        event_id = uuid_text(stored_id)
        payload = Event(session_id, seq, event_id, ts, EventType(type_), payload_json, b"").payload
        if type_ in STEP_EVENT_TYPES:
            payload.setdefault("kind", DEFAULT_STEP_KIND)
            payload.setdefault("attempt", FIRST_ATTEMPT)
            older_step(session_id, payload)
        text = canonical_json(payload)
        head = event_hash(heads.get(sid, genesis_hash(session_id)), seq, event_id, ts, type_, text)
        summary = fold(
            summaries.get(sid), Event(session_id, seq, event_id, ts, EventType(type_), text, head)
        )
        heads[sid], summaries[sid] = head, summary
        events.append(
            OldEvent(
                sid,
                session_id,
                title,
                seq,
                event_id,
                ts,
                type_,
                text,
                head,
                summary,
                signature is not None,
            )
        )
    yield OlderDatabase(conn, events, steps)
    conn.execute("COMMIT")
    assert schema_version(conn) == version
    conn.close()
