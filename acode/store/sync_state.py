"""The local side of the remote mirror: pending events and each session's `sync_state`.

Events with ``seq > synced_seq`` are pending. ``synced_seq`` moves only after the remote
committed the events it covers, and never backwards (two pushers may race). The rows
written here need no fsync: losing one only re-sends events the remote already holds
and ignores, so a sync connection may use durability ``normal``.
"""

from __future__ import annotations

from dataclasses import dataclass

from acode.domain.events import Event
from acode.store.connection import atomic
from acode.store.records import SessionRow
from acode.store.sqlite_store import SqliteStore, event_from_row, key

__all__ = ["Backlog", "SyncLedger", "SyncStateRow"]

SELECT_STATE = (
    "SELECT remote_id, synced_seq, last_attempt, last_success, last_error, next_retry,"
    " failures, down_since FROM sync_state WHERE sid = ?"
)
# A session's events are the rowid range [key(sid, 0), key(sid + 1, 0)) (schema 4).
SELECT_LAST_SEQ = "SELECT seq FROM events WHERE id > ? AND id < ? ORDER BY id DESC LIMIT 1"
SELECT_PENDING = (
    "SELECT seq, event_id, ts, type, payload, hash FROM events WHERE id > ? AND id < ?"
    " ORDER BY id LIMIT ?"
)
SELECT_BACKLOG = (
    "SELECT s.id, (SELECT e.seq FROM events e WHERE e.id > s.sid * 4294967296"
    " AND e.id < (s.sid + 1) * 4294967296 ORDER BY e.id DESC LIMIT 1), st.remote_id,"
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


@dataclass(frozen=True)
class SyncStateRow:
    """A session's sync bookkeeping; times in microseconds since the epoch."""

    remote_id: str | None = None
    synced_seq: int = 0
    last_attempt: int | None = None
    last_success: int | None = None
    last_error: str | None = None
    next_retry: int | None = None
    failures: int = 0
    down_since: int | None = None

    def synced_for(self, remote_id: str) -> int:
        """What ``remote_id`` holds: nothing, as far as we know, when it is not the
        remote recorded here (the configuration now names another one)."""
        return self.synced_seq if self.remote_id == remote_id else 0


@dataclass(frozen=True)
class Backlog:
    """One session's position: its last event and what the recorded remote holds."""

    session_id: str
    last_seq: int
    remote_id: str | None
    synced_seq: int

    def pending_for(self, remote_id: str | None = None) -> int:
        """Events ``remote_id`` lacks (None: the recorded remote, which is all that can
        be known without asking it)."""
        held = self.synced_seq if remote_id in (None, self.remote_id) else 0
        return max(0, self.last_seq - held)


class SyncLedger:
    """Reads what is pending and records each attempt's outcome, over ``store``'s
    connection."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store

    def state(self, sid: int) -> SyncStateRow:
        row = self.store.conn.execute(SELECT_STATE, (sid,)).fetchone()
        return SyncStateRow(*row) if row else SyncStateRow()

    def last_seq(self, sid: int) -> int:
        row = self.store.conn.execute(SELECT_LAST_SEQ, (key(sid, 0), key(sid + 1, 0))).fetchone()
        return 0 if row is None else int(row[0])

    def backlog(self) -> list[Backlog]:
        """Every session of the database, in id order."""
        return [
            Backlog(str(i), int(last or 0), remote, int(synced))
            for i, last, remote, synced in self.store.conn.execute(SELECT_BACKLOG)
        ]

    def pending(self, session: SessionRow, after_seq: int, limit: int) -> list[Event]:
        """Up to ``limit`` events after ``after_seq``, in seq order."""
        bounds = (key(session.sid, after_seq), key(session.sid + 1, 0))
        rows = self.store.conn.execute(SELECT_PENDING, (*bounds, limit))
        return [event_from_row(session.id, r) for r in rows]

    def mark_synced(self, sid: int, remote_id: str, seq: int, now_us: int) -> None:
        """The remote committed every event up to ``seq``: call only after its commit."""
        with atomic(self.store.conn) as conn:
            conn.execute(MARK_SYNCED, (sid, remote_id, seq, now_us, now_us))

    def record_failure(self, sid: int, reason: str, now_us: int, next_retry_us: int) -> None:
        with atomic(self.store.conn) as conn:
            conn.execute(RECORD_FAILURE, (sid, now_us, reason, next_retry_us, now_us))
