"""What a write of the PostgreSQL store executes: a ``Commit`` as its statements, in
order (acode/store/sqlite/store.py builds SQLite's the same way)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acode.store.postgres import queries as q
from acode.store.records import Commit
from acode.store.sqlite.blobs import compress

if TYPE_CHECKING:
    import psycopg

__all__ = ["Fence", "StaleEpoch", "Statement", "run", "statements_of"]

# One statement of a write: the SQL, its parameters, whether they are many rows, and
# whether each must write its row (a fenced insert writes none with a stale epoch).
Statement = tuple[str, Any, bool, bool]
# The session's id and the epoch of the lease its process holds.
Fence = tuple[str, int]


class StaleEpoch(Exception):
    """A fenced write wrote nothing: the epoch is no longer the lease's."""


def statements_of(sid: int, c: Commit, fence: Fence | None = None) -> list[Statement]:
    """What writing ``c`` for session ``sid`` executes, in order; with ``fence``, its
    events are written only under that epoch, and the statements after them run only
    once they were (in one transaction: nothing of a refused write stays)."""
    statements: list[Statement] = []
    if c.blobs:
        blobs = [(sha, len(data), compress(data)) for sha, data in c.blobs]
        statements.append((q.INSERT_BLOB, blobs, True, False))
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
    if fence is not None:
        rows = [(*fence, *r) for r in rows]
    sql = q.INSERT_EVENT if fence is None else q.FENCED_INSERT_EVENT
    many = len(rows) > 1
    statements.append((sql, rows if many else rows[0], many, fence is not None))
    for r in c.steps:
        step = (sid, r.position, r.step_id, r.task_id, r.kind, r.status.value, r.attempt)
        statements.append((q.UPSERT_STEP, (*step, r.input_hash, r.event_seq), False, False))
    if c.step_ids:
        statements.append((q.INSERT_STEP_ID, [(sid, s) for s in c.step_ids], True, False))
    if c.messages:
        messages = [(sid, m.idx, m.role, m.content, m.seq) for m in c.messages]
        statements.append((q.INSERT_MESSAGE, messages, True, False))
    if c.files:
        seq = c.events[-1].seq
        files = [
            (sid, f.path, f.sha256, f.size, f.mtime_ns, f.ctime_ns, f.ino, seq) for f in c.files
        ]
        statements.append((q.UPSERT_FILE, files, True, False))
    if c.state is not None:
        statements.append((q.UPDATE_SESSION, (c.state, c.updated_at, sid), False, False))
    if c.archive:
        statements.append((q.ARCHIVE_SESSION, (sid,), False, False))
    return statements


def run(conn: psycopg.Connection[Any], statements: list[Statement]) -> None:
    """Execute ``statements``; StaleEpoch when a fenced one wrote fewer rows than given
    (the caller's transaction then rolls back what came before it)."""
    for sql, parameters, many, fenced in statements:
        if many:
            with conn.cursor() as cur:
                cur.executemany(sql, parameters)
                written = cur.rowcount
        else:
            written = conn.execute(sql, parameters).rowcount
        if fenced and written != (len(parameters) if many else 1):
            raise StaleEpoch
