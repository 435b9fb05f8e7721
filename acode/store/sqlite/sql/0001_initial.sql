-- acode local schema, version 1.
-- Times are microseconds since the Unix epoch (UTC). Sessions are referred to inside
-- the database by an integer `sid`, which keeps every event and step row small; the
-- UUIDv7 `id` is what people and the remote see.

CREATE TABLE sessions (
    sid          INTEGER PRIMARY KEY,
    id           TEXT    NOT NULL UNIQUE,
    title        TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    workspace    TEXT    NOT NULL,
    parent_id    TEXT,
    kind         TEXT    NOT NULL,          -- 'plan' or 'library'
    config       TEXT    NOT NULL,          -- JSON, as the session started
    config_hash  TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    archived     INTEGER NOT NULL DEFAULT 0
);
-- A step's completion does not touch this row: its position and time are in the
-- checkpoint written with it. Keeping the commit to three pages (event, step,
-- checkpoint) is what keeps a durable step close to the cost of one fsync.

CREATE TABLE events (
    sid      INTEGER NOT NULL REFERENCES sessions (sid),
    seq      INTEGER NOT NULL,
    event_id TEXT    NOT NULL,
    ts       INTEGER NOT NULL,
    type     TEXT    NOT NULL,
    payload  TEXT    NOT NULL,
    hash     BLOB    NOT NULL,
    PRIMARY KEY (sid, seq)
) WITHOUT ROWID;

CREATE TRIGGER events_are_append_only_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
CREATE TRIGGER events_are_append_only_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

-- The projection of events per step position; `event_seq` points at the latest event
-- about the step (its start, result or error), so results are stored once.
CREATE TABLE steps (
    sid         INTEGER NOT NULL,
    position    INTEGER NOT NULL,
    step_id     TEXT    NOT NULL,
    task_id     TEXT,
    kind        TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    attempt     INTEGER NOT NULL,
    input_hash  TEXT,
    event_seq   INTEGER NOT NULL,      -- the latest event about the step
    PRIMARY KEY (sid, position)
) WITHOUT ROWID;
-- Step ids are unique per session; the engine enforces it (an index here would add
-- a page to every step's commit).

-- Two slots per session: the latest checkpoint and the one before it, so a damaged
-- latest checkpoint can fall back. Size stays constant however long the session runs.
CREATE TABLE checkpoints (
    sid        INTEGER NOT NULL,
    slot       INTEGER NOT NULL,
    id         INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    summary    TEXT    NOT NULL,
    head       BLOB    NOT NULL,
    signature  TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (sid, slot)
) WITHOUT ROWID;

CREATE TABLE messages (
    sid     INTEGER NOT NULL,
    idx     INTEGER NOT NULL,
    role    TEXT    NOT NULL,
    content TEXT    NOT NULL,               -- the message object as JSON
    seq     INTEGER NOT NULL,               -- the event that recorded it
    PRIMARY KEY (sid, idx)
) WITHOUT ROWID;
CREATE TRIGGER messages_are_append_only_update BEFORE UPDATE ON messages
BEGIN
    SELECT RAISE(ABORT, 'messages are append-only');
END;
CREATE TRIGGER messages_are_append_only_delete BEFORE DELETE ON messages
BEGIN
    SELECT RAISE(ABORT, 'messages are append-only');
END;

-- File images by SHA-256, zlib-compressed.
CREATE TABLE blobs (
    sha256 TEXT    PRIMARY KEY,
    size   INTEGER NOT NULL,
    data   BLOB    NOT NULL
);
