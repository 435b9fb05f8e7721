"""A whole session's rows as stored, read for an archive and written back by an import
(acode/operations/archive.py), in one transaction of the SQLite store."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from acode.domain.ids import uuid_bytes, uuid_text
from acode.store.archive_records import ArchivedEvent, ArchivedFile, SessionImport
from acode.store.records import CheckpointRow, SessionRow
from acode.store.sqlite.blobs import INSERT_BLOB, compress
from acode.store.sqlite.keys import key

__all__ = [
    "held_blobs",
    "insert_session",
    "stored_events",
    "stored_files",
    "stored_old_checkpoints",
    "stored_session",
]

SELECT_STORED_SESSION = (
    "SELECT sid, id, title, state, workspace, parent_id, kind, config, config_hash,"
    " created_at, updated_at, NULL, NULL, archived, chain, key_id FROM sessions WHERE id = ?"
)
INSERT_STORED_SESSION = (
    "INSERT INTO sessions (id, title, state, workspace, parent_id, kind, config, config_hash,"
    " created_at, updated_at, archived, chain, key_id)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# As stored: the id's 16 bytes, the checkpoint's text and tag read as they are.
SELECT_STORED_EVENTS = (
    "SELECT seq, event_id, ts, type, payload, hash, checkpoint, signature FROM events"
    " WHERE id > ? AND id < ? ORDER BY id LIMIT ?"
)
INSERT_STORED_EVENT = (
    "INSERT INTO events (id, sid, seq, event_id, ts, type, payload, hash, checkpoint,"
    " signature) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_STEP_ROW = (
    "INSERT INTO steps (id, sid, position, step_id, task_id, kind, status, attempt,"
    " input_hash, event_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SELECT_OLD_CHECKPOINTS = (
    "SELECT slot, id, seq, summary, head, signature, created_at FROM checkpoints"
    " WHERE sid = ? ORDER BY slot"
)
INSERT_OLD_CHECKPOINT = (
    "INSERT INTO checkpoints (sid, slot, id, seq, summary, head, signature, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_MESSAGE = "INSERT INTO messages (sid, idx, role, content, seq) VALUES (?, ?, ?, ?, ?)"
INSERT_STEP_ID = "INSERT INTO step_ids (sid, step_id) VALUES (?, ?)"
SELECT_STORED_FILES = (
    "SELECT path, sha256, size, mtime_ns, ctime_ns, ino, seq FROM files WHERE sid = ? ORDER BY path"
)
INSERT_FILE = (
    "INSERT INTO files (sid, path, sha256, size, mtime_ns, ctime_ns, ino, seq)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_SYNC_STATE = (
    "INSERT INTO sync_state (sid, remote_id, synced_seq, last_attempt, last_success,"
    " last_error, next_retry, failures, down_since) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SELECT_HELD_BLOBS = "SELECT sha256 FROM blobs WHERE sha256 IN ({}) ORDER BY sha256"
_BLOBS_A_QUERY = 500


def stored_session(conn: sqlite3.Connection, session_id: str) -> SessionRow | None:
    row = conn.execute(SELECT_STORED_SESSION, (session_id,)).fetchone()
    if row is None:
        return None
    values = list(row)
    values[13] = bool(values[13])  # archived
    return SessionRow(*values)


def stored_events(
    conn: sqlite3.Connection, sid: int, after_seq: int, limit: int
) -> list[ArchivedEvent]:
    rows = conn.execute(SELECT_STORED_EVENTS, (key(sid, after_seq), key(sid + 1, 0), limit))
    return [
        ArchivedEvent(
            seq=int(seq),
            event_id=_id_text(event_id),
            ts=int(ts),
            type=str(type_),
            payload=str(payload),
            hash=bytes(hash_),
            checkpoint=None if checkpoint is None else _text(checkpoint),
            signature=None if signature is None else bytes(signature),
        )
        for seq, event_id, ts, type_, payload, hash_, checkpoint, signature in rows
    ]


def _id_text(stored: object) -> str:
    # Anything but 16 bytes was put there by hand: kept as text, it fails the chain.
    if isinstance(stored, bytes) and len(stored) == 16:
        return uuid_text(stored)
    return stored.hex() if isinstance(stored, bytes) else str(stored)


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def stored_files(conn: sqlite3.Connection, sid: int) -> list[ArchivedFile]:
    return [ArchivedFile(*r) for r in conn.execute(SELECT_STORED_FILES, (sid,))]


def stored_old_checkpoints(conn: sqlite3.Connection, sid: int) -> list[tuple[int, CheckpointRow]]:
    return [
        (int(slot), CheckpointRow(*rest))
        for slot, *rest in conn.execute(SELECT_OLD_CHECKPOINTS, (sid,))
    ]


def held_blobs(conn: sqlite3.Connection, shas: Sequence[str]) -> list[str]:
    wanted = sorted(set(shas))
    found: list[str] = []
    # In slices: SQLite takes 32,766 parameters a statement (by default).
    for first in range(0, len(wanted), _BLOBS_A_QUERY):
        some = wanted[first : first + _BLOBS_A_QUERY]
        query = SELECT_HELD_BLOBS.format(", ".join("?" * len(some)))
        found += [str(r[0]) for r in conn.execute(query, some)]
    return sorted(found)


def insert_session(conn: sqlite3.Connection, imported: SessionImport) -> None:
    """Every row of ``imported``, inside the caller's transaction, its parts consumed in
    their order; blobs the database holds already are shared."""
    s = imported.session
    cur = conn.execute(
        INSERT_STORED_SESSION,
        (
            s.id,
            s.title,
            s.state,
            s.workspace,
            s.parent_id,
            s.kind,
            s.config,
            s.config_hash,
            s.created_at,
            s.updated_at,
            int(s.archived),
            s.chain,
            s.key_id,
        ),
    )
    sid = int(cur.lastrowid or 0)
    sync = imported.sync_state
    if sync is not None:
        conn.execute(INSERT_SYNC_STATE, (sid, *sync))
    conn.executemany(INSERT_STORED_EVENT, (_event(sid, e) for e in imported.events))
    conn.executemany(
        INSERT_STEP_ROW,
        (
            (
                key(sid, r.position),
                sid,
                r.position,
                r.step_id,
                r.task_id,
                r.kind,
                r.status.value,
                r.attempt,
                r.input_hash,
                r.event_seq,
            )
            for r in imported.steps
        ),
    )
    conn.executemany(
        INSERT_OLD_CHECKPOINT,
        ((sid, slot, *checkpoint) for slot, checkpoint in imported.old_checkpoints),
    )
    conn.executemany(INSERT_MESSAGE, ((sid, *m) for m in imported.messages))
    conn.executemany(INSERT_STEP_ID, ((sid, step_id) for step_id in imported.step_ids))
    conn.executemany(
        INSERT_FILE,
        (
            (sid, f.path, f.sha256, f.size, f.mtime_ns, f.ctime_ns, f.ino, f.seq)
            for f in imported.files
        ),
    )
    conn.executemany(
        INSERT_BLOB, ((sha, len(data), compress(data)) for sha, data in imported.blobs)
    )


def _event(sid: int, e: ArchivedEvent) -> tuple[Any, ...]:
    return (
        key(sid, e.seq),
        sid,
        e.seq,
        uuid_bytes(e.event_id),
        e.ts,
        e.type,
        e.payload,
        e.hash,
        e.checkpoint,
        e.signature,
    )
