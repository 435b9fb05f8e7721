-- acode remote schema, version 1: a mirror of every session, event and checkpoint.
-- Created and migrated by acode itself (acode/sync/schema.py), in one transaction with
-- its row in acode.schema_version. Local SQLite stays the source of truth; rows here are
-- only ever inserted by `INSERT ... ON CONFLICT DO NOTHING`, so a batch sent twice
-- (a lost reply, a kill before the local mark) lands once.

-- This remote's identity: a workspace that is pointed at another remote starts over.
CREATE TABLE acode.remote_info (
    id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO acode.remote_info DEFAULT VALUES;

-- One row per session. The lease names the process running the session while it runs
-- (host, pid, since) and lapses when its holder stops renewing it.
CREATE TABLE acode.sessions (
    id            uuid        PRIMARY KEY,
    title         text        NOT NULL,
    state         text        NOT NULL,
    workspace     text        NOT NULL,
    host          text        NOT NULL,     -- the machine that last pushed it
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    lease_holder  text,                     -- an opaque token of the holding process
    lease_host    text,
    lease_pid     integer,
    lease_since   timestamptz,
    lease_expires timestamptz
);

-- The events, exactly as recorded locally except that payloads with a recognised
-- secret are stored redacted (`redacted` = true); `hash` is the local chain hash.
CREATE TABLE acode.events (
    event_id   uuid    PRIMARY KEY,
    session_id uuid    NOT NULL REFERENCES acode.sessions (id),
    seq        bigint  NOT NULL,
    ts         bigint  NOT NULL,            -- microseconds since the Unix epoch (UTC)
    type       text    NOT NULL,
    payload    text    NOT NULL,            -- JSON text as hashed locally, unless redacted
    hash       bytea   NOT NULL,
    redacted   boolean NOT NULL DEFAULT false,
    UNIQUE (session_id, seq)
);

CREATE FUNCTION acode.refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'acode.% is append-only', TG_TABLE_NAME;
END;
$$;
CREATE TRIGGER events_are_append_only BEFORE UPDATE OR DELETE ON acode.events
    FOR EACH ROW EXECUTE FUNCTION acode.refuse_change();

-- Every checkpoint pushed (locally only the newest two are kept).
CREATE TABLE acode.checkpoints (
    session_id uuid        NOT NULL REFERENCES acode.sessions (id),
    id         bigint      NOT NULL,
    seq        bigint      NOT NULL,
    summary    text        NOT NULL,
    head       bytea       NOT NULL,
    signature  text        NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (session_id, id)
);
