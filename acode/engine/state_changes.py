"""The session's state transitions: the events that record one, and recording it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from acode.domain.events import EventType
from acode.domain.states import SessionState, can_transition, is_terminal
from acode.engine.journal import Journal
from acode.engine.progress_file import ProgressFile
from acode.system.workspace import StatePaths

__all__ = ["StateChanges"]


class StateChanges:
    def __init__(self, journal: Journal, progress: ProgressFile, workspace: Path) -> None:
        self._journal = journal
        self._progress = progress
        self._workspace = workspace

    def to(self, target: SessionState, reason: str) -> list[tuple[EventType, dict[str, Any]]]:
        """The event that moves the session to ``target``; none when it is there, or
        cannot go there from where it is."""
        current = self._journal.state
        if current is target or not can_transition(current, target):
            return []
        return [
            (EventType.STATE_CHANGED, {"from": current.value, "to": target.value, "reason": reason})
        ]

    def record(
        self, target: SessionState, reason: str, as_left: Callable[[], dict[str, Any]]
    ) -> None:
        """Move the session to ``target``, if it can go there; a pause records what
        ``as_left`` gives (the work tree as an interrupted step left it)."""
        entries = self.to(target, reason)
        if not entries:
            return
        if target is SessionState.PAUSED:
            entries[0][1].update(as_left())
        self._journal.write(entries)
        self._progress.update(self._journal, final=True)
        if is_terminal(target):
            from acode.system.snapshot import prune_snapshots

            # Snapshots exist for rolling back; a finished session never rolls back, and
            # what it staged for a write is evidence only for such a rollback.
            prune_snapshots(self._workspace, self._journal.session_id, keep_backups=True)
            StatePaths(self._workspace).clear_temp(self._journal.session_id)
