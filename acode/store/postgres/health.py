"""What `acode doctor` reads of a PostgreSQL store, changing nothing: whether it answers,
its schema's version, and how many sessions it holds (of the workspace its URL names)
and their size. Unlike opening the store, this never creates or migrates the schema."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from acode.store.postgres.connection import connect, parse_address, translated
from acode.store.postgres.migrations import available_migrations, schema_version
from acode.store.postgres.pruning import (
    SELECT_EVENT_COST,
    SELECT_MESSAGE_BYTES,
    SELECT_UNSHARED_BLOBS,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["StoreHealth", "store_health"]


class StoreHealth(NamedTuple):
    shown: str  # the store as messages name it, without a password
    schema: int  # 0: acode never created its schema there
    latest: int  # the newest version this acode knows
    sessions: int  # of the URL's workspace; 0 where the schema is missing or newer
    # What pruning all of them would free: their rows and the images no other session
    # uses, the measure of a prune's "Freed about" and of retention.max_state_bytes.
    bytes: int


def store_health(url: str) -> StoreHealth:
    """``StoreUnavailableError`` when the server does not answer or refuses the login."""
    address = parse_address(url)
    latest = available_migrations()[-1].number
    conn = connect(address, "full")
    try:
        with translated(address):
            schema = schema_version(conn)
            sids: list[int] = []
            if 0 < schema <= latest:
                if address.workspace is None:
                    found = conn.execute("SELECT sid FROM acode_store.sessions")
                else:
                    found = conn.execute(
                        "SELECT sid FROM acode_store.sessions WHERE workspace = %s",
                        (address.workspace,),
                    )
                sids = [int(sid) for (sid,) in found]
            size = _bytes(conn, sids) if sids else 0
    finally:
        conn.close()
    return StoreHealth(address.shown, schema, latest, len(sids), size)


def _bytes(conn: psycopg.Connection[Any], sids: list[int]) -> int:
    """What pruning the sessions ``sids`` would free, as the prune counts it
    (acode.store.postgres.pruning.prune_cost)."""
    events = sum(int(size) for _, _, size in conn.execute(SELECT_EVENT_COST, (sids,)))
    talk = sum(int(size) for _, size in conn.execute(SELECT_MESSAGE_BYTES, (sids,)))
    images = conn.execute(SELECT_UNSHARED_BLOBS, {"going": sids})
    return events + talk + sum(int(size) for _, size in images)
