"""The PostgreSQL store's SQL: the same reads and writes as the SQLite store's, over the
schema of ``sql/`` (keyed by (sid, seq) and (sid, position) where SQLite packs both into
its rowid).

``{scope}`` in a query is where a store opened for one workspace restricts it to that
workspace's sessions (``SCOPED``), or to none (``UNSCOPED``): two plain statements, each
prepared once, rather than one with a condition every plan must keep.
"""

from __future__ import annotations

from acode.domain.events import EventType
from acode.domain.reducer import STEP_EVENT_TYPES

__all__ = ["SCOPED", "UNSCOPED", "scoped"]

SCOPED = " AND s.workspace = %(workspace)s"
UNSCOPED = ""


def scoped(sql: str, scope: str) -> str:
    return sql.replace("{scope}", scope)


_STEP_TYPES = ", ".join(repr(str(t)) for t in sorted(STEP_EVENT_TYPES))
_COMPLETED = EventType.STEP_COMPLETED.value

# The time and position of a session's last step live in its newest checkpoint, which
# the store adds: the two NULLs are its current task and step.
SESSION_COLUMNS = (
    "s.sid, s.id, s.title, s.state, s.workspace, s.parent_id, s.kind, s.config,"
    " s.config_hash, s.created_at, s.updated_at, NULL, NULL, s.archived, s.chain, s.key_id"
)
INSERT_SESSION = (
    "INSERT INTO acode_store.sessions (id, title, state, workspace, parent_id, kind, config,"
    " config_hash, created_at, updated_at, key_id)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING sid"
)
SELECT_SESSION_BY_ID = (
    f"SELECT {SESSION_COLUMNS} FROM acode_store.sessions s WHERE s.id = %(id)s{{scope}}"
)
SELECT_SESSIONS_BY_PREFIX = (
    f"SELECT {SESSION_COLUMNS} FROM acode_store.sessions s"
    " WHERE s.id >= %(low)s AND s.id < %(high)s{scope} ORDER BY s.id LIMIT 11"
)
SELECT_SESSIONS = f"SELECT {SESSION_COLUMNS} FROM acode_store.sessions s WHERE true{{scope}}"
SELECT_IDS_BETWEEN = (
    "SELECT s.id FROM acode_store.sessions s WHERE s.id >= %(low)s AND s.id < %(high)s{scope}"
)
SELECT_SESSION_ID = "SELECT id FROM acode_store.sessions WHERE id = %s"
UPDATE_SESSION = "UPDATE acode_store.sessions SET state = %s, updated_at = %s WHERE sid = %s"
ARCHIVE_SESSION = "UPDATE acode_store.sessions SET archived = true WHERE sid = %s"

