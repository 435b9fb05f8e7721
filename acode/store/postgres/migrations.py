"""The PostgreSQL store's schema `acode_store`: numbered, forward-only migrations.

Each ``sql/NNNN_name.sql`` runs once, in order, in one transaction with its row in
``acode_store.schema_version``; an advisory lock keeps two processes (or machines) from
migrating at once. A schema migrated by a newer acode is refused and left untouched.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from acode.errors import SchemaTooNewError
from acode.store.migration_files import Migration, migrations_in

if TYPE_CHECKING:
    import psycopg

__all__ = ["Migration", "available_migrations", "migrate", "schema_version"]

_SQL_DIR = Path(__file__).parent / "sql"
# pg_advisory_xact_lock key: "acodest" in ASCII (the mirror's is "acode").
_MIGRATION_LOCK = 0x61636F64657374


def available_migrations() -> list[Migration]:
    return migrations_in(_SQL_DIR)


def schema_version(conn: psycopg.Connection[Any]) -> int:
    """The version of the `acode_store` schema; 0 when there is none yet."""
    row = conn.execute("SELECT to_regclass('acode_store.schema_version') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return 0
    row = conn.execute(
        "SELECT coalesce(max(version), 0) FROM acode_store.schema_version"
    ).fetchone()
    return int(row[0]) if row else 0


def migrate(conn: psycopg.Connection[Any], shown: str) -> int:
    """Create or migrate the schema (``conn`` in autocommit mode; ``shown``: the store as
    messages name it). Returns the version now in force."""
    migrations = available_migrations()
    latest = migrations[-1].number
    current = schema_version(conn)
    _refuse_newer(current, latest, shown)
    if current < latest:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute("CREATE SCHEMA IF NOT EXISTS acode_store")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS acode_store.schema_version ("
                " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            current = schema_version(conn)  # another process may have gone first
            _refuse_newer(current, latest, shown)
            for migration in migrations:
                if migration.number > current:
                    conn.execute(migration.sql.encode(), prepare=False)  # a script
                    conn.execute(
                        "INSERT INTO acode_store.schema_version (version) VALUES (%s)",
                        (migration.number,),
                    )
    return max(current, latest)


def _refuse_newer(current: int, latest: int, shown: str) -> None:
    if current > latest:
        raise SchemaTooNewError(
            f"the PostgreSQL store {shown} has acode schema version {current}, but this "
            f"acode knows versions up to {latest}",
            hint="upgrade acode on this machine (pip install -U acode); "
            "the database was left untouched",
        )
