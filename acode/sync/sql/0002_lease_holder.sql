-- acode remote schema, version 2: a lease names its holder precisely enough that a
-- process on the holder's own machine can tell whether the holder still runs, and counts
-- its holders (the groundwork of fencing: a writer whose epoch is not the lease's is stale).

ALTER TABLE acode.sessions
    -- Which processes lease_pid is among: the kernel's boot id and pid namespace (NULL:
    -- a holder that did not say, an older acode or a system that does not tell).
    ADD COLUMN lease_machine text,
    -- When the holder started, in clock ticks since that boot: a pid given to another
    -- process since then has another start.
    ADD COLUMN lease_started bigint,
    -- One more on every take-over (a new holder); a renewal keeps it, a release too.
    ADD COLUMN lease_epoch   bigint NOT NULL DEFAULT 0;
