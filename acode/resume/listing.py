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

from acode.domain.age import AgeJudgement, judge_age
from acode.domain.events import EventType
from acode.domain.position import Position, position_in
from acode.domain.states import SessionState
from acode.engine.catalog import PLAN_EVENT_SEQ, resumable_sessions
from acode.errors import AcodeError, NothingToResumeError
from acode.operations.inspection import read_store
from acode.store.base import EventStore
from acode.store.records import SessionRow

__all__ = ["ResumableSession", "list_resumable", "session_position"]


@dataclass(frozen=True)
class ResumableSession:
    """A session `acode resume` can continue, as the list of resumable sessions shows it."""

    id: str
    short_id: str  # the shortest unique prefix of ``id`` in the workspace (8 or more)
    title: str
    state: SessionState
    kind: str  # "plan", "agent" (acode run), or "library" (a program's: acode.open_session)
    updated_at: datetime  # when it last recorded anything (UTC)
    age: AgeJudgement  # how long ago that is, judged (fresh, recent, moderate, stale)
    position: Position | None  # the step it was at; None: it had not begun one


def list_resumable(workspace: Path | str = ".") -> list[ResumableSession]:
    """The sessions of ``workspace`` that can be resumed, most recent first, each with
    how long ago it stopped and the step it was at: those `acode resume` continues (plan
    and agent sessions) and those a program continues with ``acode.resume_session``
    (``kind`` "library"). Discarded sessions are not among them. Reads only: no lock is
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
                id=row.id,
                short_id=row.short_id,
                title=row.title,
                state=SessionState(row.state),
                kind=row.kind,
                updated_at=datetime.fromtimestamp(row.updated_at / 1e6, UTC),
                age=judge_age(max(0, now_us - row.updated_at) // 1_000_000),
                position=session_position(store, row),
            )
            for row in resumable_sessions(store)
        ]


def session_position(
    store: EventStore, row: SessionRow, step_id: str | None = None, task_id: str | None = None
) -> Position | None:
    """Where ``step_id`` (default: the newest step the session began) is in the
    session's plan: "Task 2/3, Step 3/5 (implement > build)"; only its ids when the
    session has no plan, or its recorded plan cannot be read (the resume will say why).
    None: the session began no step."""
    if step_id is None:
        # The row names the step of the newest checkpoint; a step a kill interrupted
        # began after it.
        newest = store.newest_steps(row, 1)
        if not newest:
            return None
        step_id, task_id = newest[-1].step_id, newest[-1].task_id
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
