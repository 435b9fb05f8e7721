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


def test_an_atomic_inside_another_is_a_savepoint(tmp_path: Path) -> None:
    with closing(connect(tmp_path / "x.db")) as conn:
        conn.execute("CREATE TABLE t (n INTEGER)")
        with atomic(conn):
            conn.execute("INSERT INTO t VALUES (1)")
            with pytest.raises(ZeroDivisionError), atomic(conn):
                conn.execute("INSERT INTO t VALUES (2)")
                with atomic(conn):  # two deep: released into the one above it
                    conn.execute("INSERT INTO t VALUES (3)")
                1 / 0  # noqa: B018
            with atomic(conn):
                conn.execute("INSERT INTO t VALUES (4)")
            assert conn.in_transaction  # the savepoints left the outer one open
        assert not conn.in_transaction
        assert conn.execute("SELECT n FROM t ORDER BY n").fetchall() == [(1,), (4,)]
        # An outer transaction that fails takes what its savepoints released with it.
        with pytest.raises(ZeroDivisionError), atomic(conn):
            with atomic(conn):
                conn.execute("INSERT INTO t VALUES (5)")
            1 / 0  # noqa: B018
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (2,)


def test_a_savepoint_whose_transaction_sqlite_rolled_back_raises_its_own_error(
    tmp_path: Path,
) -> None:
    with closing(connect(tmp_path / "x.db")) as conn:
        conn.execute("CREATE TABLE t (n INTEGER)")
        with pytest.raises(sqlite3.OperationalError, match="no transaction"), atomic(conn):
            with atomic(conn):
                conn.execute("INSERT INTO t VALUES (1)")
                conn.execute("ROLLBACK")  # what SQLite does itself on SQLITE_FULL
                conn.execute("COMMIT")  # fails: the error that must come out
        assert not conn.in_transaction
        with atomic(conn):
            conn.execute("INSERT INTO t VALUES (2)")
        assert conn.execute("SELECT n FROM t").fetchall() == [(2,)]
