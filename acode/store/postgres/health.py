"""What `acode doctor` reads of a PostgreSQL store, changing nothing: whether it answers,
its schema's version, and how many sessions it holds (of the workspace its URL names).
Unlike opening the store, this never creates or migrates the schema."""

from __future__ import annotations

from typing import NamedTuple

from acode.store.postgres.connection import connect, parse_address, translated
from acode.store.postgres.migrations import available_migrations, schema_version

__all__ = ["StoreHealth", "store_health"]


class StoreHealth(NamedTuple):
    shown: str  # the store as messages name it, without a password
    schema: int  # 0: acode never created its schema there
    latest: int  # the newest version this acode knows
    sessions: int  # of the URL's workspace; 0 where the schema is missing or newer


def store_health(url: str) -> StoreHealth:
    """``StoreUnavailableError`` when the server does not answer or refuses the login."""
    address = parse_address(url)
    latest = available_migrations()[-1].number
    conn = connect(address, "full")
    try:
        with translated(address):
            schema = schema_version(conn)
            sessions = 0
            if 0 < schema <= latest:
                if address.workspace is None:
                    row = conn.execute("SELECT count(*) FROM acode_store.sessions").fetchone()
                else:
                    row = conn.execute(
                        "SELECT count(*) FROM acode_store.sessions WHERE workspace = %s",
                        (address.workspace,),
                    ).fetchone()
                sessions = int(row[0]) if row else 0
    finally:
        conn.close()
    return StoreHealth(address.shown, schema, latest, sessions)
