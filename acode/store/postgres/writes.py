"""What a write of the PostgreSQL store executes: a ``Commit`` as its statements, in
order (acode/store/sqlite/store.py builds SQLite's the same way)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acode.store.postgres import queries as q
from acode.store.records import Commit
from acode.store.sqlite.blobs import compress

if TYPE_CHECKING:
    import psycopg

__all__ = ["Statement", "run", "statements_of"]

# One statement of a write: the SQL, its parameters, and whether they are many rows.
Statement = tuple[str, Any, bool]


def statements_of(sid: int, c: Commit) -> list[Statement]:
    """What writing ``c`` for session ``sid`` executes, in order."""
    statements: list[Statement] = []
    if c.blobs:
        blobs = [(sha, len(data), compress(data)) for sha, data in c.blobs]
        statements.append((q.INSERT_BLOB, blobs, True))
    rows: list[tuple[Any, ...]] = [
        (sid, e.seq, e.event_id, e.ts_us, e.type.value, e.payload_json, e.hash, None, None)
        for e in c.events
    ]
    k = c.checkpoint
    if k is not None:
        # A checkpoint is taken at the write's last event and goes into its row.
        assert k.seq == c.events[-1].seq
        summary = k.summary if c.summary_written else None
        rows[-1] = (*rows[-1][:7], summary, bytes.fromhex(k.signature))
    statements.append(
        (q.INSERT_EVENT, rows[0], False) if len(rows) == 1 else (q.INSERT_EVENT, rows, True)
    )
    for r in c.steps:
        step = (sid, r.position, r.step_id, r.task_id, r.kind, r.status.value, r.attempt)
        statements.append((q.UPSERT_STEP, (*step, r.input_hash, r.event_seq), False))
    if c.step_ids:
        statements.append((q.INSERT_STEP_ID, [(sid, s) for s in c.step_ids], True))
    if c.messages:
        messages = [(sid, m.idx, m.role, m.content, m.seq) for m in c.messages]
        statements.append((q.INSERT_MESSAGE, messages, True))
    if c.files:
        seq = c.events[-1].seq
        files = [
            (sid, f.path, f.sha256, f.size, f.mtime_ns, f.ctime_ns, f.ino, seq) for f in c.files
        ]
        statements.append((q.UPSERT_FILE, files, True))
    if c.state is not None:
        statements.append((q.UPDATE_SESSION, (c.state, c.updated_at, sid), False))
    if c.archive:
        statements.append((q.ARCHIVE_SESSION, (sid,), False))
    return statements


def run(conn: psycopg.Connection[Any], statements: list[Statement]) -> None:
    for sql, parameters, many in statements:
        if many:
            with conn.cursor() as cur:
                cur.executemany(sql, parameters)
        else:
            conn.execute(sql, parameters)
