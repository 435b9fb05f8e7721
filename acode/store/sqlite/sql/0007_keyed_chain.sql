-- acode local schema, version 7: sessions' hash chains keyed with the user's key.
--
-- `chain` is the version of a session's chain (acode.domain.chain): 2, keyed, for every
-- session from now on; 1, plain SHA-256, for the sessions recorded before. Those are
-- chained again under the key the first time acode loads them with it
-- (acode/engine/rechain.py): their old chain and newest checkpoint are verified first,
-- and a history that fails stays as it was, refused. `key_id` names the key a session's
-- chain and checkpoints are made with (Signer.key_id), so that a changed key is told
-- from an edited history.
ALTER TABLE sessions ADD COLUMN chain INTEGER NOT NULL DEFAULT 2;
ALTER TABLE sessions ADD COLUMN key_id TEXT;
UPDATE sessions SET chain = 1;

-- The files a session touched also record the stat data a person cannot put back
-- (git's: the inode and the change time, besides size and mtime): a file changed with
-- its size kept and its mtime put back (`touch -r`) must still be seen as changed.
-- NULL, in rows recorded before, means "not recorded": the environment check hashes
-- those files.
ALTER TABLE files ADD COLUMN ctime_ns INTEGER;
ALTER TABLE files ADD COLUMN ino INTEGER;
