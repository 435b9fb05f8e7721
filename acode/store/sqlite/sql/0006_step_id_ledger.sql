-- acode local schema, version 6: the step ids a session has used, looked up by id, so a
-- session that goes on after its recorded steps (Session.skip_completed) checks a new
-- step id without reading its history: recovery costs the same at any length.
--
-- The ledger is written in batches, not at every step: a commit that writes its
-- checkpoint's summary out (every 32 events, SUMMARY_EVERY) adds the ids of the events
-- since the previous one. The ids of the events after the newest summary written (at
-- most a few dozen) are read from the events themselves. A step's commit thus stays one
-- page of the WAL; a second B-tree at every step cost 10-15 µs.
--
-- Derived from the events, like `steps`: `acode resume --verify` checks it against them.
CREATE TABLE step_ids (
    sid     INTEGER NOT NULL,
    step_id TEXT    NOT NULL,
    PRIMARY KEY (sid, step_id)
) WITHOUT ROWID;

INSERT OR IGNORE INTO step_ids (sid, step_id)
    SELECT sid, json_extract(payload, '$.step') FROM events
    WHERE type IN ('approval_requested', 'step_completed', 'step_failed',
                   'step_rolled_back', 'step_started');

-- An id taken out would let a step id be used twice.
CREATE TRIGGER step_ids_are_append_only_update BEFORE UPDATE ON step_ids
BEGIN
    SELECT RAISE(ABORT, 'step ids are append-only');
END;
CREATE TRIGGER step_ids_are_append_only_delete BEFORE DELETE ON step_ids
BEGIN
    SELECT RAISE(ABORT, 'step ids are append-only');
END;
