-- acode session store on PostgreSQL, schema version 3: one lease per session, and the
-- epoch that fences its writes (docs/fleet.md, "One holder per session: the lease").
--
-- The process that runs a session holds its lease: who it is (a token of its own, its
-- host, pid, the process table it is in and its start there, to tell a holder of this
-- machine that has ended from one that runs), until when (by this server's clock, the one
-- every machine shares), and the epoch: 1 for the first holder, one more for each holder
-- after it. Keyed by the session's id, not its sid: a new session's lease is taken before
-- its first write creates its row.
--
-- Every write of a session's history names the epoch its process holds; the write reads
-- this row FOR SHARE in the same statement and writes nothing when the epoch is no longer
-- the lease's (acode/store/postgres/queries.py). FOR SHARE also makes a take-over (an
-- UPDATE of the row) wait for a write in flight, so that the new holder reads all that
-- the old one wrote. A lease given back keeps its epoch: the next holder's is one more.
CREATE TABLE acode_store.session_leases (
    session_id text COLLATE "C" PRIMARY KEY,
    epoch      bigint  NOT NULL,
    token      text,                         -- NULL: given back
    host       text,
    pid        integer,
    machine    text,
    started    bigint,
    since      timestamptz,
    expires    timestamptz
);
