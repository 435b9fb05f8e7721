"""Schema versions: forward migrations, old databases upgraded, newer ones refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from acode.errors import SchemaTooNewError
from acode.store.base import open_store
from acode.store.sqlite.connection import connect
from acode.store.sqlite.migrations import _apply, available_migrations, migrate, schema_version


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    numbers = [m.number for m in available_migrations()]
    assert numbers == list(range(1, len(numbers) + 1))


@pytest.mark.parametrize("start", [m.number - 1 for m in available_migrations()])
def test_a_database_at_every_older_version_upgrades_and_keeps_its_data(
    tmp_path: Path, start: int
) -> None:
    path = tmp_path / "old.db"
    conn = connect(path)
    for migration in available_migrations():
        if migration.number <= start:
            _apply(conn, migration)
    assert schema_version(conn) == start
    if start >= 1:
        conn.execute(
            "INSERT INTO sessions (id, title, state, workspace, kind, config, config_hash,"
            " created_at, updated_at) VALUES ('s', 'old', 'PAUSED', '/w', 'plan', '{}', 'h', 1, 1)"
        )
    latest = migrate(conn, path)
    assert latest == available_migrations()[-1].number == schema_version(conn)
    if start >= 1:
        assert conn.execute("SELECT title, state FROM sessions").fetchall() == [("old", "PAUSED")]
    conn.close()


def test_files_recorded_before_schema_7_have_no_change_time_or_inode(tmp_path: Path) -> None:
    """Rows of older files keep what they had; the stat data they lack reads as None,
    which the environment check takes as "not recorded" and hashes."""
    path = tmp_path / "old.db"
    conn = connect(path)
    for migration in available_migrations():
        if migration.number <= 6:
            _apply(conn, migration)
    conn.execute(
        "INSERT INTO files (sid, path, sha256, size, mtime_ns, seq) VALUES (1, 'a', 'h', 3, 9, 1)"
    )
    migrate(conn, path)
    conn.close()
    store = open_store(path)
    try:
        assert [tuple(r) for r in store.files(1)] == [("a", "h", 3, 9, None, None)]
    finally:
        store.close()


def test_a_database_from_a_newer_acode_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "acode.db"
    open_store(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA user_version = 999")
    before = path.read_bytes()
    with pytest.raises(SchemaTooNewError, match="schema version 999") as info:
        open_store(path)
    assert info.value.exit_code == 1
    assert "upgrade acode" in (info.value.hint or "")
    assert path.read_bytes() == before


def test_two_processes_migrating_at_once_do_not_collide(tmp_path: Path) -> None:
    path = tmp_path / "acode.db"
    a, b = connect(path), connect(path)
    migrate(a, path)
    migrate(b, path)  # sees the new version inside its own transaction and does nothing
    assert schema_version(b) == available_migrations()[-1].number
    a.close()
    b.close()


def test_connections_use_wal_and_the_chosen_durability(tmp_path: Path) -> None:
    full = connect(tmp_path / "a.db")
    normal = connect(tmp_path / "b.db", "normal")
    assert full.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert full.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert normal.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    full.close()
    normal.close()
