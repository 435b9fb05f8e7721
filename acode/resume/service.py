"""Resume: select a session, refuse what cannot be resumed, take the lock, verify the
checkpoint and the chain, plan the continuation, and only then write.

Every check runs before the first write, so a resume that fails leaves the session
exactly as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from acode.domain.config import AcodeConfig
from acode.domain.continuation import ContinuationPlan, plan_continuation
from acode.domain.events import EventType
from acode.domain.plan import Plan
from acode.domain.reducer import SessionSummary
from acode.domain.states import SessionState, is_terminal
from acode.errors import NothingToResumeError, SessionNotFoundError, TerminalStateError
from acode.runtime.catalog import find_session, recorded_config, recorded_plan, resumable_sessions
from acode.runtime.clock import Clock, SystemClock
from acode.runtime.interrupts import Interrupts
from acode.runtime.journal import Journal
from acode.runtime.lifecycle import Workspace, open_workspace, take_lock
from acode.runtime.observer import Approver, Observer
from acode.runtime.session import Session
from acode.runtime.steps.base import InProgressStrategy
from acode.security.signing import load_signer
from acode.store.records import SessionRow
from acode.store.sqlite_store import SqliteStore, open_store

__all__ = ["ResumePreview", "preview_resume", "resume_session", "select_for_resume"]


@dataclass(frozen=True)
class ResumePreview:
    row: SessionRow
    summary: SessionSummary
    checkpoint_id: int
    plan: Plan | None
    continuation: ContinuationPlan | None

    def log_record(self) -> dict[str, object]:
        """The `session_resume` record of the specification."""
        c = self.continuation
        remaining = None
        if self.summary.total_steps is not None:
            remaining = self.summary.total_steps - self.summary.steps_completed
        return {
            "event": "session_resume",
            "session_id": self.row.id,
            "checkpoint_id": self.checkpoint_id,
            "skipped_tasks": len(c.skipped_tasks) if c else 0,
            "skipped_steps": self.summary.steps_completed,
            "remaining_steps": remaining,
            "in_progress_action": c.in_progress_action if c else None,
            "sync_status": "local",
            "environment_valid": True,
        }


def select_for_resume(store: SqliteStore, id_or_prefix: str | None) -> SessionRow:
    """The session to resume: the one named, else the most recent resumable one."""
    if id_or_prefix is None:
        candidates = resumable_sessions(store)
        if not candidates:
            raise NothingToResumeError(
                "no resumable session in this workspace",
                hint="start one with `acode run PLAN.yaml`; `acode session list` shows all",
            )
        return candidates[0]
    try:
        row = find_session(store, id_or_prefix)
    except SessionNotFoundError as exc:
        raise NothingToResumeError(exc.message, hint=exc.hint) from exc
    _refuse_terminal(row)
    return row


def _refuse_terminal(row: SessionRow) -> None:
    state = SessionState(row.state)
    if is_terminal(state):
        raise TerminalStateError(
            f"cannot resume session {row.short_id}: it is {state.value}",
            hint=f'terminal sessions never run again; start a new one: acode run "{row.title}"',
        )


def _preview(store: SqliteStore, row: SessionRow, journal: Journal) -> ResumePreview:
    plan = recorded_plan(store, row)
    continuation = None
    if plan is not None:
        statuses = {s.step_id: s.status for s in store.steps(row.sid)}
        continuation = plan_continuation(plan, statuses)
    assert journal.summary is not None
    return ResumePreview(row, journal.summary, journal.checkpoint_id, plan, continuation)


def preview_resume(
    id_or_prefix: str | None = None, workspace: Path | str = ".", *, clock: Clock | None = None
) -> ResumePreview:
    """What `resume` would do, without taking the lock or writing anything."""
    ws = open_workspace(workspace)
    store = open_store(ws.paths.db, ws.config.durability)
    try:
        row = select_for_resume(store, id_or_prefix)
        journal = Journal.load(store, row, clock or SystemClock(), load_signer())
        return _preview(store, row, journal)
    finally:
        store.close()


def resume_session(
    id_or_prefix: str | None = None,
    workspace: Path | str = ".",
    *,
    observer: Observer | None = None,
    approver: Approver | None = None,
    interrupts: Interrupts | None = None,
    strategy: InProgressStrategy | None = None,
    clock: Clock | None = None,
    on_preview: Callable[[ResumePreview], None] | None = None,
) -> Session:
    """Continue a session in a new process; completed steps replay from the record."""
    clock = clock or SystemClock()
    ws: Workspace = open_workspace(workspace)
    signer = load_signer()
    with ExitStack() as cleanup:
        store = open_store(ws.paths.db, ws.config.durability)
        cleanup.callback(store.close)
        row = select_for_resume(store, id_or_prefix)
        lock = take_lock(ws, row.id, clock)
        cleanup.callback(lock.release)
        row = store.session(row.id)  # it may have moved on while we took the lock
        _refuse_terminal(row)
        config: AcodeConfig = recorded_config(row)
        journal = Journal.load(store, row, clock, signer)
        preview = _preview(store, row, journal)
        if on_preview is not None:
            on_preview(preview)
        # Every check is done: only now is anything written.
        journal.write(_resume_entries(preview))
        cleanup.pop_all()  # the Session owns the store and the lock from here on
    return Session(
        journal=journal,
        workspace=ws.root,
        config=config,
        lock=lock,
        signer=signer,
        observer=observer,
        approver=approver,
        interrupts=interrupts,
        strategy=strategy,
    )


def _resume_entries(preview: ResumePreview) -> list[tuple[EventType, dict[str, object]]]:
    summary = preview.summary
    entries: list[tuple[EventType, dict[str, object]]] = [
        (EventType.SESSION_RESUMED, preview.log_record())
    ]
    target = _state_after_resume(summary)
    if target is not summary.state:
        entries.append(
            (
                EventType.STATE_CHANGED,
                {"from": summary.state.value, "to": target.value, "reason": "resumed"},
            )
        )
    return entries


def _state_after_resume(summary: SessionSummary) -> SessionState:
    if summary.state is SessionState.PAUSED:
        return summary.resume_state or SessionState.EXECUTING
    if summary.state is SessionState.CREATED:
        return SessionState.EXECUTING
    return summary.state