INSERT_EVENT = (
    "INSERT INTO acode_store.events (sid, seq, event_id, ts, type, payload, hash, checkpoint,"
    " signature) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
# The same row, written only while the epoch given (the first two parameters: the
# session's id and the epoch its process holds) is the session's lease's: no row
# otherwise. FOR SHARE: a take-over of the lease waits until this write is committed.
FENCED_INSERT_EVENT = (
    "WITH l AS (SELECT 1 FROM acode_store.session_leases WHERE session_id = %s AND epoch = %s"
    " FOR SHARE) INSERT INTO acode_store.events (sid, seq, event_id, ts, type, payload, hash,"
    " checkpoint, signature) SELECT %s::bigint, %s::bigint, %s::uuid, %s::bigint, %s::text,"
    " %s::text, %s::bytea, %s::text, %s::bytea FROM l"
)
_EVENT_COLUMNS = "seq, event_id::text, ts, type, payload, hash"
SELECT_EVENTS_AFTER = (
    f"SELECT {_EVENT_COLUMNS} FROM acode_store.events WHERE sid = %s AND seq > %s"
    " ORDER BY seq LIMIT %s"
)
SELECT_EVENTS_BETWEEN = (
    f"SELECT {_EVENT_COLUMNS} FROM acode_store.events WHERE sid = %s AND seq > %s"
    " AND seq <= %s ORDER BY seq"
)
SELECT_EVENT = f"SELECT {_EVENT_COLUMNS} FROM acode_store.events WHERE sid = %s AND seq = %s"
SELECT_EVENTS_AT = (
    f"SELECT {_EVENT_COLUMNS} FROM acode_store.events WHERE sid = %s AND seq = ANY(%s)"
)
SELECT_EVENTS_OF_TYPE = (
    f"SELECT {_EVENT_COLUMNS} FROM acode_store.events WHERE sid = %s AND seq > %s"
    " AND type = %s ORDER BY seq"
)
SELECT_HASHES_AT = "SELECT seq, hash FROM acode_store.events WHERE sid = %s AND seq = ANY(%s)"
SELECT_LAST_SEQ = "SELECT seq FROM acode_store.events WHERE sid = %s ORDER BY seq DESC LIMIT 1"

UPSERT_STEP = (
    "INSERT INTO acode_store.steps (sid, position, step_id, task_id, kind, status, attempt,"
    " input_hash, event_seq) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (sid, position) DO UPDATE SET status = excluded.status,"
    " attempt = excluded.attempt, input_hash = excluded.input_hash,"
    " event_seq = excluded.event_seq"
)
_STEP_COLUMNS = "position, step_id, kind, status, attempt, task_id, input_hash, event_seq"
SELECT_STEP_EVENTS = (
    "SELECT seq, type, payload FROM acode_store.events WHERE sid = %s"
    f" AND type IN ({_STEP_TYPES}) ORDER BY seq"
)
# Backwards from the end: a position's record is its newest event (reducer.fold_step).
SELECT_NEWEST_STEP_EVENTS = (
    "SELECT seq, type, payload FROM acode_store.events WHERE sid = %s AND seq < %s"
    f" AND type IN ({_STEP_TYPES}) ORDER BY seq DESC LIMIT %s"
)
SELECT_UNFINISHED_STEPS = (
    f"SELECT {_STEP_COLUMNS} FROM acode_store.steps WHERE sid = %s"
    " AND status IN ('in_progress', 'rolled_back', 'failed') ORDER BY position"
)
SELECT_STEPS_BETWEEN = (
    f"SELECT {_STEP_COLUMNS} FROM acode_store.steps WHERE sid = %s"
    " AND position BETWEEN %s AND %s ORDER BY position"
)
# How many steps completed, and the sum of their durations, each from the event before
# its start record (or before its completion, for a step that completed in its first
# write): acode/store/sqlite/store.py, SELECT_STEP_TIMES.
SELECT_STEP_TIMES = (
    "SELECT count(*), coalesce(sum(e.ts - coalesce(b.ts, p.ts)), 0)"
    " FROM acode_store.events AS e"
    " JOIN acode_store.events AS p ON p.sid = e.sid AND p.seq = e.seq - 1"
    " LEFT JOIN acode_store.events AS b ON b.sid = e.sid AND b.seq = e.seq - 2"
    " AND p.type = 'step_started'"
    f" WHERE e.sid = %s AND e.type = '{_COMPLETED}'"
)
# The results of the answered model calls: json (not jsonb), which keeps a result's text
# as it was written, its keys in their order.
SELECT_MODEL_RESULTS = (
    "SELECT (payload::json -> 'result')::text FROM acode_store.events"
    f" WHERE sid = %s AND seq > %s AND seq <= %s AND type = '{_COMPLETED}'"
    " AND payload::json ->> 'kind' = 'model'"
    " AND json_typeof(payload::json -> 'result') = 'object' ORDER BY seq"
)

INSERT_STEP_ID = (
    "INSERT INTO acode_store.step_ids (sid, step_id) VALUES (%s, %s) ON CONFLICT DO NOTHING"
)
HAS_STEP_ID = "SELECT 1 FROM acode_store.step_ids WHERE sid = %s AND step_id = %s"
SELECT_STEP_ID_LEDGER = "SELECT step_id FROM acode_store.step_ids WHERE sid = %s"
SELECT_UNLEDGERED_STEP_IDS = (
    "SELECT payload::json ->> 'step' FROM acode_store.events WHERE sid = %(sid)s"
    " AND seq > coalesce((SELECT max(seq) FROM acode_store.events WHERE sid = %(sid)s"
    " AND checkpoint IS NOT NULL), 0)"
    f" AND type IN ({_STEP_TYPES}) ORDER BY seq"
)

# The newest checkpoints (a reverse scan of the session's events), then the newest two
# that wrote their summary out, which need no other row.
_CHECKPOINT_COLUMNS = "seq, convert_to(checkpoint, 'UTF8'), hash, signature, ts"
SELECT_EVENT_CHECKPOINTS = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM acode_store.events"
    " WHERE sid = %s AND signature IS NOT NULL ORDER BY seq DESC LIMIT %s"
)
SELECT_EVENT_CHECKPOINTS_ASCENDING = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM acode_store.events"
    " WHERE sid = %s AND signature IS NOT NULL ORDER BY seq"
)
SELECT_WRITTEN_CHECKPOINTS = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM acode_store.events WHERE sid = %s"
    " AND signature IS NOT NULL AND checkpoint IS NOT NULL ORDER BY seq DESC LIMIT 2"
)
SELECT_SUMMARY_BEFORE = (
    "SELECT seq, convert_to(checkpoint, 'UTF8') FROM acode_store.events"
    " WHERE sid = %s AND seq < %s AND checkpoint IS NOT NULL ORDER BY seq DESC LIMIT 1"
)

