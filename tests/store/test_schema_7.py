"""Schema 8: a prune may delete a whole session's rows, and nothing else may.

A database of schema 7 upgrades with its sessions intact and verifiable; the triggers
that keep events, messages and step ids append-only still refuse every DELETE that no
prune names (a stray one, or one of another session than the prune's), and a new
database gives freed pages back incrementally.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

import acode
from acode.engine.journal import verify_history
from acode.security.signing import load_signer
from acode.store.sqlite.connection import connect
from acode.store.sqlite.migrations import _apply, available_migrations, schema_version
from acode.store.sqlite.store import SqliteStore
from acode.system.workspace import StatePaths


def _two_sessions(ws: Path) -> list[str]:
    ids = []
    for title in ("one", "two"):
        with acode.open_session(title, workspace=ws) as s:
            s.step("a", lambda ctx: {"n": 1})
            s.write("w", "f.txt", title)
            ids.append(s.id)
    return ids


def _schema_7_database(path: Path) -> None:
    """A database as acode wrote it at schema 7: migrations 1 to 7 only, and the
    auto-vacuum it had then (none)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    for migration in available_migrations():
        if migration.number <= 7:
            _apply(conn, migration)
    conn.close()


def test_a_schema_7_database_upgrades_and_its_sessions_verify(workspace: Path) -> None:
    db = StatePaths(workspace).db
    db.parent.mkdir(parents=True)
    _schema_7_database(db)
    with closing(sqlite3.connect(db)) as conn:
        assert schema_version(conn) == 7
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    ids = _two_sessions(workspace)  # opening it migrates it
    store = SqliteStore.open(db)
    try:
        assert schema_version(store.conn) == 8
        tables = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master")}
        assert {"pruning", "pruned_sessions"} <= tables
        for session_id in ids:
            verify_history(store, store.session(session_id), load_signer())
        # Converting the file to incremental auto-vacuum is the first prune's (a VACUUM).
        assert store.conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    finally:
        store.close()


def test_a_new_database_vacuums_incrementally(workspace: Path) -> None:
    _two_sessions(workspace)
    with closing(connect(StatePaths(workspace).db)) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # INCREMENTAL


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM events",
        "DELETE FROM events WHERE sid = 1",
        "DELETE FROM messages",
        "DELETE FROM step_ids WHERE sid = 1",
    ],
)
def test_a_delete_no_prune_names_is_refused(workspace: Path, statement: str) -> None:
    _two_sessions(workspace)
    with closing(sqlite3.connect(StatePaths(workspace).db, isolation_level=None)) as conn:
        conn.execute("INSERT INTO messages VALUES (1, 0, 'user', '{}', 1)")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(statement)


def test_a_prune_of_one_session_cannot_delete_another(workspace: Path) -> None:
    _two_sessions(workspace)
    with closing(sqlite3.connect(StatePaths(workspace).db, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO pruning (sid) VALUES (1)")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM events WHERE sid = 2")
        assert conn.execute("DELETE FROM events WHERE sid = 1").rowcount > 0
        conn.execute("ROLLBACK")
        assert conn.execute("SELECT count(*) FROM pruning").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM events WHERE sid = 1").fetchone()[0] > 0
