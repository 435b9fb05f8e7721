-- acode session store on PostgreSQL, schema version 2: whole sessions can be pruned
-- (`acode session prune`, as SQLite's schema 8), and nothing else can take an event, a
-- message or a step id away.
--
-- 1. A prune says which session it is removing with a transaction-local setting,
--    `set_config('acode.pruning', '<sid>', true)`, and the DELETE triggers let a row go
--    only when its session is the one that setting names. Not SQLite's `pruning` table:
--    a row there is data, which a committed INSERT (by hand, or a prune's bug) would
--    leave behind and which would then let every later DELETE of that session through,
--    from any connection. The setting cannot be committed: it ends with the prune's
--    transaction, whatever way it ends, and no other transaction ever sees it, so an
--    unrelated DELETE (another connection, a later transaction on the prune's own pooled
--    connection, a stray statement after the prune committed) is refused as before.
--    (Someone who connects by hand can set it, as they could write a `pruning` row or, as
--    the tables' owner, drop the triggers: the keyed chain and the signed prune records
--    are what tell a history cut short by them.)
--    TRUNCATE stays refused always.
-- 2. `pruned_sessions` records each pruned session where the integrity checks look:
--    its id, when, the last event it had (seq and hash) and its state, signed with the
--    user's key. `files_left`: 1 while the files outside the database wait to be
--    removed, 2 when the `-before-rollback` refs go too (acode/operations/prune.py).
--    A session id is a UUIDv7, unique across workspaces: the record is keyed by it, and
--    carries the session's workspace, which alone sees it (and removes its files).
CREATE TABLE acode_store.pruned_sessions (
    id         text COLLATE "C" PRIMARY KEY,
    workspace  text    NOT NULL,
    state      text    NOT NULL,
    pruned_at  bigint  NOT NULL,
    last_seq   bigint  NOT NULL,
    last_hash  bytea   NOT NULL,
    key_id     text    NOT NULL,
    signature  bytea   NOT NULL,
    files_left integer NOT NULL DEFAULT 0
);
CREATE INDEX pruned_sessions_with_files_left ON acode_store.pruned_sessions (workspace)
    WHERE files_left > 0;

CREATE FUNCTION acode_store.refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.sid::text = current_setting('acode.pruning', true) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% are append-only', replace(TG_TABLE_NAME, '_', ' ')
        USING ERRCODE = 'restrict_violation';
END;
$$;

DROP TRIGGER IF EXISTS events_are_append_only_delete ON acode_store.events;
CREATE TRIGGER events_are_append_only_delete BEFORE DELETE ON acode_store.events
    FOR EACH ROW EXECUTE FUNCTION acode_store.refuse_delete();
DROP TRIGGER IF EXISTS messages_are_append_only_delete ON acode_store.messages;
CREATE TRIGGER messages_are_append_only_delete BEFORE DELETE ON acode_store.messages
    FOR EACH ROW EXECUTE FUNCTION acode_store.refuse_delete();
DROP TRIGGER IF EXISTS step_ids_are_append_only_delete ON acode_store.step_ids;
CREATE TRIGGER step_ids_are_append_only_delete BEFORE DELETE ON acode_store.step_ids
    FOR EACH ROW EXECUTE FUNCTION acode_store.refuse_delete();
