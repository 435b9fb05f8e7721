"""A whole session's rows as stored, read for an archive and written back by an import
(acode/operations/archive.py), in the PostgreSQL store: the same rows as SQLite's
(acode/store/sqlite/archive_rows.py), over the schema of ``sql/``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from acode.errors import StorageError
from acode.store.archive_records import ArchivedEvent, ArchivedFile, SessionImport
from acode.store.postgres import queries as q
from acode.store.records import SessionRow
from acode.store.sqlite.blobs import compress

if TYPE_CHECKING:
    import psycopg

    from acode.domain.reducer import StepRecord

__all__ = ["held_blobs", "insert_session", "stored_events", "stored_files", "stored_session"]

SELECT_STORED_SESSION = (
    f"SELECT {q.SESSION_COLUMNS} FROM acode_store.sessions s WHERE s.id = %(id)s{{scope}}"
)
INSERT_STORED_SESSION = (
    "INSERT INTO acode_store.sessions (id, title, state, workspace, parent_id, kind, config,"
    " config_hash, created_at, updated_at, archived, chain, key_id)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING sid"
)
SELECT_STORED_EVENTS = (
    "SELECT seq, event_id::text, ts, type, payload, hash, checkpoint, signature"
    " FROM acode_store.events WHERE sid = %s AND seq > %s ORDER BY seq LIMIT %s"
)
INSERT_STEP_ROW = (
    "INSERT INTO acode_store.steps (sid, position, step_id, task_id, kind, status, attempt,"
    " input_hash, event_seq) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
SELECT_STORED_FILES = (
    "SELECT path, sha256, size, mtime_ns, ctime_ns, ino, seq FROM acode_store.files"
    ' WHERE sid = %s ORDER BY path COLLATE "C"'
)
INSERT_FILE = (
    "INSERT INTO acode_store.files (sid, path, sha256, size, mtime_ns, ctime_ns, ino, seq)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)
INSERT_SYNC_STATE = (
    "INSERT INTO acode_store.sync_state (sid, remote_id, synced_seq, last_attempt,"
    " last_success, last_error, next_retry, failures, down_since)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
SELECT_HELD_BLOBS = "SELECT sha256 FROM acode_store.blobs WHERE sha256 = ANY(%s)"
_ROWS_A_BATCH = 1000  # an archive read as a stream is never held whole


def stored_session(conn: psycopg.Connection[Any], sql: str, params: Any) -> SessionRow | None:
    row = conn.execute(sql, params).fetchone()
    return None if row is None else SessionRow(*row)


def stored_events(
    conn: psycopg.Connection[Any], sid: int, after_seq: int, limit: int
) -> list[ArchivedEvent]:
    rows = conn.execute(SELECT_STORED_EVENTS, (sid, after_seq, None if limit < 0 else limit))
    return [
        ArchivedEvent(
            seq=int(seq),
            event_id=str(event_id),
            ts=int(ts),
            type=str(type_),
            payload=str(payload),
            hash=bytes(hash_),
            checkpoint=checkpoint,
            signature=None if signature is None else bytes(signature),
        )
        for seq, event_id, ts, type_, payload, hash_, checkpoint, signature in rows
    ]


def stored_files(conn: psycopg.Connection[Any], sid: int) -> list[ArchivedFile]:
    return [ArchivedFile(*r) for r in conn.execute(SELECT_STORED_FILES, (sid,))]


def held_blobs(conn: psycopg.Connection[Any], shas: Sequence[str]) -> list[str]:
    found = conn.execute(SELECT_HELD_BLOBS, (sorted(set(shas)),)).fetchall()
    return sorted(str(r[0]) for r in found)


def insert_session(
    conn: psycopg.Connection[Any], imported: SessionImport, workspace: str | None
) -> None:
    """Every row of ``imported``, inside the caller's transaction, its parts consumed in
    their order; blobs the database holds already are shared. ``workspace``: the one the
    store serves, which the session is recorded under (the workspace is its identity
    here: under another, this workspace would never see it); None keeps its own."""
    s = imported.session
    found = conn.execute(
        INSERT_STORED_SESSION,
        (
            s.id,
            s.title,
            s.state,
            s.workspace if workspace is None else workspace,
            s.parent_id,
            s.kind,
            s.config,
            s.config_hash,
            s.created_at,
            s.updated_at,
            s.archived,
            s.chain,
            s.key_id,
        ),
    ).fetchone()
    assert found is not None  # RETURNING gives the new row's
    sid = int(found[0])
    if imported.sync_state is not None:
        conn.execute(INSERT_SYNC_STATE, (sid, *imported.sync_state))
    _insert(
        conn,
        q.INSERT_EVENT,
        (
            (sid, e.seq, e.event_id, e.ts, e.type, e.payload, e.hash, e.checkpoint, e.signature)
            for e in imported.events
        ),
    )
    _insert(conn, INSERT_STEP_ROW, (_step(sid, r) for r in imported.steps))
    if next(iter(imported.old_checkpoints), None) is not None:
        raise StorageError(
            "the session has checkpoints of the table an acode before SQLite's schema 4 "
            "kept, which the PostgreSQL store has no place for",
            hint="nothing was written; import it into a SQLite workspace "
            "(acode session import FILE -w DIR without store.url)",
        )
    _insert(conn, q.INSERT_MESSAGE, ((sid, *m) for m in imported.messages))
    _insert(conn, q.INSERT_STEP_ID, ((sid, step_id) for step_id in imported.step_ids))
    _insert(
        conn,
        INSERT_FILE,
        (
            (sid, f.path, f.sha256, f.size, f.mtime_ns, f.ctime_ns, f.ino, f.seq)
            for f in imported.files
        ),
    )
    _insert(
        conn,
        q.INSERT_BLOB,
        ((sha, len(data), compress(data)) for sha, data in imported.blobs),
    )


def _step(sid: int, r: StepRecord) -> tuple[Any, ...]:
    return (
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


def _insert(conn: psycopg.Connection[Any], sql: str, rows: Any) -> None:
    batch: list[Any] = []
    with conn.cursor() as cur:
        for row in rows:
            batch.append(row)
            if len(batch) == _ROWS_A_BATCH:
                cur.executemany(sql, batch)
                batch = []
        if batch:
            cur.executemany(sql, batch)
