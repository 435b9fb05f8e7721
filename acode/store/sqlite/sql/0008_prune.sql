-- acode local schema, version 8: whole sessions can be pruned (`acode session prune`),
-- and nothing else can take an event, a message or a step id away.
--
-- 1. `pruning` names the sessions a prune is removing. The prune writes its rows, deletes
--    the sessions' rows of every table, and deletes its own rows again, all in one
--    transaction: outside it the table is empty, so the triggers below refuse any DELETE
--    as before (a stray one anywhere, or a prune's of a session it does not name).
-- 2. `pruned_sessions` records each pruned session where the integrity checks look: its
--    id, when, the last event it had (seq and hash) and its state, signed with the
--    user's key (`signature`, over all of these; `key_id` names the key). "Session X was
--    pruned" is believed only with a valid signature: a record someone wrote without the
--    key is reported as tampering, never taken as a reason a session is gone.
--    `files_left` is 1 while the files outside the database (progress file, lock file,
--    snapshot refs) wait to be removed, 2 when the `-before-rollback` refs go too; the
--    next prune finishes what a prune killed after its commit left.
-- The triggers are made again whether or not they are there: a database someone edited
-- with them dropped gets them back rather than fail its upgrade.
CREATE TABLE pruning (
    sid INTEGER PRIMARY KEY
);

CREATE TABLE pruned_sessions (
    id         TEXT    PRIMARY KEY,
    state      TEXT    NOT NULL,
    pruned_at  INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    last_hash  BLOB    NOT NULL,
    key_id     TEXT    NOT NULL,
    signature  BLOB    NOT NULL,
    files_left INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

DROP TRIGGER IF EXISTS events_are_append_only_delete;
CREATE TRIGGER events_are_append_only_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM pruning WHERE sid = OLD.sid)
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
DROP TRIGGER IF EXISTS messages_are_append_only_delete;
CREATE TRIGGER messages_are_append_only_delete BEFORE DELETE ON messages
WHEN NOT EXISTS (SELECT 1 FROM pruning WHERE sid = OLD.sid)
BEGIN
    SELECT RAISE(ABORT, 'messages are append-only');
END;
DROP TRIGGER IF EXISTS step_ids_are_append_only_delete;
CREATE TRIGGER step_ids_are_append_only_delete BEFORE DELETE ON step_ids
WHEN NOT EXISTS (SELECT 1 FROM pruning WHERE sid = OLD.sid)
BEGIN
    SELECT RAISE(ABORT, 'step ids are append-only');
END;
