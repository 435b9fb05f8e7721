"""Content-addressed file images: pre-images for rollback, snapshots, read results."""

from __future__ import annotations

import hashlib
import sqlite3
import zlib

from acode.errors import StorageError

__all__ = ["INSERT_BLOB", "compress", "get_blob", "image"]

INSERT_BLOB = "INSERT OR IGNORE INTO blobs (sha256, size, data) VALUES (?, ?, ?)"
_SELECT_BLOB = "SELECT size, data FROM blobs WHERE sha256 = ?"


def compress(data: bytes) -> bytes:
    return zlib.compress(data, 6)


def get_blob(conn: sqlite3.Connection, sha256: str) -> bytes:
    return image(sha256, conn.execute(_SELECT_BLOB, (sha256,)).fetchone())


def image(sha256: str, row: tuple[int, bytes] | None) -> bytes:
    """The file image of a blob's (size, data) row, checked; ``StorageError`` when the
    row is missing or damaged. Every store backend reads its blobs through this."""
    if row is None:
        raise StorageError(
            f"the stored file image {sha256[:12]} is missing from the database",
            hint="the database was edited or damaged; run `acode resume --verify`",
        )
    data = zlib.decompress(row[1])
    if len(data) != row[0] or hashlib.sha256(data).hexdigest() != sha256:
        raise StorageError(f"the stored file image {sha256[:12]} is damaged")
    return data
