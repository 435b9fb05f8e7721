-- acode fleet schema, version 1: the work queue of `acode queue` and `acode worker`.
-- Created and migrated by acode itself (acode/fleet/queue.py through sync/schema.py's
-- migrate), in one transaction with its row in acode_fleet.schema_version.

-- One row per queued session. A worker claims a row with SELECT ... FOR UPDATE SKIP
-- LOCKED, which increments `epoch`; every later write of that worker to the row names the
-- epoch it claimed, so a worker whose lease was taken over writes nothing more (fencing).
CREATE TABLE acode_fleet.queue_items (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue             text        NOT NULL,
    title             text        NOT NULL,
    plan              text,                  -- the plan file's YAML, checked when queued
    task              text,                  -- or a task for the model
    repo_url          text        NOT NULL,  -- as given (it may hold a token: never shown)
    branch            text,                  -- cloned; null: the repository's default
    state             text        NOT NULL DEFAULT 'queued'
        CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    attempts          integer     NOT NULL DEFAULT 0,
    worker_id         text,
    worker_host       text,
    worker_pid        integer,
    lease_expires     timestamptz,
    epoch             bigint      NOT NULL DEFAULT 0,
    session_id        uuid,                  -- once the session was created
    session_host      text,                  -- where its workspace is
    session_workspace text,
    outside_effects   boolean     NOT NULL DEFAULT false,  -- a run or python step started
    result_branch     text,
    error             text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,           -- the running claim's
    finished_at       timestamptz,
    CHECK ((plan IS NULL) <> (task IS NULL))
);
CREATE INDEX queue_items_claimable ON acode_fleet.queue_items (queue, state, id);

-- The workers seen: each renews its row with its leases.
CREATE TABLE acode_fleet.workers (
    id           text        PRIMARY KEY,
    host         text        NOT NULL,
    pid          integer     NOT NULL,
    queue        text        NOT NULL,
    concurrency  integer     NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    running      integer     NOT NULL DEFAULT 0,
    stopped_at   timestamptz
);
