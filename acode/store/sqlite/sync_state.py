"""The local side of the remote mirror: pending events and each session's `sync_state`.

Events with ``seq > synced_seq`` are pending. ``synced_seq`` moves only after the remote
committed the events it covers, and never backwards (two pushers may race). The rows
written here need no fsync: losing one only re-sends events the remote already holds
and ignores, so a sync connection may use durability ``normal``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from acode.store.records import Backlog, SyncStateRow
from acode.store.sqlite.connection import atomic, write_error
from acode.store.sqlite.keys import SPAN, key

__all__ = ["SyncBookkeeping"]

SELECT_STATE = (
    "SELECT remote_id, synced_seq, last_attempt, last_success, last_error, next_retry,"
    " failures, down_since FROM sync_state WHERE sid = ?"
)
# A session's events are the rowid range [key(sid, 0), key(sid + 1, 0)) (schema 4).
SELECT_LAST_SEQ = "SELECT seq FROM events WHERE id > ? AND id < ? ORDER BY id DESC LIMIT 1"
SELECT_BACKLOG = (
    f"SELECT s.id, (SELECT e.seq FROM events e WHERE e.id > s.sid * {SPAN}"
    f" AND e.id < (s.sid + 1) * {SPAN} ORDER BY e.id DESC LIMIT 1), st.remote_id,"
    " coalesce(st.synced_seq, 0) FROM sessions s LEFT JOIN sync_state st ON st.sid = s.sid"
    " ORDER BY s.id"
)
# A mark for another remote than the recorded one starts that remote's count afresh.
MARK_SYNCED = (
    "INSERT INTO sync_state (sid, remote_id, synced_seq, last_attempt, last_success, failures)"
    " VALUES (?, ?, ?, ?, ?, 0) ON CONFLICT (sid) DO UPDATE SET"
    " synced_seq = CASE WHEN sync_state.remote_id IS excluded.remote_id"
    " THEN max(sync_state.synced_seq, excluded.synced_seq) ELSE excluded.synced_seq END,"
    " remote_id = excluded.remote_id, last_attempt = excluded.last_attempt,"
    " last_success = excluded.last_success, last_error = NULL, next_retry = NULL,"
    " failures = 0, down_since = NULL"
)
RECORD_FAILURE = (
    "INSERT INTO sync_state (sid, last_attempt, last_error, next_retry, failures, down_since)"
    " VALUES (?, ?, ?, ?, 1, ?) ON CONFLICT (sid) DO UPDATE SET"
    " last_attempt = excluded.last_attempt, last_error = excluded.last_error,"
    " next_retry = excluded.next_retry, failures = sync_state.failures + 1,"
    " down_since = coalesce(sync_state.down_since, excluded.down_since)"
)


class SyncBookkeeping:
    """The ``sync_state`` part of the SQLite store: what is pending, and each attempt's
    outcome."""

    conn: sqlite3.Connection
    path: Path

    def sync_state(self, sid: int) -> SyncStateRow:
        row = self.conn.execute(SELECT_STATE, (sid,)).fetchone()
        return SyncStateRow(*row) if row else SyncStateRow()

    def last_seq(self, sid: int) -> int:
        row = self.conn.execute(SELECT_LAST_SEQ, (key(sid, 0), key(sid + 1, 0))).fetchone()
        return 0 if row is None else int(row[0])

    def sync_backlog(self) -> list[Backlog]:
        """Every session of the database, in id order."""
        return [
            Backlog(
                session_id=str(i), last_seq=int(last or 0), remote_id=remote, synced_seq=int(synced)
            )
            for i, last, remote, synced in self.conn.execute(SELECT_BACKLOG)
        ]

    def mark_synced(self, sid: int, remote_id: str, seq: int, now_us: int) -> None:
        """The remote committed every event up to ``seq``: call only after its commit."""
        self._write(MARK_SYNCED, (sid, remote_id, seq, now_us, now_us))

    def record_failure(self, sid: int, reason: str, now_us: int, next_retry_us: int) -> None:
        self._write(RECORD_FAILURE, (sid, now_us, reason, next_retry_us, now_us))

    def _write(self, sql: str, parameters: tuple[object, ...]) -> None:
        try:
            with atomic(self.conn) as conn:
                conn.execute(sql, parameters)
        except sqlite3.Error as exc:
            raise write_error(self.path, exc) from exc
