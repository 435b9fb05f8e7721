"""The resumable sessions of a workspace, for a program (``acode.list_resumable``) and for
what the CLI shows of where a session stands.

A listing reads the store as it is: what it shows of a session is not relied on. The
resume of the session verifies its history before it uses any of it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from acode.domain.age import AgeJudgement
from acode.domain.events import EventType
from acode.domain.position import Position, position_in
from acode.domain.states import SessionState
from acode.errors import AcodeError, NothingToResumeError
from acode.resume.modes import candidates
from acode.runtime.catalog import PLAN_EVENT_SEQ
from acode.runtime.inspection import read_store
from acode.store.records import SessionRow
from acode.store.sqlite_store import SqliteStore

__all__ = ["ResumableSession", "list_resumable", "session_position"]


@dataclass(frozen=True)
class ResumableSession:
    """A session `acode resume` can continue, as the list of resumable sessions shows it."""

    id: str
    short_id: str  # the shortest unique prefix of ``id`` in the workspace (8 or more)
    title: str
    state: SessionState
    kind: str  # "plan" or "agent"
    updated_at: datetime  # when it last recorded anything (UTC)
    age: AgeJudgement  # how long ago that is, judged (fresh, recent, moderate, stale)
    position: Position | None  # the step it was at; None: it had not begun one


def list_resumable(workspace: Path | str = ".") -> list[ResumableSession]:
    """The sessions of ``workspace`` that `acode resume` can continue, most recent first,
    each with how long ago it stopped and the step it was at. Reads only: no lock is
    taken and nothing is written. A directory where no session was ever recorded has
    none; one that does not exist raises ``NothingToResumeError`` (acode.errors)."""
    root = Path(workspace).resolve()
    if not root.is_dir():
        raise NothingToResumeError(
            f"no such workspace: {root}", hint="give the directory the sessions worked in"
        )
    now_us = time.time_ns() // 1000
    with read_store(root) as store:
        if store is None:
            return []
        return [
            ResumableSession(
                id=c.row.id,
                short_id=c.row.short_id,
                title=c.row.title,
                state=SessionState(c.row.state),
                kind=c.row.kind,
                updated_at=datetime.fromtimestamp(c.row.updated_at / 1e6, UTC),
                age=c.age,
                position=session_position(store, c.row),
            )
            for c in candidates(store, now_us)
        ]


def session_position(
    store: SqliteStore, row: SessionRow, step_id: str | None = None, task_id: str | None = None
) -> Position | None:
    """Where ``step_id`` (default: the step the session's row names) is in the session's
    plan: "Task 2/3, Step 3/5 (implement > build)"; only its ids when the session has no
    plan, or its recorded plan cannot be read (the resume will say why)."""
    if step_id is None:
        step_id, task_id = row.current_step, row.current_task
    if step_id is None:
        return None
    plan = None
    if row.kind == "plan":
        from acode.domain.plan import Plan

        try:
            event = store.event(row, PLAN_EVENT_SEQ)
            if event.type is EventType.PLAN_RECORDED:
                plan = Plan.from_record(event.payload["plan"])
        except (AcodeError, KeyError, TypeError, ValueError):
            plan = None
    return position_in(plan, step_id, task_id)
