"""The one place connections and transactions are set up: what a failed COMMIT leaves."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from acode.store.sqlite.connection import atomic, connect


def test_a_commit_that_fails_is_rolled_back_and_the_connection_writes_again(
    tmp_path: Path,
) -> None:
    with closing(connect(tmp_path / "x.db")) as conn:
        conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        conn.execute(
            "CREATE TABLE child (parent INTEGER REFERENCES parent (id)"
            " DEFERRABLE INITIALLY DEFERRED)"
        )
        # A deferred foreign key is checked by COMMIT itself: a COMMIT that fails for
        # real, as one can on a full disk.
        with pytest.raises(sqlite3.IntegrityError), atomic(conn):
            conn.execute("INSERT INTO child VALUES (1)")
        assert not conn.in_transaction
        with atomic(conn):
            conn.execute("INSERT INTO parent VALUES (1)")
            conn.execute("INSERT INTO child VALUES (1)")
        assert conn.execute("SELECT count(*) FROM child").fetchone() == (1,)
