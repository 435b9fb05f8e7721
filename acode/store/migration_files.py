"""Numbered schema changes kept as ``NNNN_name.sql`` files beside the code that applies
them: the SQLite store's, the PostgreSQL store's, and the remote mirror's and the fleet
queue's schemas."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

__all__ = ["Migration", "migrations_in"]

_NAME = re.compile(r"(?P<number>\d{4})_(?P<name>\w+)\.sql")


class Migration(NamedTuple):
    """One numbered schema change (``sql/NNNN_name.sql``)."""

    number: int
    name: str
    sql: str


def migrations_in(directory: Path) -> list[Migration]:
    """The migrations of ``directory``, in order; other files are no migrations."""
    found = []
    for entry in directory.iterdir():
        match = _NAME.fullmatch(entry.name)
        if match:
            sql = entry.read_text(encoding="utf-8")
            found.append(Migration(number=int(match["number"]), name=match["name"], sql=sql))
    return sorted(found, key=lambda m: m.number)
