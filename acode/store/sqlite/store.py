"""The SQLite store (``EventStore``): the source of truth for sessions, events and
checkpoints, in one file.

Its SQL and row layout live here and beside it in ``store/sqlite/``. Writes go through
``commit`` (one transaction per call, ``atomic``); reads never take the write lock.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acode.domain.events import Event, EventType
from acode.domain.ids import uuid_bytes, uuid_text
from acode.domain.reducer import STEP_EVENT_TYPES, StepRecord, step_record, step_status
from acode.errors import StorageError
from acode.store.base import Durability
from acode.store.records import (
    CheckpointRow,
    Commit,
    FileFields,
    FileRow,
    FileTouch,
    MessageRow,
    SessionRow,
)
from acode.store.rows import (
    checkpoint_position,
    derived_summary,
    event_from_row,
    event_id_text,
    signature_hex,
    step_from_row,
    step_records,
)
from acode.store.sqlite.blobs import INSERT_BLOB, compress, get_blob
from acode.store.sqlite.connection import atomic, connect, write_error
from acode.store.sqlite.keys import SPAN as _SPAN
from acode.store.sqlite.keys import key
from acode.store.sqlite.migrations import migrate
from acode.store.sqlite.pruning import Pruning
from acode.store.sqlite.sync_state import SyncBookkeeping

if TYPE_CHECKING:
    from acode.store.archive_records import ArchivedEvent, ArchivedFile, SessionImport

__all__ = ["SqliteStore", "event_from_row"]


# The time and position of a session's last step live in its newest checkpoint, which
# ``SqliteStore._session`` adds: the two NULLs are its current task and step.
_SESSION_COLUMNS = (
    "sid, id, title, state, workspace, parent_id, kind, config, config_hash,"
    " created_at, updated_at, NULL, NULL, archived, chain, key_id"
)
INSERT_SESSION = (
    "INSERT INTO sessions (id, title, state, workspace, parent_id, kind, config, config_hash,"
    " created_at, updated_at, key_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SELECT_SESSION_BY_ID = f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?"
SELECT_SESSIONS_BY_PREFIX = (
    f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id >= ? AND id < ? ORDER BY id LIMIT 11"
)
SELECT_SESSIONS = f"SELECT {_SESSION_COLUMNS} FROM sessions"
SELECT_IDS_BETWEEN = "SELECT id FROM sessions WHERE id >= ? AND id < ?"
UPDATE_SESSION = "UPDATE sessions SET state = ?, updated_at = ? WHERE sid = ?"
ARCHIVE_SESSION = "UPDATE sessions SET archived = 1 WHERE sid = ?"
# `events.id` and `steps.id` are sid * 2^32 + seq (or position), schema 4: a session's
# rows are one range of the rowid, [key(sid, 0), key(sid + 1, 0)), read by seeks on it.
INSERT_EVENT = (
    "INSERT INTO events (id, sid, seq, event_id, ts, type, payload, hash, checkpoint,"
    " signature) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_EVENT_COLUMNS = "seq, event_id, ts, type, payload, hash"
_COMPLETED = EventType.STEP_COMPLETED.value
SELECT_EVENTS_AFTER = (
    f"SELECT {_EVENT_COLUMNS} FROM events WHERE id > ? AND id < ? ORDER BY id LIMIT ?"
)
SELECT_EVENT = f"SELECT {_EVENT_COLUMNS} FROM events WHERE id = ?"
SELECT_EVENTS_AT = f"SELECT {_EVENT_COLUMNS} FROM events WHERE id IN ({{}})"  # {}: the ?s
SELECT_EVENTS_OF_TYPE = (
    f"SELECT {_EVENT_COLUMNS} FROM events WHERE id > ? AND id < ? AND type = ? ORDER BY id"
)
UPSERT_STEP = (
    "INSERT INTO steps (id, sid, position, step_id, task_id, kind, status, attempt,"
    " input_hash, event_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (id) DO UPDATE SET status = excluded.status,"
    " attempt = excluded.attempt, input_hash = excluded.input_hash,"
    " event_seq = excluded.event_seq"
)
_STEP_COLUMNS = "position, step_id, kind, status, attempt, task_id, input_hash, event_seq"
_STEP_TYPES = ", ".join(repr(str(t)) for t in sorted(STEP_EVENT_TYPES))
# The events about steps, in order: folded, they are the steps' records (schema 4 writes
# a `steps` row only for a step that needs one, see StepExecutor._finish).
SELECT_STEP_EVENTS = (
    "SELECT seq, type, payload FROM events WHERE id > ? AND id < ?"
    f" AND type IN ({_STEP_TYPES})"
    " ORDER BY id LIMIT ?"
)
SELECT_EVENT_ROWS = (
    f"SELECT {_EVENT_COLUMNS} FROM events WHERE id > ? AND id < ? ORDER BY id LIMIT ?"
)
SELECT_HASHES_AT = "SELECT seq, hash FROM events WHERE id IN ({})"  # {}: the ?s
# The step id ledger (schema 6): every id named by an event up to the newest one whose
# checkpoint wrote its summary out; the ids of the events after it are read from them.
INSERT_STEP_ID = "INSERT OR IGNORE INTO step_ids (sid, step_id) VALUES (?, ?)"
HAS_STEP_ID = "SELECT 1 FROM step_ids WHERE sid = ? AND step_id = ?"
SELECT_STEP_ID_LEDGER = "SELECT step_id FROM step_ids WHERE sid = ?"
SELECT_UNLEDGERED_STEP_IDS = (
    "SELECT json_extract(payload, '$.step') FROM events WHERE id > coalesce("
    "(SELECT id FROM events WHERE id > ?1 AND id < ?2 AND checkpoint IS NOT NULL"
    " ORDER BY id DESC LIMIT 1), ?1)"
    f" AND id < ?2 AND type IN ({_STEP_TYPES}) ORDER BY id"
)
# Backwards from the end: a position's record is its newest event (reducer.fold_step).
SELECT_NEWEST_STEP_EVENTS = (
    "SELECT seq, type, payload FROM events WHERE id > ? AND id < ?"
    f" AND type IN ({_STEP_TYPES})"
    " ORDER BY id DESC LIMIT ?"
)
# The results of the answered model calls, picked out by SQLite: no event is decoded in
# Python but theirs. The CASE reads a payload only once it is known to be JSON: an older
# acode recorded a python step's NaN as such, which the JSON functions refuse.
SELECT_MODEL_RESULTS = (
    "SELECT json_extract(payload, '$.result') FROM events WHERE id > ? AND id < ?"
    " AND type = 'step_completed' AND CASE WHEN json_valid(payload) THEN"
    " json_extract(payload, '$.kind') = 'model' AND json_type(payload, '$.result') = 'object'"
    " END ORDER BY id"
)
# How many steps completed, and the sum of their durations: each from what came before
# it (the event before its start record, or before its completion for a step that
# completed in its first write) to the completion: what a step did before its start
# record, a run step's snapshot of the work tree, is its time too. One pass over the
# session's rows, each joined to its predecessors by key; no payload is decoded.
SELECT_STEP_TIMES = (
    "SELECT count(*), coalesce(sum(e.ts - coalesce(b.ts, p.ts)), 0) FROM events AS e"
    " JOIN events AS p ON p.id = e.id - 1"
    " LEFT JOIN events AS b ON b.id = e.id - 2 AND p.type = 'step_started'"
    " WHERE e.id > ? AND e.id < ? AND e.type = 'step_completed'"
)
SELECT_UNFINISHED_STEPS = (
    f"SELECT {_STEP_COLUMNS} FROM steps WHERE id >= ? AND id < ?"
    " AND status IN ('in_progress', 'rolled_back', 'failed') ORDER BY id"
)
HAS_MESSAGES = "SELECT 1 FROM messages WHERE sid = ? LIMIT 1"
_STEPS_BETWEEN = f"SELECT {_STEP_COLUMNS} FROM steps WHERE id >= ? AND id <= ? ORDER BY id"
# The newest checkpoints in event rows (a reverse seek), after those of the old table;
# the second query: the newest that wrote their summary out, which need no other row.
# Read as bytes: an edited value of any type must fail its signature, not the read.
_CHECKPOINT_COLUMNS = "seq, CAST(checkpoint AS BLOB), hash, CAST(signature AS BLOB), ts"
SELECT_EVENT_CHECKPOINTS = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM events"
    " WHERE id > ? AND id < ? AND signature IS NOT NULL ORDER BY id DESC LIMIT ?"
)
SELECT_EVENT_CHECKPOINTS_ASCENDING = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM events"
    " WHERE id > ? AND id < ? AND signature IS NOT NULL ORDER BY id LIMIT ?"
)
SELECT_WRITTEN_CHECKPOINTS = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM events WHERE id > ? AND id < ?"
    " AND signature IS NOT NULL AND checkpoint IS NOT NULL ORDER BY id DESC LIMIT 2"
)
# Schema 5: most checkpoints leave their summary out; it is the newest summary written
# before them with the events since folded in (see SqliteStore._derived_summary).
SELECT_SUMMARY_BEFORE = (
    "SELECT seq, CAST(checkpoint AS BLOB) FROM events"
    " WHERE id > ? AND id < ? AND checkpoint IS NOT NULL ORDER BY id DESC LIMIT 1"
)
# A session's history chained again under the key (schema 7, SqliteStore.rechain): the
# one UPDATE of events there is, with the trigger that forbids it dropped and made again
# (as 0005_compact_events.sql makes it) in the same transaction.
SELECT_CHAIN = "SELECT chain FROM sessions WHERE sid = ?"
DROP_EVENTS_UPDATE_TRIGGER = "DROP TRIGGER events_are_append_only_update"
CREATE_EVENTS_UPDATE_TRIGGER = (
    "CREATE TRIGGER events_are_append_only_update BEFORE UPDATE ON events\n"
    "BEGIN\n    SELECT RAISE(ABORT, 'events are append-only');\nEND"
)
RECHAIN_EVENT = "UPDATE events SET payload = ?, hash = ?, signature = ? WHERE id = ?"
RECHAIN_OLD_CHECKPOINT = "UPDATE checkpoints SET head = ?, signature = ? WHERE sid = ? AND id = ?"
MARK_RECHAINED = "UPDATE sessions SET chain = ?, key_id = ? WHERE sid = ?"
# What versions before schema 4 wrote: two slots per session, read, never written.
SELECT_CHECKPOINTS = (
    "SELECT id, seq, summary, head, signature, created_at FROM checkpoints WHERE sid = ?"
    " ORDER BY id DESC"
)
UPSERT_FILE = (
    "INSERT OR REPLACE INTO files (sid, path, sha256, size, mtime_ns, ctime_ns, ino, seq)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
SELECT_FILES = (
    "SELECT path, sha256, size, mtime_ns, ctime_ns, ino FROM files WHERE sid = ? ORDER BY path"
)
# The step events that last recorded some of a session's files ({}: the ?s of the paths).
# The CASE reads a payload only once it is known to be JSON (see SELECT_MODEL_RESULTS).
_FIELD = "CASE WHEN json_valid(e.payload) THEN json_extract(e.payload, '$.{}') END"
_TOUCH_COLUMNS = (
    f"s.id, f.path, f.seq, e.ts, {_FIELD.format('step')}, {_FIELD.format('kind')},"
    f" {_FIELD.format('position')} FROM files f JOIN sessions s ON s.sid = f.sid"
    f" JOIN events e ON e.id = f.sid * {_SPAN} + f.seq"
)
_PATHS_A_QUERY = 1000
SELECT_TOUCHES = f"SELECT {_TOUCH_COLUMNS} WHERE f.sid = ? AND f.path IN ({{}})"
# Other sessions' records of these paths made after a moment: who worked on them since.
SELECT_TOUCHES_SINCE = (
    f"SELECT {_TOUCH_COLUMNS} WHERE f.sid != ? AND e.ts > ? AND f.path IN ({{}}) ORDER BY e.ts"
)
INSERT_MESSAGE = "INSERT INTO messages (sid, idx, role, content, seq) VALUES (?, ?, ?, ?, ?)"
SELECT_MESSAGES = "SELECT idx, role, content, seq FROM messages WHERE sid = ? ORDER BY idx"


def _event_row(
    sid: int,
    seq: int,
    event_id: str,
    ts_us: int,
    type_: str,
    payload_json: str,
    hash_: bytes,
    checkpoint: str | None = None,
    signature: bytes | None = None,
) -> tuple[Any, ...]:
    """An event's row as INSERT_EVENT takes it; ``signature``: its checkpoint's tag, and
    ``checkpoint`` the summary when the checkpoint writes it out."""
    id_, event_id_bytes = key(sid, seq), uuid_bytes(event_id)
    return (id_, sid, seq, event_id_bytes, ts_us, type_, payload_json, hash_, checkpoint, signature)


# One statement of a write: the SQL, its parameters, and whether they are many rows of
# them (executemany).
_Statement = tuple[str, Any, bool]


def _statements(sid: int, c: Commit) -> list[_Statement]:
    """What writing ``c`` for session ``sid`` executes, in order."""
    statements: list[_Statement] = []
    if c.blobs:
        blobs = [(sha, len(data), compress(data)) for sha, data in c.blobs]
        statements.append((INSERT_BLOB, blobs, True))
    # No checkpoint (the last two columns) but in the last row: see below.
    rows = [
        _event_row(sid, e.seq, e.event_id, e.ts_us, e.type.value, e.payload_json, e.hash)
        for e in c.events
    ]
    k = c.checkpoint
    if k is not None:
        # A checkpoint is taken at the write's last event and goes into its row.
        assert k.seq == c.events[-1].seq
        summary = k.summary if c.summary_written else None
        rows[-1] = (*rows[-1][:8], summary, bytes.fromhex(k.signature))
    # A step's completion, one row: no executemany set-up.
    statements.append(
        (INSERT_EVENT, rows[0], False) if len(rows) == 1 else (INSERT_EVENT, rows, True)
    )
    for r in c.steps:
        step = (key(sid, r.position), sid, r.position, r.step_id, r.task_id, r.kind)
        fields = (r.status.value, r.attempt, r.input_hash, r.event_seq)
        statements.append((UPSERT_STEP, (*step, *fields), False))
    if c.step_ids:
        statements.append((INSERT_STEP_ID, [(sid, step_id) for step_id in c.step_ids], True))
    if c.messages:
        messages = [(sid, m.idx, m.role, m.content, m.seq) for m in c.messages]
        statements.append((INSERT_MESSAGE, messages, True))
    if c.files:
        seq = c.events[-1].seq
        files = [
            (sid, f.path, f.sha256, f.size, f.mtime_ns, f.ctime_ns, f.ino, seq) for f in c.files
        ]
        statements.append((UPSERT_FILE, files, True))
    if c.state is not None:
        statements.append((UPDATE_SESSION, (c.state, c.updated_at, sid), False))
    if c.archive:
        statements.append((ARCHIVE_SESSION, (sid,), False))
    return statements


def _run(conn: sqlite3.Connection, statements: list[_Statement]) -> None:
    for sql, parameters, many in statements:
        if many:
            conn.executemany(sql, parameters)
        else:
            conn.execute(sql, parameters)


class SqliteStore(SyncBookkeeping, Pruning):
    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path

    @classmethod
    def open(cls, path: Path, durability: Durability = "full") -> SqliteStore:
        """The store in the file ``path``, created or migrated to this acode's schema."""
        conn = connect(path, durability)
        try:
            migrate(conn, path)
        except BaseException:
            conn.close()
            raise
        return cls(conn, path)

    @property
    def location(self) -> str:
        return str(self.path)

    @property
    def url(self) -> str:
        from urllib.parse import quote

        # Quoted: a file name may hold a "%", "?" or "#" of its own.
        return f"sqlite://{quote(str(self.path.absolute()))}"

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
        key_id: str,
        first: Commit,
    ) -> SessionRow:
        try:
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
                        key_id,
                    ),
                )
                _run(conn, _statements(int(cur.lastrowid or 0), first))
        except sqlite3.Error as exc:
            raise write_error(self.path, exc) from exc
        return self.session(session_id)

    def session(self, session_id: str) -> SessionRow:
        row = self.conn.execute(SELECT_SESSION_BY_ID, (session_id,)).fetchone()
        if row is None:
            raise StorageError(f"session {session_id} is not in {self.path}")
        return self._session(row)._replace(short_id=self.short_id(session_id))

    def _session(self, row: tuple[Any, ...]) -> SessionRow:
        """A sessions row with the time, task and step of its newest checkpoint."""
        values = list(row)
        values[13] = bool(values[13])  # archived
        session = SessionRow(*values)
        newest = self.newest_checkpoint(session)
        if newest is None:
            return session
        task, step = checkpoint_position(newest, session.title)
        return session._replace(
            updated_at=max(session.updated_at, newest.created_at),
            current_task=task,
            current_step=step,
        )

    def sessions_with_prefix(self, prefix: str) -> list[SessionRow]:
        """Sessions whose id starts with ``prefix`` (at most 11, enough to say "ambiguous")."""
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else "\U0010ffff"
        rows = [
            self._session(r) for r in self.conn.execute(SELECT_SESSIONS_BY_PREFIX, (prefix, upper))
        ]
        return [r._replace(short_id=self.short_id(r.id)) for r in rows]

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

        rows = [self._session(r) for r in self.conn.execute(SELECT_SESSIONS).fetchall()]
        rows.sort(key=lambda r: (r.updated_at, r.id), reverse=True)
        short = abbreviations([r.id for r in rows])
        return [r._replace(short_id=short[r.id]) for r in rows]

    # -- the write path -----------------------------------------------------------

    def commit(self, sid: int, commit: Commit) -> None:
        """Write one Commit in one transaction, or nothing: StorageError when the
        database cannot take it."""
        statements = _statements(sid, commit)
        try:
            if len(statements) == 1:
                # One statement is a transaction of its own, as atomic and as durable, and
                # waits for the write lock the same way: BEGIN and COMMIT would only cost
                # two more statements at most steps, whose completion is a single row.
                _run(self.conn, statements)
                return
            with atomic(self.conn) as conn:
                _run(conn, statements)
        except sqlite3.Error as exc:
            raise write_error(self.path, exc) from exc

    def append_completion(
        self,
        sid: int,
        seq: int,
        event_id: str,
        ts_us: int,
        payload_json: str,
        hash_: bytes,
        signature: bytes,
    ) -> None:
        """A step's completion, one event row and nothing else: most steps of a session.
        One statement is a transaction of its own (see ``commit``)."""
        row = (
            key(sid, seq),
            sid,
            seq,
            uuid_bytes(event_id),
            ts_us,
            _COMPLETED,
            payload_json,
            hash_,
            None,
            signature,
        )
        try:
            self.conn.execute(INSERT_EVENT, row)
        except sqlite3.Error as exc:
            raise write_error(self.path, exc) from exc

    def rechain(
        self,
        session: SessionRow,
        events: Sequence[tuple[int, str, bytes, bytes | None]],
        old_checkpoints: Sequence[tuple[int, bytes, str]],
        chain: int,
        key_id: str,
    ) -> bool:
        """Record session ``session``'s history again under chain version ``chain``, in
        one transaction: each event's (seq, payload JSON, hash, checkpoint signature),
        each checkpoint of the old table's (id, head, signature). The only change events
        ever take (acode/engine/rechain.py checks the history first); False when another
        process did it first."""
        try:
            with atomic(self.conn) as conn:
                found = conn.execute(SELECT_CHAIN, (session.sid,)).fetchone()
                if found is None or found[0] == chain:
                    return False
                conn.execute(DROP_EVENTS_UPDATE_TRIGGER)
                conn.executemany(
                    RECHAIN_EVENT,
                    [(p, h, s, key(session.sid, seq)) for seq, p, h, s in events],
                )
                conn.execute(CREATE_EVENTS_UPDATE_TRIGGER)
                conn.executemany(
                    RECHAIN_OLD_CHECKPOINT,
                    [(head, sig, session.sid, cp_id) for cp_id, head, sig in old_checkpoints],
                )
                conn.execute(MARK_RECHAINED, (chain, key_id, session.sid))
        except sqlite3.Error as exc:
            raise write_error(self.path, exc) from exc
        return True

    # -- reads ----------------------------------------------------------------------

    def events(self, session: SessionRow, after_seq: int = 0, limit: int = -1) -> list[Event]:
        bounds = (key(session.sid, after_seq), key(session.sid + 1, 0), limit)
        rows = self.conn.execute(SELECT_EVENTS_AFTER, bounds).fetchall()
        return [event_from_row(session.id, r) for r in rows]

    def event(self, session: SessionRow, seq: int) -> Event:
        row = self.conn.execute(SELECT_EVENT, (key(session.sid, seq),)).fetchone()
        if row is None:
            raise StorageError(f"session {session.short_id or session.id} has no event {seq}")
        return event_from_row(session.id, row)

    def events_at(self, session: SessionRow, seqs: Sequence[int]) -> dict[int, Event]:
        """The events numbered ``seqs``, by number, in one query."""
        if not seqs:
            return {}
        sql = SELECT_EVENTS_AT.format(", ".join("?" * len(seqs)))
        rows = self.conn.execute(sql, [key(session.sid, seq) for seq in seqs]).fetchall()
        found = {r[0]: event_from_row(session.id, r) for r in rows}
        missing = [seq for seq in seqs if seq not in found]
        if missing:
            raise StorageError(
                f"session {session.short_id or session.id} has no event {missing[0]}"
            )
        return found

    def events_of_type(
        self, session: SessionRow, type_: EventType, after_seq: int = 0
    ) -> list[Event]:
        bounds = (key(session.sid, after_seq), key(session.sid + 1, 0))
        rows = self.conn.execute(SELECT_EVENTS_OF_TYPE, (*bounds, type_.value)).fetchall()
        return [event_from_row(session.id, r) for r in rows]

    def event_rows(
        self, session: SessionRow, after_seq: int, limit: int
    ) -> list[tuple[int, str, int, str, str, bytes]]:
        """Up to ``limit`` events after ``after_seq``, in order, as rows (seq, event id,
        time, type, payload JSON, hash): a replay reads a long session in windows, each
        event checked against its chain, with no Event built but for what it uses."""
        bounds = (key(session.sid, after_seq), key(session.sid + 1, 0), limit)
        # A replay reads every event so: the common id is formatted here, not through
        # _event_id; the hash is whatever the column holds (only a link's bytes equal
        # one, so an edited value fails the check that reads it).
        return [
            (
                seq,
                uuid_text(event_id)
                if type(event_id) is bytes and len(event_id) == 16
                else event_id_text(event_id),
                ts,
                type_,
                payload,
                hash_,
            )
            for seq, event_id, ts, type_, payload, hash_ in self.conn.execute(
                SELECT_EVENT_ROWS, bounds
            )
        ]

    def hashes(self, session: SessionRow, seqs: Sequence[int]) -> dict[int, bytes]:
        """The stored hashes of events ``seqs`` that exist, by number: what the events
        after them link to."""
        if not seqs:
            return {}
        sql = SELECT_HASHES_AT.format(", ".join("?" * len(seqs)))
        rows = self.conn.execute(sql, [key(session.sid, seq) for seq in seqs])
        return {int(seq): bytes(hash_) for seq, hash_ in rows}

    def unfinished_steps(self, sid: int) -> list[StepRecord]:
        """Steps that did not complete: in progress, rolled back for a retry, or failed."""
        bounds = (key(sid, 0), key(sid + 1, 0))
        return [step_from_row(r) for r in self.conn.execute(SELECT_UNFINISHED_STEPS, bounds)]

    def newest_steps(self, session: SessionRow, count: int) -> list[StepRecord]:
        """The records of the ``count`` highest positions, by position, read backwards
        from the end of the history: what a view of the newest steps needs, at any length."""
        records: dict[int, StepRecord] = {}
        lower, upper = key(session.sid, 0), key(session.sid + 1, 0)
        while len(records) < count:
            rows = self.conn.execute(SELECT_NEWEST_STEP_EVENTS, (lower, upper, count)).fetchall()
            for seq, type_, payload in rows:
                status = step_status(type_)
                assert status is not None  # the query asks for step events only
                record = step_record(status, seq, json.loads(payload))
                records.setdefault(record.position, record)
            if len(rows) < count:
                break
            upper = key(session.sid, rows[-1][0])
        return [records[p] for p in sorted(records)[-count:]]

    def model_results(
        self, session: SessionRow, after_seq: int = 0, upto_seq: int = _SPAN - 1
    ) -> list[dict[str, Any]]:
        """The recorded result of every answered model call among the events after
        ``after_seq`` up to ``upto_seq`` included, in order."""
        bounds = (key(session.sid, after_seq), key(session.sid, upto_seq + 1))
        return [json.loads(r[0]) for r in self.conn.execute(SELECT_MODEL_RESULTS, bounds)]

    def step_times(self, session: SessionRow) -> tuple[int, int]:
        """The number of completed steps and the sum of their recorded durations (µs)."""
        bounds = (key(session.sid, 0), key(session.sid + 1, 0))
        count, total = self.conn.execute(SELECT_STEP_TIMES, bounds).fetchone()
        return int(count), int(total)

    def has_step_id(self, sid: int, step_id: str) -> bool:
        """Whether the step id ledger holds ``step_id``: one seek, at any history length."""
        return self.conn.execute(HAS_STEP_ID, (sid, step_id)).fetchone() is not None

    def step_id_ledger(self, sid: int) -> set[str]:
        return {str(r[0]) for r in self.conn.execute(SELECT_STEP_ID_LEDGER, (sid,))}

    def unledgered_step_ids(self, session: SessionRow) -> list[str]:
        """The step ids of the events after the newest checkpoint that wrote its summary
        out, which the ledger does not hold yet: a few dozen at most (SUMMARY_EVERY)."""
        bounds = (key(session.sid, 0), key(session.sid + 1, 0))
        return [str(r[0]) for r in self.conn.execute(SELECT_UNLEDGERED_STEP_IDS, bounds)]

    def has_messages(self, sid: int) -> bool:
        return self.conn.execute(HAS_MESSAGES, (sid,)).fetchone() is not None

    def steps(self, sid: int) -> list[StepRecord]:
        """Every step's record, by position: the events folded, since a step that
        completed in its first write has no row in `steps` (schema 4)."""
        bounds = (key(sid, 0), key(sid + 1, 0), -1)  # LIMIT -1: all of them
        records = step_records(self.conn.execute(SELECT_STEP_EVENTS, bounds))
        return [records[p] for p in sorted(records)]

    def step_rows(self, sid: int, first: int = 0, last: int = _SPAN - 1) -> list[StepRecord]:
        """The rows of the `steps` table at positions [first, last]: those of the steps
        that have a start record, were retried, failed or await an approval."""
        bounds = (key(sid, first), key(sid, last))
        return [step_from_row(r) for r in self.conn.execute(_STEPS_BETWEEN, bounds)]

    def checkpoints(self, session: SessionRow) -> list[CheckpointRow]:
        """The checkpoints to load from, newest first: the two newest written into event
        rows; then the two newest of those that wrote their summary out, for when the
        summary the others derive theirs from was damaged; then those an older acode kept
        in the `checkpoints` table. Only a checkpoint's signature says it is right."""
        old = self._old_checkpoints(session.sid)
        bounds = self._checkpoint_bounds(session.sid, old)
        rows = self.conn.execute(SELECT_EVENT_CHECKPOINTS, (*bounds, 2)).fetchall()
        taken = {r[0] for r in rows}
        rows += [
            r for r in self.conn.execute(SELECT_WRITTEN_CHECKPOINTS, bounds) if r[0] not in taken
        ]
        return [self._checkpoint(session, r) for r in rows] + old

    def checkpoint_rows(
        self, session: SessionRow
    ) -> list[tuple[int, str | None, bytes | None, int]]:
        """Every checkpoint in an event row, in order, as stored: (seq, summary text or
        None where it is derived, signature, time). Old-table ones: ``old_checkpoints``."""
        bounds = (*self._checkpoint_bounds(session.sid, []), -1)
        rows = self.conn.execute(SELECT_EVENT_CHECKPOINTS_ASCENDING, bounds)
        return [
            (int(seq), None if text is None else text.decode("utf-8", "replace"), sig, int(ts))
            for seq, text, _, sig, ts in rows
        ]

    def old_checkpoints(self, session: SessionRow) -> list[CheckpointRow]:
        """The checkpoints acode kept in their own table before schema 4, newest first."""
        return self._old_checkpoints(session.sid)

    def newest_checkpoint(self, session: SessionRow) -> CheckpointRow | None:
        """The newest checkpoint, unverified: what a list of sessions shows."""
        old = self._old_checkpoints(session.sid)
        bounds = self._checkpoint_bounds(session.sid, old)
        row = self.conn.execute(SELECT_EVENT_CHECKPOINTS, (*bounds, 1)).fetchone()
        if row is not None:
            return self._checkpoint(session, row)
        return old[0] if old else None

    def _old_checkpoints(self, sid: int) -> list[CheckpointRow]:
        return [CheckpointRow(*r) for r in self.conn.execute(SELECT_CHECKPOINTS, (sid,))]

    @staticmethod
    def _checkpoint_bounds(sid: int, old: list[CheckpointRow]) -> tuple[int, int]:
        """The event rows that may hold checkpoints newer than the old table's."""
        return key(sid, old[0].seq if old else 0), key(sid + 1, 0)

    def _checkpoint(self, session: SessionRow, row: tuple[Any, ...]) -> CheckpointRow:
        seq, text, head, signature, ts = row
        summary = (
            self._derived_summary(session, seq) if text is None else text.decode("utf-8", "replace")
        )
        return CheckpointRow(
            id=seq,
            seq=seq,
            summary=summary,
            head=head,
            signature=signature_hex(signature),
            created_at=ts,
        )

    def _derived_summary(self, session: SessionRow, seq: int) -> str:
        """The summary at event ``seq``, derived (acode.store.rows.derived_summary)."""
        sid = session.sid
        base = self.conn.execute(SELECT_SUMMARY_BEFORE, (key(sid, 0), key(sid, seq))).fetchone()
        if base is None:
            return ""
        bounds = (key(sid, base[0]), key(sid, seq + 1), -1)
        return derived_summary(session, base, self.conn.execute(SELECT_EVENTS_AFTER, bounds))

    def files(self, sid: int) -> list[FileRow]:
        """The files the session read or wrote, as it last saw them."""
        return [FileRow(*r) for r in self.file_fields(sid)]

    def file_fields(self, sid: int) -> list[FileFields]:
        """:meth:`files` as plain tuples, in path order (no object made for each)."""
        rows: list[FileFields] = self.conn.execute(SELECT_FILES, (sid,)).fetchall()
        return rows

    def touches(self, sid: int, paths: Sequence[str]) -> list[FileTouch]:
        """The step events that last recorded each of ``paths`` for session ``sid``."""
        return self._touches(SELECT_TOUCHES, (sid,), paths)

    def touches_since(self, sid: int, paths: Sequence[str], after_us: int) -> list[FileTouch]:
        """The other sessions' last records of ``paths`` made after ``after_us``, oldest
        first."""
        return self._touches(SELECT_TOUCHES_SINCE, (sid, after_us), paths)

    def _touches(self, sql: str, leading: tuple[int, ...], paths: Sequence[str]) -> list[FileTouch]:
        found: list[FileTouch] = []
        # In slices: SQLite takes 32,766 parameters a statement (by default).
        for first in range(0, len(paths), _PATHS_A_QUERY):
            some = paths[first : first + _PATHS_A_QUERY]
            query = sql.format(", ".join("?" * len(some)))
            found += [FileTouch(*r) for r in self.conn.execute(query, (*leading, *some))]
        return found

    def messages(self, sid: int) -> list[MessageRow]:
        return [MessageRow(*r) for r in self.conn.execute(SELECT_MESSAGES, (sid,))]

    def blob(self, sha256: str) -> bytes:
        return get_blob(self.conn, sha256)

    # -- a whole session, for archives (acode/operations/archive.py) ------------------

    # What an archive needs loads when one is made or imported, not with every store.

    def stored_session(self, session_id: str) -> SessionRow | None:
        from acode.store.sqlite import archive_rows

        return archive_rows.stored_session(self.conn, session_id)

    def stored_events(self, sid: int, after_seq: int, limit: int) -> list[ArchivedEvent]:
        from acode.store.sqlite import archive_rows

        return archive_rows.stored_events(self.conn, sid, after_seq, limit)

    def stored_files(self, sid: int) -> list[ArchivedFile]:
        from acode.store.sqlite import archive_rows

        return archive_rows.stored_files(self.conn, sid)

    def stored_old_checkpoints(self, sid: int) -> list[tuple[int, CheckpointRow]]:
        from acode.store.sqlite import archive_rows

        return archive_rows.stored_old_checkpoints(self.conn, sid)

    def held_blobs(self, shas: Sequence[str]) -> list[str]:
        from acode.store.sqlite import archive_rows

        return archive_rows.held_blobs(self.conn, shas)

    def import_session(self, imported: SessionImport) -> SessionRow:
        from acode.store.sqlite import archive_rows

        try:
            with atomic(self.conn) as conn:
                archive_rows.insert_session(conn, imported)
        except sqlite3.Error as exc:
            if self.stored_session(imported.session.id) is not None:
                raise StorageError(
                    f"session {imported.session.id} is in {self.path} already",
                    hint="nothing was written",
                ) from exc
            raise write_error(self.path, exc) from exc
        return self.session(imported.session.id)
