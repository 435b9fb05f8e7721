"""Every row a database holds of one session, read straight from the file: what an
archive's round trip must give back (tests of acode/operations/archive.py)."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path
from typing import Any

from acode.system.workspace import StatePaths

__all__ = ["session_rows"]

# Every table that holds rows of a session, and the column that names it.
_TABLES = {
    "sessions": "sid",
    "events": "sid",
    "steps": "sid",
    "checkpoints": "sid",
    "messages": "sid",
    "step_ids": "sid",
    "files": "sid",
    "sync_state": "sid",
}


def session_rows(workspace: Path, session_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the session in every table, without the store's own keys (sid and
    the rowids made of it), and the blobs, decompressed."""
    conn = sqlite3.connect(StatePaths(workspace.resolve()).db)
    try:
        (sid,) = conn.execute("SELECT sid FROM sessions WHERE id = ?", (session_id,)).fetchone()
        found: dict[str, list[tuple[Any, ...]]] = {}
        for table, column in _TABLES.items():
            cursor = conn.execute(f"SELECT * FROM {table} WHERE {column} = ?", (sid,))
            names = [d[0] for d in cursor.description]
            kept = [
                i
                for i, n in enumerate(names)
                if n != "sid" and (n != "id" or table in ("sessions", "checkpoints"))
            ]
            found[table] = sorted((tuple(r[i] for i in kept) for r in cursor), key=repr)
        found["blobs"] = [
            (sha, size, zlib.decompress(data))
            for sha, size, data in conn.execute("SELECT sha256, size, data FROM blobs ORDER BY 1")
        ]
        return found
    finally:
        conn.close()
