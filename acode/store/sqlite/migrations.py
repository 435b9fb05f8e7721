"""Numbered, forward-only schema migrations.

Each ``sql/NNNN_name.sql`` file runs once, in order, in the same transaction as the
bump of ``PRAGMA user_version``. A database written by a newer acode is refused.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from acode.domain.ids import uuid_bytes
from acode.errors import SchemaTooNewError, StorageError
from acode.store.migration_files import Migration, migrations_in
from acode.store.sqlite.connection import atomic

__all__ = ["Migration", "available_migrations", "migrate", "schema_version"]

# The scripts as the package installs them (package data), beside this module: reading
# them through importlib.resources loaded zipfile, tempfile and its readers at every
# opening of a database, milliseconds of each command's and each resume's start.
_SQL_DIR = Path(__file__).parent / "sql"


def available_migrations() -> list[Migration]:
    return migrations_in(_SQL_DIR)


def schema_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Bring the schema up to date; returns the version now in force."""
    migrations = available_migrations()
    latest = migrations[-1].number
    current = schema_version(conn)
    if current > latest:
        raise SchemaTooNewError(
            f"{path} has schema version {current}, but this acode knows versions up to {latest}",
            hint="upgrade acode (pip install -U acode); the database was left untouched",
        )
    for migration in migrations:
        if migration.number > current:
            try:
                _apply(conn, migration)
            except sqlite3.Error as exc:
                raise StorageError(
                    f"cannot upgrade {path} to schema version {migration.number} "
                    f"({migration.name}): {exc}",
                    hint="the database was left as it was, at version "
                    f"{schema_version(conn)}; it holds something acode never wrote, so "
                    "inspect it with `sqlite3`, or move it away to start afresh",
                ) from exc
    return max(current, latest)


def _provide_functions(conn: sqlite3.Connection) -> None:
    """The SQL functions a migration may call: conversions SQLite lacks."""
    conn.create_function("uuid_bytes", 1, _uuid_bytes, deterministic=True)


def _uuid_bytes(text: object) -> bytes | None:
    # NULL for what is not a UUID's text: the column's NOT NULL then fails the migration,
    # naming the column, and it rolls back whole.
    try:
        value = uuid_bytes(text) if isinstance(text, str) else b""
    except ValueError:
        return None
    return value if len(value) == 16 else None


def _apply(conn: sqlite3.Connection, migration: Migration) -> None:
    _provide_functions(conn)
    with atomic(conn):
        # Another process may have migrated while we waited for the write lock.
        if schema_version(conn) >= migration.number:
            return
        for statement in _statements(migration.sql):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {migration.number}")


def _statements(script: str) -> list[str]:
    """Split a script into statements; trigger bodies hold semicolons of their own,
    which is why this asks SQLite whether a statement is complete."""
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            if pending.strip():
                statements.append(pending.strip())
            pending = ""
    return statements
