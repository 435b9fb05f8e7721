"""The one place SQLite connections and transactions are set up."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from acode.errors import StorageError

__all__ = ["Durability", "atomic", "connect"]

Durability = Literal["full", "normal"]


def connect(path: Path, durability: Durability = "full") -> sqlite3.Connection:
    """A connection in WAL mode with the chosen durability.

    ``full`` fsyncs the WAL on every commit, so a committed step survives power loss;
    ``normal`` may lose the last commits on power loss (never on a process crash).
    Transactions are explicit (see ``atomic``), hence ``isolation_level=None``.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {durability.upper()}")
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.Error as exc:
        raise StorageError(
            f"cannot open the acode database {path}: {exc}",
            hint="check that the file is readable and writable and the disk is not full",
        ) from exc
    return conn


@contextmanager
def atomic(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction. ``BEGIN IMMEDIATE`` takes the write lock up front so a
    transaction never fails half-way on a lock upgrade. A COMMIT that fails (a full
    disk, an I/O error) can leave the transaction open: it is rolled back, so that the
    connection writes again once the cause is gone."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
