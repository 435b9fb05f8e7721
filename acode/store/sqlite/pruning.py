"""Pruning whole sessions (schema 8): the SQL of `acode session prune`, its record of each
pruned session, and giving the space back.

A prune is one transaction: it names its sessions in `pruning`, which is what lets the
append-only triggers take their events, messages and step ids, deletes every row of
them, the file images no remaining session refers to, records each one in
`pruned_sessions`, and empties `pruning` again. Killed at any instant, it leaves each
session whole or gone.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from acode.store.records import PruneCost, PrunedRow, SessionRow
from acode.store.sqlite.connection import atomic, write_error
from acode.store.sqlite.keys import key

__all__ = ["Pruning", "Reclaimed"]

# A file image is named by its SHA-256 in the events that use it (a write's pre- and
# post-image, a run's snapshot, a read's result) and in `files`. Any such name in a
# remaining session's event keeps the image, whatever field it is in.
_SHA = re.compile(r"[0-9a-f]{64}")
_EVENTS_OF = "FROM events WHERE id > ? AND id < ?"
SELECT_PAYLOADS = f"SELECT payload {_EVENTS_OF}"
SELECT_ALL_PAYLOADS = "SELECT sid, seq, payload FROM events ORDER BY id"
SELECT_SIDS = "SELECT sid FROM sessions"
SELECT_EVENT_COST = (
    "SELECT count(*), coalesce(sum(length(payload) + length(hash) + length(event_id)"
    f" + coalesce(length(checkpoint), 0) + coalesce(length(signature), 0) + 24), 0) {_EVENTS_OF}"
)
SELECT_MESSAGE_BYTES = "SELECT coalesce(sum(length(content) + 16), 0) FROM messages WHERE sid = ?"
SELECT_FILE_SHAS = "SELECT sha256 FROM files WHERE sid = ? AND sha256 IS NOT NULL"
SELECT_FILE_SHAS_ALL = "SELECT sid, sha256 FROM files WHERE sha256 IS NOT NULL"
SELECT_BLOB_SIZE = "SELECT length(data) FROM blobs WHERE sha256 = ?"
SELECT_LAST_EVENT = f"SELECT seq, hash {_EVENTS_OF} ORDER BY id DESC LIMIT 1"
SELECT_SESSION = "SELECT sid, state FROM sessions WHERE id = ?"
INSERT_PRUNING = "INSERT INTO pruning (sid) VALUES (?)"
_DELETES = (
    f"DELETE {_EVENTS_OF}",
    "DELETE FROM steps WHERE id >= ? AND id < ?",
)
_DELETES_BY_SID = (
    "DELETE FROM messages WHERE sid = ?",
    "DELETE FROM checkpoints WHERE sid = ?",
    "DELETE FROM step_ids WHERE sid = ?",
    "DELETE FROM files WHERE sid = ?",
    "DELETE FROM sync_state WHERE sid = ?",
    "DELETE FROM sessions WHERE sid = ?",
    "DELETE FROM pruning WHERE sid = ?",
)
DELETE_BLOB = "DELETE FROM blobs WHERE sha256 = ?"
INSERT_PRUNED = (
    "INSERT OR REPLACE INTO pruned_sessions (id, state, pruned_at, last_seq, last_hash, key_id,"
    " signature, files_left) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_PRUNED_COLUMNS = "id, state, pruned_at, last_seq, last_hash, key_id, signature, files_left"
SELECT_PRUNED_BY_PREFIX = (
    f"SELECT {_PRUNED_COLUMNS} FROM pruned_sessions WHERE id >= ? AND id < ? ORDER BY id LIMIT 11"
)
SELECT_FILES_LEFT = f"SELECT {_PRUNED_COLUMNS} FROM pruned_sessions WHERE files_left > 0"
CLEAR_FILES_LEFT = "UPDATE pruned_sessions SET files_left = 0 WHERE id = ?"


class Reclaimed(NamedTuple):
    """How the space a prune freed was given back to the file system."""

    converted: bool  # the database was VACUUMed into incremental auto-vacuum first
    error: str | None  # why the VACUUM failed (the prune stands); None: it did not


class Pruning:
    """The prune part of the SQLite store."""

    conn: sqlite3.Connection
    path: Path

    def prune_cost(self, sessions: Sequence[SessionRow]) -> PruneCost:
        """What pruning ``sessions`` would remove, read without a transaction: a dry
        run's figures, and what a state size limit is weighed with."""
        events: dict[str, int] = {}
        sizes: dict[str, int] = {}
        for row in sessions:
            bounds = (key(row.sid, 0), key(row.sid + 1, 0))
            count, size = self.conn.execute(SELECT_EVENT_COST, bounds).fetchone()
            size += self.conn.execute(SELECT_MESSAGE_BYTES, (row.sid,)).fetchone()[0]
            events[row.id], sizes[row.id] = int(count), int(size)
        freed, _ = self._unreferenced(self._referenced(sessions), {row.sid for row in sessions})
        blob_bytes = sum(self._blob_size(sha) for sha in freed)
        return PruneCost(
            events=events,
            bytes=sizes,
            blobs=len(freed),
            blob_bytes=blob_bytes,
            own_images=self._own_images(sessions),
        )

    def _own_images(self, sessions: Sequence[SessionRow]) -> dict[str, int]:
        """The bytes of the stored images each of ``sessions`` alone refers to: what
        pruning it by itself would free besides its rows."""
        owners: dict[str, set[int]] = {}
        for sid, _, payload in self.conn.execute(SELECT_ALL_PAYLOADS):
            for sha in _SHA.findall(str(payload)):
                owners.setdefault(sha, set()).add(sid)
        for sid, sha in self.conn.execute(SELECT_FILE_SHAS_ALL):
            owners.setdefault(str(sha), set()).add(sid)
        alone: dict[int, int] = {}
        for sha, sids in owners.items():
            if len(sids) == 1:
                (sid,) = sids
                alone[sid] = alone.get(sid, 0) + self._blob_size(sha)
        return {row.id: alone.get(row.sid, 0) for row in sessions}

    def prune(
        self,
        sessions: Sequence[SessionRow],
        *,
        now_us: int,
        key_id: str,
        sign: Callable[[bytes], bytes],
        files_left: int,
    ) -> list[PrunedRow]:
        """Remove ``sessions`` whole, with the file images no remaining session refers
        to, and record each one (signed by ``sign``), in one transaction. ``files_left``
        goes into each record: what of its files outside the database are still to
        remove (``pending_file_removals``). The caller holds the sessions' locks: none
        of them gains an event meanwhile."""
        going = {row.sid for row in sessions}
        # The other sessions' events are read before the transaction, which then reads
        # only those written since: sessions running now wait for the write lock as long
        # as it takes to delete, not to read the whole database.
        unused, seen = self._unreferenced(self._referenced(sessions), going)
        records: list[PrunedRow] = []
        try:
            with atomic(self.conn) as conn:
                for row in sessions:
                    records.append(self._remove(conn, row, now_us, key_id, sign, files_left))
                for sha in self._still_unreferenced(unused, seen):
                    conn.execute(DELETE_BLOB, (sha,))
        except sqlite3.Error as exc:
            raise write_error(self.path, exc) from exc
        return records

    def _remove(
        self,
        conn: sqlite3.Connection,
        row: SessionRow,
        now_us: int,
        key_id: str,
        sign: Callable[[bytes], bytes],
        files_left: int,
    ) -> PrunedRow:
        sid, state = conn.execute(SELECT_SESSION, (row.id,)).fetchone()
        bounds = (key(sid, 0), key(sid + 1, 0))
        last = conn.execute(SELECT_LAST_EVENT, bounds).fetchone()
        record = PrunedRow.signed(
            row.id, state, now_us, last, key_id=key_id, sign=sign, files_left=files_left
        )
        conn.execute(INSERT_PRUNING, (sid,))
        for sql in _DELETES:
            conn.execute(sql, bounds)
        for sql in _DELETES_BY_SID:
            conn.execute(sql, (sid,))
        conn.execute(INSERT_PRUNED, record)
        return record

    def _referenced(self, sessions: Iterable[SessionRow]) -> set[str]:
        """The file images ``sessions`` refer to, by their events and their files."""
        found: set[str] = set()
        for row in sessions:
            bounds = (key(row.sid, 0), key(row.sid + 1, 0))
            for (payload,) in self.conn.execute(SELECT_PAYLOADS, bounds):
                found.update(_SHA.findall(str(payload)))
            found.update(str(r[0]) for r in self.conn.execute(SELECT_FILE_SHAS, (row.sid,)))
        return found

    def _unreferenced(
        self, candidates: set[str], going: set[int]
    ) -> tuple[set[str], dict[int, int]]:
        """Those of ``candidates`` that are stored and that no session outside ``going``
        (sids) refers to, and the last event read of each session."""
        left = {sha for sha in candidates if self._blob_size(sha)}
        seen: dict[int, int] = {}
        if not left:
            return left, seen
        for sid, seq, payload in self.conn.execute(SELECT_ALL_PAYLOADS):
            if sid in going:
                continue
            seen[sid] = seq
            for sha in _SHA.findall(str(payload)):
                left.discard(sha)
        return self._not_in_files(left, going), seen

    def _still_unreferenced(self, left: set[str], seen: dict[int, int]) -> set[str]:
        """Of ``left``, those that the events written since ``seen`` (and the `files`
        rows) do not name either: read inside the prune's transaction, so that no
        session adds a reference between this check and the delete."""
        if not left:
            return left
        left = set(left)
        for (sid,) in self.conn.execute(SELECT_SIDS).fetchall():
            bounds = (key(sid, seen.get(sid, 0)), key(sid + 1, 0))
            for (payload,) in self.conn.execute(SELECT_PAYLOADS, bounds):
                for sha in _SHA.findall(str(payload)):
                    left.discard(sha)
        return self._not_in_files(left, set())

    def _not_in_files(self, left: set[str], going: set[int]) -> set[str]:
        """Of ``left``, those that no `files` row of a session outside ``going`` names."""
        for sid, sha in self.conn.execute(SELECT_FILE_SHAS_ALL):
            if sid not in going:
                left.discard(str(sha))
        return left

    def _blob_size(self, sha: str) -> int:
        row = self.conn.execute(SELECT_BLOB_SIZE, (sha,)).fetchone()
        return 0 if row is None else int(row[0])

    def pruned_with_prefix(self, prefix: str) -> list[PrunedRow]:
        """The records of pruned sessions whose id starts with ``prefix`` (at most 11)."""
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else "\U0010ffff"
        rows = self.conn.execute(SELECT_PRUNED_BY_PREFIX, (prefix, upper)).fetchall()
        return [_pruned(r) for r in rows]

    def pending_file_removals(self) -> list[PrunedRow]:
        """The pruned sessions whose files outside the database are still to remove."""
        return [_pruned(r) for r in self.conn.execute(SELECT_FILES_LEFT)]

    def files_removed(self, session_id: str) -> None:
        try:
            with atomic(self.conn) as conn:
                conn.execute(CLEAR_FILES_LEFT, (session_id,))
        except sqlite3.Error as exc:
            raise write_error(self.path, exc) from exc

    def reclaim_space(self) -> Reclaimed:
        """Give the pages a prune freed back to the file system: an incremental vacuum,
        after one VACUUM that converts a database made before schema 8 (auto_vacuum
        NONE). A VACUUM needs free space about the database's size; when it fails, the
        prune stands and the reason is returned."""
        converted, error = False, None
        mode = int(self.conn.execute("PRAGMA auto_vacuum").fetchone()[0])
        try:
            if mode == 0:
                self.conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
                self.conn.execute("VACUUM")
                converted = True
            else:
                # Run to completion: a statement step frees one page, and execute()
                # steps once where executescript() runs it through.
                self.conn.executescript("PRAGMA incremental_vacuum;")
            # The freed pages leave the file only once the WAL is written back into it.
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:
            error = str(exc)
        return Reclaimed(converted=converted, error=error)


def _pruned(row: tuple[Any, ...]) -> PrunedRow:
    # Read as stored: a value of another type where bytes belong fails the signature.
    id_, state, at, seq, hash_, key_id, signature, left = row
    return PrunedRow(
        id=str(id_),
        state=str(state),
        pruned_at=int(at),
        last_seq=int(seq),
        last_hash=hash_ if isinstance(hash_, bytes) else b"",
        key_id=str(key_id),
        signature=signature if isinstance(signature, bytes) else b"",
        files_left=int(left),
    )
