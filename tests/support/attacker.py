"""Someone who can write the workspace and its database, but cannot read the user's key:
what the security tests attack acode as. Every edit drops the triggers that make the
history append-only first, as such a person would.

An appended event gets the best link that can be made without the key: the plain
SHA-256 chain acode used before its chain was keyed (acode.domain.chain ``event_hash``),
which an older acode accepted.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from acode.domain.chain import event_hash
from acode.domain.events import canonical_json
from acode.domain.ids import uuid7, uuid_bytes, uuid_text
from acode.system.workspace import StatePaths

__all__ = ["Attacker"]

_TRIGGERS = (
    "events_are_append_only_update",
    "events_are_append_only_delete",
    "messages_are_append_only_update",
    "messages_are_append_only_delete",
    "step_ids_are_append_only_update",
    "step_ids_are_append_only_delete",
)


class Attacker:
    def __init__(self, workspace: Path) -> None:
        self.db = StatePaths(workspace).db

    def sql(self, statement: str, *args: object) -> int:
        """Run ``statement`` on the database; the number of rows it changed."""
        with closing(sqlite3.connect(self.db, isolation_level=None)) as conn:
            for trigger in _TRIGGERS:
                conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
            return conn.execute(statement, args).rowcount

    def rows(self, query: str, *args: object) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(self.db)) as conn:
            return conn.execute(query, args).fetchall()

    def sid(self, session_id: str) -> int:
        return int(self.rows("SELECT sid FROM sessions WHERE id = ?", session_id)[0][0])

    def payload(self, session_id: str, seq: int) -> dict[str, Any]:
        (text,) = self.rows(
            "SELECT payload FROM events WHERE sid = ? AND seq = ?", self.sid(session_id), seq
        )[0]
        value: dict[str, Any] = json.loads(text)
        return value

    def edit_payload(
        self, session_id: str, seq: int, change: Callable[[dict[str, Any]], None]
    ) -> None:
        """Change event ``seq``'s payload in place, its hash left as it was."""
        payload = self.payload(session_id, seq)
        change(payload)
        changed = self.sql(
            "UPDATE events SET payload = ? WHERE sid = ? AND seq = ?",
            canonical_json(payload),
            self.sid(session_id),
            seq,
        )
        assert changed == 1

    def append(self, session_id: str, type_: str, payload: dict[str, Any]) -> int:
        """Append an event after the newest one, linked by the plain chain; its seq."""
        sid = self.sid(session_id)
        seq, stored_id, ts, previous = self.rows(
            "SELECT seq, event_id, ts, hash FROM events WHERE sid = ? ORDER BY seq DESC LIMIT 1",
            sid,
        )[0]
        seq += 1
        ts = max(int(ts) + 1, time.time_ns() // 1000)
        event_id = uuid7(ts // 1000, bytes(10))
        if event_id <= uuid_text(stored_id):
            event_id = uuid7(int(ts) // 1000 + 1, bytes(10))
        text = canonical_json(payload)
        link = event_hash(bytes(previous), seq, event_id, ts, type_, text)
        self.sql(
            "INSERT INTO events (id, sid, seq, event_id, ts, type, payload, hash)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            sid * 2**32 + seq,
            sid,
            seq,
            uuid_bytes(event_id),
            ts,
            type_,
            text,
            link,
        )
        return int(seq)
