"""Pruning whole sessions in the PostgreSQL store (schema 2): the SQL of `acode session
prune`, its record of each pruned session, and what becomes of the space.

As in SQLite (acode/store/sqlite/pruning.py), a prune is one transaction: it removes
every row of its sessions, the file images no remaining session of the database refers
to (of any workspace: the images are shared), and records each session in
`pruned_sessions`. The append-only triggers let its DELETEs through only for the session
the transaction-local setting `acode.pruning` names (sql/0002_prune.sql says why a
setting and not a table).

The transaction first locks `blobs` and `events` against writes (SHARE ROW EXCLUSIVE,
in the order a step's write takes them, so that the two never deadlock): a step that
stored an image, or named one in an event, is either committed before the prune reads
which images are used, or waits until the prune has committed. Steps of every workspace
of the database wait that long; two prunes take turns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from acode.store.records import PruneCost, PrunedRow, SessionRow

if TYPE_CHECKING:
    import psycopg

__all__ = ["PRUNED_BY_PREFIX", "PRUNED_WITH_FILES_LEFT", "prune_cost", "prune_sessions"]

# A file image is named by its SHA-256 in the events that use it and in `files`: any
# such name in a remaining session's event keeps the image, whatever field it is in.
_SHAS_OF_EVENTS = "(regexp_matches(payload, '[0-9a-f]{64}', 'g'))[1]"
SELECT_EVENT_COST = (
    "SELECT sid, count(*), coalesce(sum(octet_length(payload) + octet_length(hash) + 16"
    " + coalesce(octet_length(checkpoint), 0) + coalesce(octet_length(signature), 0) + 24), 0)"
    " FROM acode_store.events WHERE sid = ANY(%s) GROUP BY sid"
)
SELECT_MESSAGE_BYTES = (
    "SELECT sid, sum(octet_length(content) + 16) FROM acode_store.messages"
    " WHERE sid = ANY(%s) GROUP BY sid"
)
# The stored images the sessions `going` refer to that no other session does.
SELECT_UNSHARED_BLOBS = (
    f"WITH candidates AS (SELECT {_SHAS_OF_EVENTS} AS sha FROM acode_store.events"
    " WHERE sid = ANY(%(going)s) UNION SELECT sha256 FROM acode_store.files"
    " WHERE sid = ANY(%(going)s) AND sha256 IS NOT NULL),"
    f" kept AS (SELECT {_SHAS_OF_EVENTS} AS sha FROM acode_store.events"
    " WHERE sid <> ALL(%(going)s) UNION SELECT sha256 FROM acode_store.files"
    " WHERE sid <> ALL(%(going)s) AND sha256 IS NOT NULL)"
    " SELECT b.sha256, octet_length(b.data) FROM acode_store.blobs b"
    " WHERE b.sha256 IN (SELECT sha FROM candidates) AND b.sha256 NOT IN (SELECT sha FROM kept)"
)
# The bytes of the stored images each session alone refers to.
SELECT_OWN_IMAGES = (
    f"WITH refs AS (SELECT sid, {_SHAS_OF_EVENTS} AS sha FROM acode_store.events"
    " UNION SELECT sid, sha256 FROM acode_store.files WHERE sha256 IS NOT NULL),"
    " alone AS (SELECT sha, min(sid) AS sid FROM refs GROUP BY sha HAVING count(*) = 1)"
    " SELECT a.sid, sum(octet_length(b.data)) FROM alone a"
    " JOIN acode_store.blobs b ON b.sha256 = a.sha WHERE a.sid = ANY(%s) GROUP BY a.sid"
)
LOCK_FOR_PRUNE = "LOCK TABLE acode_store.blobs, acode_store.events IN SHARE ROW EXCLUSIVE MODE"
SELECT_SESSION = "SELECT sid, state, workspace FROM acode_store.sessions WHERE id = %s FOR UPDATE"
SELECT_LAST_EVENT = (
    "SELECT seq, hash FROM acode_store.events WHERE sid = %s ORDER BY seq DESC LIMIT 1"
)
# The one session this transaction may delete rows of (the triggers read it); '' : none.
LET_PRUNE = "SELECT set_config('acode.pruning', %s, true)"
_DELETES = (
    "DELETE FROM acode_store.events WHERE sid = %s",
    "DELETE FROM acode_store.steps WHERE sid = %s",
    "DELETE FROM acode_store.messages WHERE sid = %s",
    "DELETE FROM acode_store.step_ids WHERE sid = %s",
    "DELETE FROM acode_store.files WHERE sid = %s",
    "DELETE FROM acode_store.sync_state WHERE sid = %s",
    "DELETE FROM acode_store.sessions WHERE sid = %s",
)
# Keyed by the session's id: its lease (sql/0003_leases.sql), given back when it ended.
DELETE_LEASE = "DELETE FROM acode_store.session_leases WHERE session_id = %s"
DELETE_BLOBS = "DELETE FROM acode_store.blobs WHERE sha256 = ANY(%s)"
INSERT_PRUNED = (
    "INSERT INTO acode_store.pruned_sessions (id, state, pruned_at, last_seq, last_hash,"
    " key_id, signature, files_left, workspace) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (id) DO UPDATE SET state = excluded.state, pruned_at = excluded.pruned_at,"
    " last_seq = excluded.last_seq, last_hash = excluded.last_hash, key_id = excluded.key_id,"
    " signature = excluded.signature, files_left = excluded.files_left,"
    " workspace = excluded.workspace"
)
_PRUNED_COLUMNS = "id, state, pruned_at, last_seq, last_hash, key_id, signature, files_left"
# ``{scope}``: the store's workspace, as in queries.py.
PRUNED_BY_PREFIX = (
    f"SELECT {_PRUNED_COLUMNS} FROM acode_store.pruned_sessions s"
    " WHERE s.id >= %(low)s AND s.id < %(high)s{scope} ORDER BY s.id LIMIT 11"
)
PRUNED_WITH_FILES_LEFT = (
    f"SELECT {_PRUNED_COLUMNS} FROM acode_store.pruned_sessions s"
    " WHERE s.files_left > 0{scope} ORDER BY s.id"
)
CLEAR_FILES_LEFT = "UPDATE acode_store.pruned_sessions SET files_left = 0 WHERE id = %s"


def prune_cost(conn: psycopg.Connection[Any], sessions: Sequence[SessionRow]) -> PruneCost:
    sids = [row.sid for row in sessions]
    counted = {
        sid: (int(n), int(size)) for sid, n, size in conn.execute(SELECT_EVENT_COST, (sids,))
    }
    talk = {sid: int(size) for sid, size in conn.execute(SELECT_MESSAGE_BYTES, (sids,))}
    unshared = conn.execute(SELECT_UNSHARED_BLOBS, {"going": sids}).fetchall()
    own = {sid: int(size) for sid, size in conn.execute(SELECT_OWN_IMAGES, (sids,))}
    return PruneCost(
        events={row.id: counted.get(row.sid, (0, 0))[0] for row in sessions},
        bytes={row.id: counted.get(row.sid, (0, 0))[1] + talk.get(row.sid, 0) for row in sessions},
        blobs=len(unshared),
        blob_bytes=sum(int(size) for _, size in unshared),
        own_images={row.id: own.get(row.sid, 0) for row in sessions},
    )


def prune_sessions(
    conn: psycopg.Connection[Any],
    sessions: Sequence[SessionRow],
    *,
    now_us: int,
    key_id: str,
    sign: Callable[[bytes], bytes],
    files_left: int,
) -> list[PrunedRow]:
    """Remove ``sessions`` and the images only they used, inside the caller's
    transaction, and record each one."""
    conn.execute(LOCK_FOR_PRUNE, prepare=False)
    sids = [row.sid for row in sessions]
    unused = [str(sha) for sha, _ in conn.execute(SELECT_UNSHARED_BLOBS, {"going": sids})]
    records: list[PrunedRow] = []
    for row in sessions:
        found = conn.execute(SELECT_SESSION, (row.id,)).fetchone()
        assert found is not None  # the caller holds its lock, and read it just now
        sid, state, workspace = found
        last = conn.execute(SELECT_LAST_EVENT, (sid,)).fetchone()
        record = PrunedRow.signed(
            row.id, state, now_us, last, key_id=key_id, sign=sign, files_left=files_left
        )
        conn.execute(LET_PRUNE, (str(sid),))
        for sql in _DELETES:
            conn.execute(sql, (sid,))
        conn.execute(DELETE_LEASE, (row.id,))
        conn.execute(INSERT_PRUNED, (*record, workspace))
        records.append(record)
    conn.execute(LET_PRUNE, ("",))
    if unused:
        conn.execute(DELETE_BLOBS, (unused,))
    return records
