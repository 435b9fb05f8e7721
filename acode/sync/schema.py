"""The remote schema `acode`: numbered, forward-only migrations, like the local one.

Each ``sql/NNNN_name.sql`` runs once, in order, in one transaction with its row in
``acode.schema_version``; an advisory lock keeps two machines from migrating at once.
A remote migrated by a newer acode is refused and left untouched.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acode.errors import SchemaTooNewError
from acode.store.migration_files import Migration, migrations_in

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "Migration",
    "ensure_schema",
    "migrate",
    "remote_migrations",
    "remote_schema_version",
]

# pg_advisory_xact_lock key: "acode" in ASCII.
_MIGRATION_LOCK = 0x61636F6465
_VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS {schema}.schema_version ("
    " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
)


def remote_migrations(package: str = "acode.sync") -> list[Migration]:
    """The migrations in ``package``'s ``sql/`` folder, in order."""
    return migrations_in(Path(str(resources.files(package).joinpath("sql"))))


def remote_schema_version(conn: psycopg.Connection[tuple[Any, ...]], schema: str = "acode") -> int:
    """The version of the ``schema`` (`acode`: the mirror's); 0 when there is none yet."""
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.schema_version",))
    found = row.fetchone()
    if not found or not found[0]:
        return 0
    found = conn.execute(
        f"SELECT coalesce(max(version), 0) FROM {schema}.schema_version"
    ).fetchone()
    return int(found[0]) if found else 0


def ensure_schema(conn: psycopg.Connection[tuple[Any, ...]], name: str) -> str:
    """Create or migrate the schema as needed; returns the remote's id. ``conn`` is in
    autocommit mode; ``name`` is how the remote is shown (no password)."""
    migrate(conn, name)
    row = conn.execute("SELECT id FROM acode.remote_info").fetchone()
    return str(row[0]) if row else ""


def migrate(
    conn: psycopg.Connection[tuple[Any, ...]],
    name: str,
    *,
    package: str = "acode.sync",
    schema: str = "acode",
) -> None:
    """Run the migrations of ``package`` not yet in ``schema`` (the mirror's by default;
    the fleet's queue keeps its own schema and its own numbers)."""
    migrations = remote_migrations(package)
    latest = migrations[-1].number
    current = remote_schema_version(conn, schema)
    _refuse_newer(current, latest, name)
    if current < latest:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            conn.execute(_VERSION_TABLE.format(schema=schema))
            current = remote_schema_version(conn, schema)  # another machine may have gone first
            _refuse_newer(current, latest, name)
            for migration in migrations:
                if migration.number > current:
                    conn.execute(migration.sql)
                    conn.execute(
                        f"INSERT INTO {schema}.schema_version (version) VALUES (%s)",
                        (migration.number,),
                    )


def _refuse_newer(current: int, latest: int, name: str) -> None:
    if current > latest:
        raise SchemaTooNewError(
            f"the remote {name} has acode schema version {current}, but this acode knows "
            f"versions up to {latest}",
            hint="upgrade acode on this machine (pip install -U acode); nothing was written "
            "to the remote and sessions go on locally",
        )
