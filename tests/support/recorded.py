"""What a session's database records, read the way the engine reads it."""

from __future__ import annotations

from pathlib import Path

from acode.domain.reducer import StepStatus
from acode.store.base import open_store
from acode.system.workspace import StatePaths

__all__ = ["step_statuses"]


def step_statuses(workspace: Path, session_id: str) -> list[tuple[str, StepStatus]]:
    """Each recorded step's id and status, in the order the session took them."""
    store = open_store(StatePaths(workspace).db)
    try:
        return [(r.step_id, r.status) for r in store.steps(store.session(session_id).sid)]
    finally:
        store.close()
