"""What ``acode doctor`` reads of a database: opened read-only, so that looking at a
database never writes, migrates or creates one."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import NamedTuple

from acode.store.sqlite.migrations import available_migrations, schema_version
from acode.store.sqlite.sync_state import SELECT_BACKLOG

__all__ = ["DatabaseHealth", "database_health"]


class DatabaseHealth(NamedTuple):
    problems: tuple[str, ...]  # PRAGMA quick_check's findings; empty when it says ok
    schema: int
    latest: int  # the newest schema this acode knows
    backlog: int | None  # events no remote has received; None when it cannot be read


def database_health(path: Path) -> DatabaseHealth:
    """sqlite3.DatabaseError when ``path`` is no database at all."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        schema = schema_version(conn)
        latest = available_migrations()[-1].number
        found = [str(row[0]) for row in conn.execute("PRAGMA quick_check")]
        problems = () if found == ["ok"] else tuple(found)
        return DatabaseHealth(problems, schema, latest, None if problems else _backlog(conn))
    finally:
        conn.close()


def _backlog(conn: sqlite3.Connection) -> int | None:
    try:
        rows = conn.execute(SELECT_BACKLOG).fetchall()
    except sqlite3.Error:  # a schema older or newer than this acode's
        return None
    return sum(max(0, int(last or 0) - int(synced)) for _, last, _, synced in rows)
