"""The one place SQLite connections and transactions are set up."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from acode.errors import DatabaseDamagedError, StorageError
from acode.store.base import Durability

__all__ = ["atomic", "connect", "damaged_database", "database_damaged", "write_error"]
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _create_private(path: Path) -> bool:
    """Create a missing database file readable by its owner alone: it holds every
    session's history unredacted (its directory is private too, but a copy or a
    ``chmod -R`` of it should not open it). SQLite gives its WAL and shared-memory files
    the database file's mode. True when this call created it."""
    # When it exists, it keeps its mode; any other failure, SQLite reports next.
    try:
        os.close(os.open(path, _NEW_FILE, 0o600))
    except OSError:
        return False
    return True


def connect(path: Path, durability: Durability = "full") -> sqlite3.Connection:
    """A connection in WAL mode with the chosen durability.

    ``full`` fsyncs the WAL on every commit, so a committed step survives power loss;
    ``normal`` may lose the last commits on power loss (never on a process crash).
    Transactions are explicit (see ``atomic``), hence ``isolation_level=None``.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        new = _create_private(path)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 5000")
        if new:
            # Before the first table, and before WAL, which writes the header: a prune
            # then gives its pages back with an incremental vacuum. Only here: on an
            # existing database the pragma writes a page at every opening, and changes
            # nothing (its first prune converts it).
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {durability.upper()}")
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.Error as exc:
        damage = damaged_database(exc, path)
        if damage is not None:
            raise damage from exc
        raise StorageError(
            f"cannot open the acode database {path}: {exc}",
            hint="check that the file is readable and writable and the disk is not full",
        ) from exc
    return conn


def write_error(path: Path, exc: sqlite3.Error) -> StorageError:
    """The error for a write the database at ``path`` refused: its transaction kept
    nothing."""
    return StorageError(
        f"cannot write to the acode database {path}: {exc}",
        hint="nothing of this write was kept; free disk space or fix the file's "
        "permissions, then continue with `acode resume`",
    )


# SQLite's primary result codes for a file that is no database, or a damaged one.
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26


def damaged_database(exc: BaseException, path: Path | None = None) -> DatabaseDamagedError | None:
    """The error to report for SQLite's ``exc`` when it says the database file is damaged
    (truncated, overwritten, a page corrupt), wherever it was met; None for any other."""
    code = getattr(exc, "sqlite_errorcode", None)
    if not isinstance(exc, sqlite3.DatabaseError) or code is None:
        return None
    if code & 0xFF not in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return None
    return database_damaged(path, f"SQLite says: {exc}")


def database_damaged(path: Path | None, problem: str) -> DatabaseDamagedError:
    """The error for a damaged database file at ``path`` (None: the workspace's own)."""
    shown = str(path) if path is not None else ".agent/state/acode.db"
    return DatabaseDamagedError(
        f"the acode database {shown} is damaged: {problem}",
        hint=f"acode writes nothing over it. Keep a copy (cp {shown} {shown}.damaged), then "
        f"restore it from a backup; `sqlite3 {shown} .recover` saves what can be read. "
        f"To start afresh, move it aside: mv {shown} {shown}.damaged",
    )


@contextmanager
def atomic(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction, the only way acode opens one. ``BEGIN IMMEDIATE`` takes
    the write lock up front so a transaction never fails half-way on a lock upgrade.
    Inside another, it is a savepoint: its failure undoes its own writes and leaves the
    outer transaction to go on. A COMMIT that fails (a full disk, an I/O error, a
    deferred constraint) can leave the transaction open: it is rolled back, so that the
    connection writes again once the cause is gone."""
    if conn.in_transaction:
        with _savepoint(conn):
            yield conn
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@contextmanager
def _savepoint(conn: sqlite3.Connection) -> Iterator[None]:
    # One name serves every depth: RELEASE and ROLLBACK TO act on the newest savepoint
    # of that name, which is this one while the ones inside it are released.
    conn.execute("SAVEPOINT atomic")
    try:
        yield
    except BaseException:
        # An error SQLite answers by rolling the whole transaction back (SQLITE_FULL,
        # SQLITE_IOERR) took the savepoint with it: there is nothing left to undo.
        if conn.in_transaction:
            conn.execute("ROLLBACK TO atomic")
            conn.execute("RELEASE atomic")
        raise
    conn.execute("RELEASE atomic")
