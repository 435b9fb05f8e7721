-- acode local schema, version 2: the files a session read or wrote, as it left them.
-- Resume compares the workspace with this before it continues: size and mtime first,
-- a hash only when those differ.

CREATE TABLE files (
    sid      INTEGER NOT NULL,
    path     TEXT    NOT NULL,          -- relative to the workspace, POSIX separators
    sha256   TEXT,                      -- NULL: the file did not exist
    size     INTEGER,
    mtime_ns INTEGER,
    seq      INTEGER NOT NULL,          -- the event that recorded this state
    PRIMARY KEY (sid, path)
) WITHOUT ROWID;
