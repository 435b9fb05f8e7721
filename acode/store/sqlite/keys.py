"""The SQLite store's row keys: a session's events and steps are one range of the rowid."""

from __future__ import annotations

__all__ = ["SPAN", "key"]

SPAN = 1 << 32


def key(sid: int, n: int) -> int:
    """The rowid of a session's event ``n`` (its seq) or step ``n`` (its position)."""
    return sid * SPAN + n