# A history chained again under the key (acode/engine/rechain.py): the one UPDATE of
# events there is, with the trigger that forbids it disabled inside its transaction.
SELECT_CHAIN_FOR_UPDATE = "SELECT chain FROM acode_store.sessions WHERE sid = %s FOR UPDATE"
DISABLE_EVENTS_UPDATE_TRIGGER = (
    "ALTER TABLE acode_store.events DISABLE TRIGGER events_are_append_only_update"
)
ENABLE_EVENTS_UPDATE_TRIGGER = (
    "ALTER TABLE acode_store.events ENABLE TRIGGER events_are_append_only_update"
)
RECHAIN_EVENT = (
    "UPDATE acode_store.events SET payload = %s, hash = %s, signature = %s"
    " WHERE sid = %s AND seq = %s"
)
MARK_RECHAINED = "UPDATE acode_store.sessions SET chain = %s, key_id = %s WHERE sid = %s"

UPSERT_FILE = (
    "INSERT INTO acode_store.files (sid, path, sha256, size, mtime_ns, ctime_ns, ino, seq)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (sid, path) DO UPDATE SET"
    " sha256 = excluded.sha256, size = excluded.size, mtime_ns = excluded.mtime_ns,"
    " ctime_ns = excluded.ctime_ns, ino = excluded.ino, seq = excluded.seq"
)
SELECT_FILES = (
    "SELECT path, sha256, size, mtime_ns, ctime_ns, ino FROM acode_store.files"
    ' WHERE sid = %s ORDER BY path COLLATE "C"'
)
_TOUCH_COLUMNS = (
    "s.id, f.path, f.seq, e.ts, e.payload::json ->> 'step', e.payload::json ->> 'kind',"
    " (e.payload::json ->> 'position')::bigint FROM acode_store.files f"
    " JOIN acode_store.sessions s ON s.sid = f.sid"
    " JOIN acode_store.events e ON e.sid = f.sid AND e.seq = f.seq"
)
SELECT_TOUCHES = f"SELECT {_TOUCH_COLUMNS} WHERE f.sid = %(sid)s AND f.path = ANY(%(paths)s)"
# Other sessions' records of these paths made after a moment: who worked on them since.
SELECT_TOUCHES_SINCE = (
    f"SELECT {_TOUCH_COLUMNS} WHERE f.sid != %(sid)s AND e.ts > %(after)s"
    " AND f.path = ANY(%(paths)s){scope} ORDER BY e.ts"
)

INSERT_MESSAGE = (
    "INSERT INTO acode_store.messages (sid, idx, role, content, seq) VALUES (%s, %s, %s, %s, %s)"
)
SELECT_MESSAGES = (
    "SELECT idx, role, content, seq FROM acode_store.messages WHERE sid = %s ORDER BY idx"
)
HAS_MESSAGES = "SELECT 1 FROM acode_store.messages WHERE sid = %s LIMIT 1"

INSERT_BLOB = (
    "INSERT INTO acode_store.blobs (sha256, size, data) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING"
)
SELECT_BLOB = "SELECT size, data FROM acode_store.blobs WHERE sha256 = %s"

