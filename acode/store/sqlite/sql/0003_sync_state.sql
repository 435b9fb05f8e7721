-- acode local schema, version 3: what the remote mirror already holds, per session.
-- Events with seq > synced_seq are pending. synced_seq only moves after the remote
-- committed them, and a lost move only means re-sending events the remote ignores
-- (ON CONFLICT DO NOTHING), which is why this row needs no fsync of its own.
-- Times are microseconds since the Unix epoch (UTC).

CREATE TABLE sync_state (
    sid          INTEGER PRIMARY KEY,       -- sessions.sid
    remote_id    TEXT,                      -- the remote's own id: another remote starts at 0
    synced_seq   INTEGER NOT NULL DEFAULT 0,
    last_attempt INTEGER,
    last_success INTEGER,
    last_error   TEXT,                      -- NULL after a success
    next_retry   INTEGER,                   -- when the back-off allows the next attempt
    failures     INTEGER NOT NULL DEFAULT 0, -- consecutive failed attempts
    down_since   INTEGER                    -- the first failure of the current outage
);
