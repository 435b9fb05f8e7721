-- acode session store on PostgreSQL, schema version 1: what the SQLite store holds
-- (acode/store/sqlite/sql, as of its version 7), for many workspaces in one database.
-- Created and migrated by acode itself (acode/store/postgres/migrations.py), each
-- version in one transaction with its row in acode_store.schema_version. The schema is
-- `acode_store`, beside the remote mirror's `acode` (acode/sync), so that one database
-- may hold both. Times are microseconds since the Unix epoch (UTC).

-- A session is keyed by its UUIDv7 (its text, in byte order: prefixes are ranges of the
-- key). `sid` is the small number the other tables name it by. `workspace` is the
-- identity of the workspace it runs in: a store opened for a workspace sees that
-- workspace's sessions alone.
CREATE TABLE acode_store.sessions (
    id          text COLLATE "C" PRIMARY KEY,
    sid         bigint  GENERATED ALWAYS AS IDENTITY UNIQUE,
    workspace   text    NOT NULL,
    title       text    NOT NULL,
    state       text    NOT NULL,
    parent_id   text,
    kind        text    NOT NULL,
    config      text    NOT NULL,           -- JSON, as the session started
    config_hash text    NOT NULL,
    created_at  bigint  NOT NULL,
    updated_at  bigint  NOT NULL,
    archived    boolean NOT NULL DEFAULT false,
    chain       integer NOT NULL DEFAULT 2, -- the version of its hash chain (acode.domain.chain)
    key_id      text                        -- the key its chain and checkpoints are made with
);
CREATE INDEX sessions_of_a_workspace ON acode_store.sessions (workspace, id);

-- The log. A signed checkpoint lives in the row of the event it is taken at, as in the
-- SQLite store: `checkpoint` the summary (NULL where readers derive it), `signature` its
-- HMAC (bytea). Neither is part of the event's hash; the signature protects them.
CREATE TABLE acode_store.events (
    sid        bigint  NOT NULL REFERENCES acode_store.sessions (sid),
    seq        bigint  NOT NULL CHECK (seq BETWEEN 1 AND 4294967295),
    event_id   uuid    NOT NULL,
    ts         bigint  NOT NULL,
    type       text    NOT NULL,
    payload    text    NOT NULL,            -- the JSON text the hash chain covers
    hash       bytea   NOT NULL,
    checkpoint text,
    signature  bytea,
    PRIMARY KEY (sid, seq)
);

-- Append-only, enforced here whoever writes: an UPDATE, DELETE or TRUNCATE of the log,
-- the messages or the step id ledger fails. (The one rewrite acode makes, a history
-- chained again under the key, disables the UPDATE trigger inside its transaction.)
CREATE FUNCTION acode_store.refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% are append-only', replace(TG_TABLE_NAME, '_', ' ')
        USING ERRCODE = 'restrict_violation';
END;
$$;
CREATE TRIGGER events_are_append_only_update BEFORE UPDATE ON acode_store.events
    FOR EACH ROW EXECUTE FUNCTION acode_store.refuse_change();
CREATE TRIGGER events_are_append_only_delete BEFORE DELETE ON acode_store.events
    FOR EACH ROW EXECUTE FUNCTION acode_store.refuse_change();
CREATE TRIGGER events_are_append_only_truncate BEFORE TRUNCATE ON acode_store.events
    FOR EACH STATEMENT EXECUTE FUNCTION acode_store.refuse_change();

-- The steps that need a row besides their events (started, retried, failed, awaiting an
-- approval); a step that completed in its first write has none.
CREATE TABLE acode_store.steps (
    sid        bigint  NOT NULL REFERENCES acode_store.sessions (sid),
    position   bigint  NOT NULL CHECK (position BETWEEN 0 AND 4294967295),
    step_id    text    NOT NULL,
    task_id    text,
    kind       text    NOT NULL,
    status     text    NOT NULL,
    attempt    integer NOT NULL,
    input_hash text,
    event_seq  bigint  NOT NULL,            -- the latest event about the step
    PRIMARY KEY (sid, position)
);

-- The step ids a session has used, written with the summaries (SQLite's schema 6).
CREATE TABLE acode_store.step_ids (
    sid     bigint NOT NULL REFERENCES acode_store.sessions (sid),
    step_id text   NOT NULL,
    PRIMARY KEY (sid, step_id)
);
CREATE TRIGGER step_ids_are_append_only_update BEFORE UPDATE ON acode_store.step_ids
    FOR EACH ROW EXECUTE FUNCTION acode_store.refuse_change();
CREATE TRIGGER step_ids_are_append_only_delete BEFORE DELETE ON acode_store.step_ids
    FOR EACH ROW EXECUTE FUNCTION acode_store.refuse_change();
CREATE TRIGGER step_ids_are_append_only_truncate BEFORE TRUNCATE ON acode_store.step_ids
    FOR EACH STATEMENT EXECUTE FUNCTION acode_store.refuse_change();

CREATE TABLE acode_store.messages (
    sid     bigint  NOT NULL REFERENCES acode_store.sessions (sid),
    idx     integer NOT NULL,
    role    text    NOT NULL,
    content text    NOT NULL,               -- the message object as JSON
    seq     bigint  NOT NULL,               -- the event that recorded it
    PRIMARY KEY (sid, idx)
);
CREATE TRIGGER messages_are_append_only_update BEFORE UPDATE ON acode_store.messages
    FOR EACH ROW EXECUTE FUNCTION acode_store.refuse_change();
CREATE TRIGGER messages_are_append_only_delete BEFORE DELETE ON acode_store.messages
    FOR EACH ROW EXECUTE FUNCTION acode_store.refuse_change();
CREATE TRIGGER messages_are_append_only_truncate BEFORE TRUNCATE ON acode_store.messages
    FOR EACH STATEMENT EXECUTE FUNCTION acode_store.refuse_change();

-- The files a session read or wrote, as it left them (NULL sha256: it did not exist).
CREATE TABLE acode_store.files (
    sid      bigint NOT NULL REFERENCES acode_store.sessions (sid),
    path     text   NOT NULL,
    sha256   text,
    size     bigint,
    mtime_ns bigint,
    ctime_ns bigint,
    ino      bigint,
    seq      bigint NOT NULL,               -- the event that recorded this state
    PRIMARY KEY (sid, path)
);
CREATE INDEX files_by_path ON acode_store.files (path);

-- File images by SHA-256, zlib-compressed; shared by every session of the database.
CREATE TABLE acode_store.blobs (
    sha256 text   PRIMARY KEY,
    size   bigint NOT NULL,
    data   bytea  NOT NULL
);

-- What the remote mirror (acode/sync) already holds, per session.
CREATE TABLE acode_store.sync_state (
    sid          bigint  PRIMARY KEY REFERENCES acode_store.sessions (sid),
    remote_id    text,
    synced_seq   bigint  NOT NULL DEFAULT 0,
    last_attempt bigint,
    last_success bigint,
    last_error   text,
    next_retry   bigint,
    failures     integer NOT NULL DEFAULT 0,
    down_since   bigint
);