SELECT_SYNC_STATE = (
    "SELECT remote_id, synced_seq, last_attempt, last_success, last_error, next_retry,"
    " failures, down_since FROM acode_store.sync_state WHERE sid = %s"
)
SELECT_BACKLOG = (
    "SELECT s.id, (SELECT e.seq FROM acode_store.events e WHERE e.sid = s.sid"
    " ORDER BY e.seq DESC LIMIT 1), st.remote_id, coalesce(st.synced_seq, 0)"
    " FROM acode_store.sessions s LEFT JOIN acode_store.sync_state st ON st.sid = s.sid"
    " WHERE true{scope} ORDER BY s.id"
)
# A mark for another remote than the recorded one starts that remote's count afresh.
MARK_SYNCED = (
    "INSERT INTO acode_store.sync_state AS st (sid, remote_id, synced_seq, last_attempt,"
    " last_success, failures) VALUES (%s, %s, %s, %s, %s, 0) ON CONFLICT (sid) DO UPDATE SET"
    " synced_seq = CASE WHEN st.remote_id IS NOT DISTINCT FROM excluded.remote_id"
    " THEN greatest(st.synced_seq, excluded.synced_seq) ELSE excluded.synced_seq END,"
    " remote_id = excluded.remote_id, last_attempt = excluded.last_attempt,"
    " last_success = excluded.last_success, last_error = NULL, next_retry = NULL,"
    " failures = 0, down_since = NULL"
)
RECORD_FAILURE = (
    "INSERT INTO acode_store.sync_state AS st (sid, last_attempt, last_error, next_retry,"
    " failures, down_since) VALUES (%s, %s, %s, %s, 1, %s) ON CONFLICT (sid) DO UPDATE SET"
    " last_attempt = excluded.last_attempt, last_error = excluded.last_error,"
    " next_retry = excluded.next_retry, failures = st.failures + 1,"
    " down_since = coalesce(st.down_since, excluded.down_since)"
)

# What a prune leaves behind, made reusable (PostgresStore.reclaim_space): a plain VACUUM,
# which runs beside the steps of every workspace.
VACUUM_PRUNED_TABLES = (
    "VACUUM acode_store.events, acode_store.steps, acode_store.messages,"
    " acode_store.step_ids, acode_store.files, acode_store.sync_state,"
    " acode_store.sessions, acode_store.blobs"
)

# The session leases (sql/0003_leases.sql; the taking: acode.store.leases.take). Taken
# when free, ours, lapsed, or held by the exact holder ``gone`` read (of this machine,
# ended); the sid is NULL for a session whose first write is still to come.
TAKE_LEASE = (
    "INSERT INTO acode_store.session_leases AS l (session_id, epoch, token, host, pid,"
    " machine, started, since, expires) VALUES (%(id)s, 1, %(token)s, %(host)s, %(pid)s,"
    " %(machine)s, %(started)s, now(), now() + make_interval(secs => %(seconds)s))"
    " ON CONFLICT (session_id) DO UPDATE SET token = excluded.token, host = excluded.host,"
    " pid = excluded.pid, machine = excluded.machine, started = excluded.started,"
    " epoch = CASE WHEN l.token = excluded.token THEN l.epoch ELSE l.epoch + 1 END,"
    " since = CASE WHEN l.token = excluded.token THEN l.since ELSE now() END,"
    " expires = excluded.expires"
    " WHERE l.token IS NULL OR l.token = excluded.token OR l.expires < now()"
    " OR (l.token = %(gone)s AND l.epoch = %(gone_epoch)s)"
    " RETURNING l.epoch, (SELECT sid FROM acode_store.sessions WHERE id = %(id)s)"
)
LEASE_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', '2000', true)"
SELECT_LEASE = (
    "SELECT token, host, pid, since, expires, machine, started, epoch"
    " FROM acode_store.session_leases WHERE session_id = %s AND token IS NOT NULL"
    " AND expires >= now()"
)
RENEW_LEASE = (
    "UPDATE acode_store.session_leases SET expires = now() + make_interval(secs => %s)"
    " WHERE session_id = %s AND token = %s AND epoch = %s RETURNING epoch"
)
HOLDS_LEASE = (
    "SELECT 1 FROM acode_store.session_leases WHERE session_id = %s AND token = %s"
    " AND epoch = %s AND expires >= now()"
)
# Given back, the epoch kept: the next holder's is one more.
GIVE_BACK_LEASE = (
    "UPDATE acode_store.session_leases SET token = NULL, host = NULL, pid = NULL,"
    " machine = NULL, started = NULL, since = NULL, expires = NULL"
    " WHERE session_id = %s AND token = %s AND epoch = %s"
)
# A write of many statements (a history chained again) that holds the lease's row for
# its whole transaction.
FENCE = "SELECT 1 FROM acode_store.session_leases WHERE session_id = %s AND epoch = %s FOR SHARE"
