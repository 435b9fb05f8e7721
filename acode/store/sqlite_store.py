"""The local SQLite store: the source of truth for sessions, events and checkpoints.

All SQL the engine runs lives here. Writes go through ``commit`` (one transaction
per call); reads never take the write lock.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

from acode.domain.events import Event, EventType
from acode.domain.reducer import StepRecord, StepStatus
from acode.errors import StorageError
from acode.store.blobs import INSERT_BLOB, compress, get_blob
from acode.store.connection import Durability, atomic, connect
from acode.store.migrations import migrate
from acode.store.records import CheckpointRow, Commit, FileRow, MessageRow, SessionRow

__all__ = ["SqliteStore", "open_store"]

# The time and position of a session's last step live in its newest checkpoint.
_SESSION_COLUMNS = (
    "s.sid, s.id, s.title, s.state, s.workspace, s.parent_id, s.kind, s.config, s.config_hash,"
    " s.created_at, max(s.updated_at, coalesce(c.created_at, 0)),"
    " json_extract(c.summary, '$.current_task'), json_extract(c.summary, '$.current_step'),"
    " s.archived"
)
_SESSIONS_WITH_CHECKPOINT = (
    f"SELECT {_SESSION_COLUMNS} FROM sessions s LEFT JOIN checkpoints c ON c.sid = s.sid"
    " AND c.id = (SELECT max(id) FROM checkpoints WHERE sid = s.sid)"
)
INSERT_SESSION = (
    "INSERT INTO sessions (id, title, state, workspace, parent_id, kind, config, config_hash,"
    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SELECT_SESSION_BY_ID = f"{_SESSIONS_WITH_CHECKPOINT} WHERE s.id = ?"
SELECT_SESSIONS_BY_PREFIX = (
    f"{_SESSIONS_WITH_CHECKPOINT} WHERE s.id >= ? AND s.id < ? ORDER BY s.id LIMIT 11"
)
SELECT_SESSIONS = f"{_SESSIONS_WITH_CHECKPOINT} ORDER BY 11 DESC, s.id DESC"
SELECT_IDS_BETWEEN = "SELECT id FROM sessions WHERE id >= ? AND id < ?"
UPDATE_SESSION = "UPDATE sessions SET state = ?, updated_at = ? WHERE sid = ?"
ARCHIVE_SESSION = "UPDATE sessions SET archived = 1 WHERE sid = ?"
INSERT_EVENT = (
    "INSERT INTO events (sid, seq, event_id, ts, type, payload, hash) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
SELECT_EVENTS_AFTER = (
    "SELECT seq, event_id, ts, type, payload, hash FROM events WHERE sid = ? AND seq > ?"
    " ORDER BY seq"
)
SELECT_EVENT = "SELECT seq, event_id, ts, type, payload, hash FROM events WHERE sid = ? AND seq = ?"
SELECT_EVENTS_OF_TYPE = (
    "SELECT seq, event_id, ts, type, payload, hash FROM events WHERE sid = ? AND type = ?"
    " ORDER BY seq"
)
UPSERT_STEP = (
    "INSERT INTO steps (sid, position, step_id, task_id, kind, status, attempt, input_hash,"
    " event_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (sid, position) DO UPDATE SET status = excluded.status,"
    " attempt = excluded.attempt, input_hash = excluded.input_hash,"
    " event_seq = excluded.event_seq"
)
_STEP_COLUMNS = "position, step_id, kind, status, attempt, task_id, input_hash, event_seq"
SELECT_STEPS_WITH_EVENTS = (
    "SELECT s.position, s.step_id, s.kind, s.status, s.attempt, s.task_id, s.input_hash,"
    " s.event_seq, e.seq, e.event_id, e.ts, e.type, e.payload, e.hash"
    " FROM steps s JOIN events e ON e.sid = s.sid AND e.seq = s.event_seq"
    " WHERE s.sid = ? AND s.position >= ? AND s.position < ? ORDER BY s.position"
)
SELECT_UNFINISHED_STEPS = (
    f"SELECT {_STEP_COLUMNS} FROM steps WHERE sid = ?"
    " AND status IN ('in_progress', 'rolled_back', 'failed') ORDER BY position"
)
HAS_MESSAGES = "SELECT 1 FROM messages WHERE sid = ? LIMIT 1"
SELECT_STEPS = f"SELECT {_STEP_COLUMNS} FROM steps WHERE sid = ? ORDER BY position"
UPSERT_CHECKPOINT = (
    "INSERT OR REPLACE INTO checkpoints (sid, slot, id, seq, summary, head, signature, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
SELECT_CHECKPOINTS = (
    "SELECT id, seq, summary, head, signature, created_at FROM checkpoints WHERE sid = ?"
    " ORDER BY id DESC"
)
UPSERT_FILE = (
    "INSERT OR REPLACE INTO files (sid, path, sha256, size, mtime_ns, seq)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
SELECT_FILES = "SELECT path, sha256, size, mtime_ns FROM files WHERE sid = ? ORDER BY path"
INSERT_MESSAGE = "INSERT INTO messages (sid, idx, role, content, seq) VALUES (?, ?, ?, ?, ?)"
SELECT_MESSAGES = "SELECT idx, role, content, seq FROM messages WHERE sid = ? ORDER BY idx"


def open_store(path: Path, durability: Durability = "full") -> SqliteStore:
    conn = connect(path, durability)
    try:
        migrate(conn, path)
    except BaseException:
        conn.close()
        raise
    return SqliteStore(conn, path)


def _session(row: tuple[object, ...]) -> SessionRow:
    values = list(row)
    values[-1] = bool(values[-1])
    return SessionRow(*values)  # type: ignore[arg-type]


def _step(row: tuple[object, ...]) -> StepRecord:
    position, step_id, kind, status, attempt, task_id, input_hash, seq = row
    return StepRecord(
        position=int(position),  # type: ignore[call-overload]
        step_id=str(step_id),
        kind=str(kind),
        status=StepStatus(str(status)),
        attempt=int(attempt),  # type: ignore[call-overload]
        task_id=task_id,  # type: ignore[arg-type]
        input_hash=input_hash,  # type: ignore[arg-type]
        event_seq=int(seq),  # type: ignore[call-overload]
    )


class SqliteStore:
    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path

    def close(self) -> None:
        self.conn.close()

    # -- sessions ---------------------------------------------------------------

    def create_session(
        self,
        *,
        session_id: str,
        title: str,
        workspace: str,
        kind: str,
        config_json: str,
        config_hash: str,
        parent_id: str | None,
        created_at: int,
        first: Commit,
    ) -> SessionRow:
        with atomic(self.conn) as conn:
            cur = conn.execute(
                INSERT_SESSION,
                (
                    session_id,
                    title,
                    first.state,
                    workspace,
                    parent_id,
                    kind,
                    config_json,
                    config_hash,
                    created_at,
                    created_at,
                ),
            )
            sid = int(cur.lastrowid or 0)
            self._write(conn, sid, first)
        return self.session(session_id)

    def session(self, session_id: str) -> SessionRow:
        row = self.conn.execute(SELECT_SESSION_BY_ID, (session_id,)).fetchone()
        if row is None:
            raise StorageError(f"session {session_id} is not in {self.path}")
        return replace(_session(row), short_id=self.short_id(session_id))

    def sessions_with_prefix(self, prefix: str) -> list[SessionRow]:
        """Sessions whose id starts with ``prefix`` (at most 11, enough to say "ambiguous")."""
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else "\U0010ffff"
        rows = [_session(r) for r in self.conn.execute(SELECT_SESSIONS_BY_PREFIX, (prefix, upper))]
        return [replace(r, short_id=self.short_id(r.id)) for r in rows]

    def short_id(self, session_id: str) -> str:
        """The session's shortest unique id prefix (at least 8 characters)."""
        from acode.domain.ids import abbreviations

        head = session_id[:8]
        upper = head[:-1] + chr(ord(head[-1]) + 1)
        ids = [str(r[0]) for r in self.conn.execute(SELECT_IDS_BETWEEN, (head, upper))]
        return abbreviations([*ids, session_id])[session_id]

    def sessions(self) -> list[SessionRow]:
        """All sessions, most recently updated first."""
        from acode.domain.ids import abbreviations

        rows = [_session(r) for r in self.conn.execute(SELECT_SESSIONS)]
        short = abbreviations([r.id for r in rows])
        return [replace(r, short_id=short[r.id]) for r in rows]

    # -- the write path -----------------------------------------------------------

    def commit(self, sid: int, commit: Commit) -> None:
        """Write one Commit in one transaction (the step path: no context manager)."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._write(conn, sid, commit)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _write(self, conn: sqlite3.Connection, sid: int, c: Commit) -> None:
        if c.blobs:
            conn.executemany(
                INSERT_BLOB, [(sha, len(data), compress(data)) for sha, data in c.blobs]
            )
        conn.executemany(
            INSERT_EVENT,
            [
                (sid, e.seq, e.event_id, e.ts_us, e.type.value, e.payload_json, e.hash)
                for e in c.events
            ],
        )
        for s in c.steps:
            conn.execute(
                UPSERT_STEP,
                (
                    sid,
                    s.position,
                    s.step_id,
                    s.task_id,
                    s.kind,
                    s.status.value,
                    s.attempt,
                    s.input_hash,
                    s.event_seq,
                ),
            )
        if c.messages:
            conn.executemany(
                INSERT_MESSAGE, [(sid, m.idx, m.role, m.content, m.seq) for m in c.messages]
            )
        if c.files:
            seq = c.events[-1].seq
            conn.executemany(
                UPSERT_FILE,
                [(sid, f.path, f.sha256, f.size, f.mtime_ns, seq) for f in c.files],
            )
        if c.checkpoint is not None:
            k = c.checkpoint
            conn.execute(
                UPSERT_CHECKPOINT,
                (sid, k.slot, k.id, k.seq, k.summary, k.head, k.signature, k.created_at),
            )
        if c.state is not None:
            conn.execute(UPDATE_SESSION, (c.state, c.updated_at, sid))
        if c.archive:
            conn.execute(ARCHIVE_SESSION, (sid,))

    # -- reads ----------------------------------------------------------------------

    def _event(self, session_id: str, row: tuple[object, ...]) -> Event:
        seq, event_id, ts, type_, payload, hash_ = row
        return Event(
            session_id=session_id,
            seq=int(seq),  # type: ignore[call-overload]
            event_id=str(event_id),
            ts_us=int(ts),  # type: ignore[call-overload]
            type=EventType(str(type_)),
            payload_json=str(payload),
            hash=bytes(hash_),  # type: ignore[call-overload]
        )

    def events(self, session: SessionRow, after_seq: int = 0) -> list[Event]:
        rows = self.conn.execute(SELECT_EVENTS_AFTER, (session.sid, after_seq)).fetchall()
        return [self._event(session.id, r) for r in rows]

    def event(self, session: SessionRow, seq: int) -> Event:
        row = self.conn.execute(SELECT_EVENT, (session.sid, seq)).fetchone()
        if row is None:
            raise StorageError(f"session {session.short_id or session.id} has no event {seq}")
        return self._event(session.id, row)

    def events_of_type(self, session: SessionRow, type_: EventType) -> list[Event]:
        rows = self.conn.execute(SELECT_EVENTS_OF_TYPE, (session.sid, type_.value)).fetchall()
        return [self._event(session.id, r) for r in rows]

    def recorded_steps(
        self, session: SessionRow, start: int, stop: int
    ) -> list[tuple[StepRecord, Event]]:
        """Step rows at positions [start, stop) with the events holding their outcome,
        in one query: replaying a long session reads it in windows, not row by row."""
        rows = self.conn.execute(SELECT_STEPS_WITH_EVENTS, (session.sid, start, stop))
        return [(_step(r[:8]), self._event(session.id, r[8:])) for r in rows]

    def unfinished_steps(self, sid: int) -> list[StepRecord]:
        """Steps that did not complete: in progress, rolled back for a retry, or failed."""
        return [_step(r) for r in self.conn.execute(SELECT_UNFINISHED_STEPS, (sid,))]

    def has_messages(self, sid: int) -> bool:
        return self.conn.execute(HAS_MESSAGES, (sid,)).fetchone() is not None

    def steps(self, sid: int) -> list[StepRecord]:
        return [_step(r) for r in self.conn.execute(SELECT_STEPS, (sid,))]

    def checkpoints(self, sid: int) -> list[CheckpointRow]:
        """The kept checkpoints, newest first."""
        rows = self.conn.execute(SELECT_CHECKPOINTS, (sid,)).fetchall()
        return [CheckpointRow(*r) for r in rows]

    def files(self, sid: int) -> list[FileRow]:
        """The files the session read or wrote, as it last saw them."""
        return [FileRow(*r) for r in self.conn.execute(SELECT_FILES, (sid,))]

    def messages(self, sid: int) -> list[MessageRow]:
        return [MessageRow(*r) for r in self.conn.execute(SELECT_MESSAGES, (sid,))]

    def blob(self, sha256: str) -> bytes:
        return get_blob(self.conn, sha256)
