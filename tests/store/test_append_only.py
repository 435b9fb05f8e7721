"""The event log and the conversation are append-only: the database refuses edits."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import acode
from acode.system.workspace import StatePaths


@pytest.fixture
def db(workspace: Path) -> Path:
    with acode.open_session("t", workspace=workspace) as s:
        s.step("a", lambda ctx: {"n": 1})
    return StatePaths(workspace).db


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE events SET payload = '{}' WHERE seq = 1",
        "DELETE FROM events WHERE seq = 1",
        "DELETE FROM events",
    ],
)
def test_events_cannot_be_updated_or_deleted(db: Path, statement: str) -> None:
    with sqlite3.connect(db) as conn, pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute(statement)


def test_messages_cannot_be_updated_or_deleted(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO messages VALUES (1, 0, 'user', '{}', 1)")
        for statement in ("UPDATE messages SET content = 'x'", "DELETE FROM messages"):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                conn.execute(statement)
