"""The remote schema `acode`: numbered, forward-only migrations, like the local one.

Each ``sql/NNNN_name.sql`` runs once, in order, in one transaction with its row in
``acode.schema_version``; an advisory lock keeps two machines from migrating at once.
A remote migrated by a newer acode is refused and left untouched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from acode.errors import SchemaTooNewError

if TYPE_CHECKING:
    import psycopg

__all__ = ["RemoteMigration", "ensure_schema", "remote_migrations", "remote_schema_version"]

_NAME = re.compile(r"(?P<number>\d{4})_(?P<name>\w+)\.sql")
# pg_advisory_xact_lock key: "acode" in ASCII.
_MIGRATION_LOCK = 0x61636F6465
_VERSION_TABLE = (
    "CREATE TABLE IF NOT EXISTS acode.schema_version ("
    " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
)


@dataclass(frozen=True)
class RemoteMigration:
    number: int
    name: str
    sql: str


def remote_migrations() -> list[RemoteMigration]:
    found = []
    for entry in resources.files("acode.sync").joinpath("sql").iterdir():
        match = _NAME.fullmatch(entry.name)
        if match:
            found.append(
                RemoteMigration(
                    number=int(match["number"]), name=match["name"], sql=entry.read_text()
                )
            )
    return sorted(found, key=lambda m: m.number)


def remote_schema_version(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
    """The version of the `acode` schema; 0 when there is none yet."""
    row = conn.execute("SELECT to_regclass('acode.schema_version') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM acode.schema_version").fetchone()
    return int(row[0]) if row else 0


def ensure_schema(conn: psycopg.Connection[tuple[Any, ...]], name: str) -> str:
    """Create or migrate the schema as needed; returns the remote's id. ``conn`` is in
    autocommit mode; ``name`` is how the remote is shown (no password)."""
    migrations = remote_migrations()
    latest = migrations[-1].number
    current = remote_schema_version(conn)
    _refuse_newer(current, latest, name)
    if current < latest:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute("CREATE SCHEMA IF NOT EXISTS acode")
            conn.execute(_VERSION_TABLE)
            current = remote_schema_version(conn)  # another machine may have gone first
            _refuse_newer(current, latest, name)
            for migration in migrations:
                if migration.number > current:
                    conn.execute(migration.sql)
                    conn.execute(
                        "INSERT INTO acode.schema_version (version) VALUES (%s)",
                        (migration.number,),
                    )
    row = conn.execute("SELECT id FROM acode.remote_info").fetchone()
    return str(row[0]) if row else ""


def _refuse_newer(current: int, latest: int, name: str) -> None:
    if current > latest:
        raise SchemaTooNewError(
            f"the remote {name} has acode schema version {current}, but this acode knows "
            f"versions up to {latest}",
            hint="upgrade acode on this machine (pip install -U acode); nothing was written "
            "to the remote and sessions go on locally",
        )
