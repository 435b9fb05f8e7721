-- acode local schema, version 5: an event row carries fewer bytes, so more of them fit
-- in a page and a step's commit starts a new page less often.
--
-- 1. `event_id` holds the UUID's 16 bytes instead of its 36-character text
--    (`uuid_bytes`, a function acode's migrations provide). The text is what the hash
--    chain covers and what readers see; the store converts at its boundary.
-- 2. (No change of columns.) From this version on a checkpoint's `signature` is the
--    HMAC-SHA256 truncated to its first 16 bytes, as RFC 2104 allows; the 32-byte
--    signatures written before stay valid. And an event about a step leaves out the
--    fields at their defaults (`attempt` 1, `kind` "python"), as the checkpoint summary
--    already does.
-- An event of a step's completion shrank from about 470 to about 410 bytes.

CREATE TABLE events_v5 (
    id         INTEGER PRIMARY KEY,     -- sid * 4294967296 + seq
    sid        INTEGER NOT NULL REFERENCES sessions (sid),
    seq        INTEGER NOT NULL,
    event_id   BLOB    NOT NULL,        -- the UUIDv7's 16 bytes
    ts         INTEGER NOT NULL,
    type       TEXT    NOT NULL,
    payload    TEXT    NOT NULL,
    hash       BLOB    NOT NULL,
    checkpoint TEXT,                    -- the signed summary at this event, if one was taken
    signature  BLOB,
    CHECK (seq BETWEEN 1 AND 4294967295 AND id = sid * 4294967296 + seq),
    CHECK (length(event_id) = 16)
);
INSERT INTO events_v5
    SELECT id, sid, seq, uuid_bytes(event_id), ts, type, payload, hash, checkpoint, signature
    FROM events ORDER BY id;
DROP TABLE events;
ALTER TABLE events_v5 RENAME TO events;

CREATE TRIGGER events_are_append_only_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
CREATE TRIGGER events_are_append_only_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
