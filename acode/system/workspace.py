"""Where a workspace keeps acode's files (docs/architecture.md, "Storage")."""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path
from typing import NamedTuple

from acode.system.files import atomic_write
from acode.system.user_files import holds

__all__ = ["AGENT_DIR", "STATE_PARTS", "StatePaths", "ensure_state_ignored", "find_workspace"]

AGENT_DIR = ".agent"
STATE_PARTS = (AGENT_DIR, "state")  # the state directory, as the names on the way to it
_IGNORE_ALL = b"*\n"


def find_workspace(start: Path) -> Path:
    """The nearest directory at or above ``start`` holding ``.agent/``, else ``start``."""
    start = start.resolve()
    for candidate in (start, *start.parents):
        if (candidate / AGENT_DIR).is_dir():
            return candidate
    return start


class StatePaths(NamedTuple):
    """Where acode keeps a workspace's state (``.agent/``)."""

    workspace: Path

    @property
    def agent_dir(self) -> Path:
        return self.workspace / AGENT_DIR

    @property
    def state_dir(self) -> Path:
        return self.agent_dir / "state"

    @property
    def db(self) -> Path:
        return self.state_dir / "acode.db"

    @property
    def locks(self) -> Path:
        return self.state_dir / "locks"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def sessions_dir(self) -> Path:
        return self.state_dir / "sessions"

    def session_dir(self, session_id: str) -> Path:
        return self.sessions_dir / session_id

    def state_bytes(self) -> int:
        """The state's size as retention weighs it: the database (with its write-ahead
        log) and the sessions' progress files."""
        total = 0
        for path in (self.db, self.db.with_name(self.db.name + "-wal")):
            with suppress(OSError):
                total += path.stat().st_size
        for root, _dirs, files in os.walk(self.sessions_dir):
            for name in files:
                with suppress(OSError):  # gone while counting
                    total += os.lstat(os.path.join(root, name)).st_size
        return total

    def check_database(self) -> None:
        """Refuse an empty database file beside the folders of recorded sessions: it was
        truncated (or replaced), and opening it would create a fresh, empty database in
        its place, which reads as "no sessions". SQLite itself refuses a file that is
        not empty and not whole."""
        try:
            empty = self.db.stat().st_size == 0
        except FileNotFoundError:
            return
        if not empty:
            return
        try:
            recorded = sum(1 for entry in self.sessions_dir.iterdir() if entry.is_dir())
        except OSError:  # no folder, nothing was recorded
            return
        if recorded:
            from acode.store.sqlite.connection import database_damaged

            folders = f"{recorded} session folder{'s' if recorded > 1 else ''}"
            raise database_damaged(
                self.db, f"it is empty (0 bytes), yet {self.sessions_dir} holds {folders}"
            )

    def temp_dir(self, session_id: str) -> Path:
        """Where a session's file writes are staged before their rename; what a kill
        leaves here is removed when the session is resumed."""
        return self.workspace.joinpath(*self.temp_parts(session_id))

    @staticmethod
    def temp_parts(session_id: str) -> tuple[str, ...]:
        """:meth:`temp_dir` as the names on the way from the workspace."""
        return (*STATE_PARTS, "tmp", session_id)

    def clear_temp(self, session_id: str) -> None:
        temp = self.temp_dir(session_id)
        if not temp.exists():
            # As after most resumes: shutil's import would be paid for nothing
            # (docs/benchmarks.md, "Figures behind design choices").
            return
        import shutil

        shutil.rmtree(temp, ignore_errors=True)


def ensure_state_ignored(state_dir: Path) -> None:
    """Make git ignore everything in ``state_dir`` (the .gitignore ignores itself too)."""
    ignore = state_dir / ".gitignore"
    if not holds(ignore, _IGNORE_ALL):  # a FIFO put in its place would block every command
        atomic_write(ignore, _IGNORE_ALL)
