"""Work sessions: an AI engine working on a task, across many processes.

A work session is an acode session of kind "work" used as a ledger (``work.ledger``):
its id is the *cookie* every write to it must present, and its steps record what
happened: ``open`` (the task, the engine, the directory, the parent), ``turn-N`` (one
engine run: its own session id, and whether it was new, resumed or rebuilt),
``bc-NNN`` (breadcrumbs) and ``close``. Subtasks are work sessions whose parent is this
one. The document ``docs/acode/work_sessions/<id>.json`` is rendered from that record
after every change, and rendered again by the next command when a kill came between
the commit and the write.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from acode.domain.states import SessionState
from acode.domain.work import (
    Breadcrumb,
    EngineSession,
    Subtask,
    Task,
    TaskStatus,
    WorkSession,
    breadcrumb_id,
    parse_breadcrumb,
    parse_summary,
)
from acode.engine.journal import Journal
from acode.engine.lifecycle import Workspace, now_iso, open_workspace_store, start_session
from acode.engine.session import journal_of
from acode.errors import (
    AcodeError,
    AmbiguousSessionError,
    CheckpointError,
    CookieError,
    ErrorCode,
    TerminalStateError,
    UsageError,
    WorkNotFoundError,
)
from acode.security.redaction import redact, redact_json
from acode.security.signing import Signer, load_signer
from acode.store.base import EventStore
from acode.store.records import SessionRow
from acode.system.beneath import Beneath
from acode.system.clock import SystemClock
from acode.system.workspace import STATE_PARTS
from acode.work.ledger import append_to, held, recorded_results, verified
from acode.work.prompts import rebuilt_prompt, resume_prompt, start_prompt
from acode.work.tasks import TASKS_DIR, add_task, find_task, list_tasks, set_task_status

if TYPE_CHECKING:
    from acode.work.engine_output import EngineTurn

__all__ = [
    "COOKIE_ENV",
    "WSESSIONS_DIR",
    "Started",
    "TurnRunner",
    "add_breadcrumb",
    "close_work",
    "list_breadcrumbs",
    "list_work_sessions",
    "repair",
    "resume_work",
    "spawn_work",
    "start_work",
    "work_session",
]

WSESSIONS_DIR = Path("docs/acode/work_sessions")
# Set for the engine's process: a breadcrumb command run by the engine is checked
# against the work session that started it.
COOKIE_ENV = "ACODE_WORK_COOKIE"
_KIND = "work"
_TEXT_KEPT = 2000


class TurnRunner(Protocol):
    """Runs the engines' turns. The CLI passes the real one (work.runner); tests may pass
    another that speaks to a real engine differently."""

    def check(self, engine: str) -> None:
        """Raise a UsageError if ``engine`` cannot run as configured (no command, one no
        shell could read): asked before a command writes anything."""

    def __call__(
        self, engine: str, prompt: str, resume: str | None, wsession: WorkSession
    ) -> EngineTurn:
        """What the engine did with ``prompt``: in its session ``resume``, or a new one
        when None."""


@dataclass(frozen=True)
class Started:
    """What a command that ran the engine did: the work session after it, and each turn
    with how it began ("new", "resumed", "rebuilt", "resume_failed"), and the engine
    session a resume asked for (None when it had none to ask for)."""

    wsession: WorkSession
    task: Task
    turns: tuple[tuple[str, EngineTurn], ...] = ()
    asked: str | None = None


def _now() -> str:
    return now_iso(SystemClock())


# -- reading ---------------------------------------------------------------------------


def _store(ws: Workspace) -> EventStore:
    return open_workspace_store(ws)


def _work_row(store: EventStore, id_or_prefix: str) -> SessionRow:
    """The work session ``id_or_prefix`` names. The ids of other sessions (the task list,
    agent runs) share its form but are no work session's: a prefix is matched against work
    sessions only, and what names none points at `acode work list`."""
    prefix = id_or_prefix.strip().lower()
    matches = [r for r in store.sessions() if r.kind == _KIND and r.id.startswith(prefix)]
    if not prefix or not matches:
        raise WorkNotFoundError(
            f"no work session {id_or_prefix!r}",
            hint="`acode work list` shows the work sessions",
        )
    if len(matches) > 1:
        raise AmbiguousSessionError(
            f"{id_or_prefix!r} matches {len(matches)} work sessions: "
            f"{', '.join(m.short_id for m in matches[:10])}",
            hint="give more characters of the id; `acode work list` shows them",
        )
    return matches[0]


def _load(ws: Workspace, store: EventStore, row: SessionRow, signer: Signer) -> WorkSession:
    """Work session ``row`` as its history, checked on its chain, records it."""
    wsession = _from_results(store, row, signer)
    _check_record(ws, wsession)
    return wsession


def _check_record(ws: Workspace, wsession: WorkSession) -> None:
    """Its document in the repository (``_render``) may lag behind the history, never
    lead it: one that holds more turns or breadcrumbs, or says it is closed when the
    history does not, knows a later position: the history was cut short."""
    relative = f"{WSESSIONS_DIR.as_posix()}/{wsession.id}.json"
    try:
        with Beneath(ws.root) as tree:
            record = json.loads(tree.read_bytes(relative) or b"null")
    except (AcodeError, OSError, ValueError):
        return  # none yet, or not ours to read: nothing known of a later position
    if not isinstance(record, dict):
        return
    ahead = [
        what
        for what, recorded, held in (
            ("engine turns", record.get("engine_sessions"), wsession.engine_sessions),
            ("breadcrumbs", record.get("breadcrumbs"), wsession.breadcrumbs),
        )
        if isinstance(recorded, list) and len(recorded) > len(held)
    ]
    if record.get("status") == "closed" and wsession.status != "closed":
        ahead.append("its closing")
    if ahead:
        raise CheckpointError(
            f"work session {wsession.id}: {relative} records "
            f"{' and '.join(ahead)} its history does not hold: the newest events were cut "
            "off (the database was edited)",
            hint="refusing to use it; restore the database from a backup, or start a new "
            f"work session on the task: acode work task {wsession.task_id}",
            code=ErrorCode.CHAIN_BROKEN,
        )


def _from_results(store: EventStore, row: SessionRow, signer: Signer) -> WorkSession:
    results = dict(recorded_results(verified(store, row, signer)))
    opened = results.get("open")
    if not isinstance(opened, dict):
        raise WorkNotFoundError(
            f"work session {row.short_id} has no opening record",
            hint="it was interrupted before it started: `acode work task` starts the task again",
        )
    turns = [r for k, r in results.items() if k.startswith("turn-") and isinstance(r, dict)]
    crumbs = [
        Breadcrumb.from_dict(r)
        for k, r in results.items()
        if k.startswith("bc-") and isinstance(r, dict)
    ]
    engine_sessions = tuple(
        EngineSession(id=t.get("session_id"), started_at=t["at"], how=t["how"])
        for t in turns
        if t.get("ok")
    )
    current = next((e.id for e in reversed(engine_sessions) if e.id), None)
    closed = results.get("close")
    closing = closed if isinstance(closed, dict) else None
    return WorkSession(
        id=row.id,
        task_id=opened["task_id"],
        engine=opened["engine"],
        cwd=opened["cwd"],
        status="closed" if closing is not None else "active",
        created_at=opened["created_at"],
        parent_wsession_id=opened.get("parent_wsession_id"),
        ai_session_id=current,
        engine_sessions=engine_sessions,
        breadcrumbs=tuple(crumbs),
        subtasks=tuple(_subtasks(store, row, signer)),
        closed_at=closing["at"] if closing else None,
        summary=closing.get("summary") if closing else None,
    )


def _subtasks(store: EventStore, parent: SessionRow, signer: Signer) -> Iterator[Subtask]:
    for child in reversed(store.sessions()):  # oldest first
        if child.kind != _KIND or child.parent_id != parent.id:
            continue
        results = dict(recorded_results(verified(store, child, signer)))
        opened, closing = results.get("open"), results.get("close")
        if not isinstance(opened, dict):
            continue
        yield Subtask(
            task_id=opened["task_id"],
            wsession_id=child.id,
            status="completed" if isinstance(closing, dict) else "active",
            summary=closing.get("summary") if isinstance(closing, dict) else None,
        )


def work_session(ws: Workspace, id_or_prefix: str) -> WorkSession:
    store = _store(ws)
    try:
        return _load(ws, store, _work_row(store, id_or_prefix), load_signer())
    finally:
        store.close()


def list_work_sessions(ws: Workspace) -> list[WorkSession]:
    store = _store(ws)
    try:
        rows = [r for r in store.sessions() if r.kind == _KIND]
        signer = load_signer()
        found = []
        for row in rows:
            try:
                found.append(_load(ws, store, row, signer))
            except WorkNotFoundError:
                continue  # killed before its opening record: nothing to show
        return found
    finally:
        store.close()


def repair(ws: Workspace) -> list[WorkSession]:
    """Finish what a killed command left half done, and return every work session: a
    closed work session's task is done, a closed subtask's summary is in its parent, and
    every document shows the record."""
    sessions = list_work_sessions(ws)
    tasks = {t.id: t for t in list_tasks(ws)}
    changed = False
    for wsession in sessions:
        task = tasks.get(wsession.task_id)
        if wsession.status == "closed" and task is not None and task.status is not TaskStatus.DONE:
            set_task_status(ws, task.id, TaskStatus.DONE)
        if any(s.status == "completed" for s in wsession.subtasks):
            changed = _deliver_summaries(ws, wsession) or changed
    if changed:
        sessions = list_work_sessions(ws)
    for wsession in sessions:
        _render(ws, wsession)
    return sessions


# -- the documents -------------------------------------------------------------------


def _render(ws: Workspace, wsession: WorkSession) -> None:
    relative = f"{WSESSIONS_DIR.as_posix()}/{wsession.id}.json"
    # The document is meant to be committed: its breadcrumbs and summaries as shown.
    text = json.dumps(redact_json(wsession.to_dict()), indent=2, ensure_ascii=False) + "\n"
    data = text.encode()
    # From the workspace's descriptor, as a step's files: a link on the way is not
    # followed out of the workspace.
    with Beneath(ws.root) as tree:
        try:
            same = tree.read_bytes(relative) == data
        except AcodeError:  # not a regular file (a FIFO put in its place): written over
            same = False
        if not same:
            tree.write(relative, data, staging=STATE_PARTS)


def _refresh(ws: Workspace, session_id: str) -> WorkSession:
    store = _store(ws)
    try:
        wsession = _load(ws, store, store.session(session_id), load_signer())
    finally:
        store.close()
    _render(ws, wsession)
    return wsession


# -- engine turns --------------------------------------------------------------------------


@contextmanager
def _explained(outcome: str, *, then: str) -> Iterator[None]:
    """An error raised inside says what became of the work and ends its hint with the
    command to run once its cause is fixed."""
    try:
        yield
    except AcodeError as exc:
        hint = f"{exc.hint}, then: {then}" if exc.hint else then
        raise type(exc)(f"{exc.message}; {outcome}", hint=hint, code=exc.code) from exc


def _check_engine(run_turn: TurnRunner | None, engine: str, *, again: str) -> None:
    """Refuse an engine that cannot run as configured before anything is written, so
    that ``again`` finds nothing half made. Hands-off mode runs no engine."""
    if run_turn is not None:
        with _explained("nothing was written", then=again):
            run_turn.check(engine)


def _turn(
    run_turn: TurnRunner, prompt: str, resume: str | None, wsession: WorkSession
) -> EngineTurn:
    """One engine turn. An engine that cannot be started (not installed) leaves the work
    session as it was: `acode work resume` starts it again."""
    with _explained(f"work session {wsession.id} is kept", then=f"acode work resume {wsession.id}"):
        return run_turn(wsession.engine, prompt, resume, wsession)


# -- starting ----------------------------------------------------------------------------


def start_work(ws: Workspace, task_id: str, engine: str, run_turn: TurnRunner | None) -> Started:
    """Open a work session on ``task_id`` and, unless ``run_turn`` is None (hands-off
    mode: the person runs the engine), run the engine's first turn."""
    task = _startable(ws, task_id)
    _check_engine(run_turn, engine, again=f"acode work task {task.id} --engine {engine}")
    return _start(ws, task, engine, run_turn)


def _startable(ws: Workspace, task_id: str) -> Task:
    task = find_task(ws, task_id)
    if task.status is TaskStatus.DONE:
        raise UsageError(
            f"{task.id} is done",
            hint=f'reopen it (set "status" to "todo" in {TASKS_DIR.as_posix()}/{task.id}.json), '
            f'or add a new task: acode task add "..."',
        )
    return task


def _start(
    ws: Workspace,
    task: Task,
    engine: str,
    run_turn: TurnRunner | None,
    parent: WorkSession | None = None,
) -> Started:
    task = set_task_status(ws, task.id, TaskStatus.IN_PROGRESS)
    session = start_session(
        f"{task.id}: {task.title}",
        ws.root,
        ws.config,
        ledger=_KIND,
        parent_id=parent.id if parent is not None else None,
    )
    try:
        record = {
            "task_id": task.id,
            "engine": engine,
            "cwd": str(ws.root),
            "created_at": _now(),
            "parent_wsession_id": parent.id if parent is not None else None,
        }
        session.step("open", lambda ctx: record, input=record, title=f"open {task.id}")
        wsession_id = session.id
    finally:
        session.close()
    wsession = _refresh(ws, wsession_id)
    if parent is not None:
        _refresh(ws, parent.id)
    if run_turn is None:
        return Started(wsession=wsession, task=task)
    turn = _turn(run_turn, start_prompt(task, wsession), None, wsession)
    wsession = _record_turn(ws, wsession.id, "new", turn)
    return Started(wsession=wsession, task=task, turns=(("new", turn),))


def _record_turn(ws: Workspace, wsession_id: str, how: str, turn: EngineTurn) -> WorkSession:
    with append_to(ws, wsession_id) as session:
        number = sum(1 for _ in _steps_with_prefix(journal_of(session), "turn-")) + 1
        result = {
            "how": how,
            # A failed attempt's id is never the session's: it may be one the engine
            # printed for a conversation that does not exist.
            "session_id": turn.session_id if turn.ok else None,
            "ok": turn.ok,
            "forgotten": turn.forgotten,
            "detail": turn.detail,
            "text": turn.text[-_TEXT_KEPT:],
            "at": _now(),
        }
        session.step(f"turn-{number}", lambda ctx: result, input=result, title=f"engine: {how}")
    return _refresh(ws, wsession_id)


def _steps_with_prefix(journal: Journal, prefix: str) -> Iterator[str]:
    for step_id, _ in recorded_results(journal.history):
        if step_id.startswith(prefix):
            yield step_id


def spawn_work(
    ws: Workspace, from_task: str, title: str, engine: str | None, run_turn: TurnRunner | None
) -> Started:
    """A subtask of ``from_task`` with its own task file, work session and engine
    session, linked to the parent's active work session."""
    parent = _active_for_task(ws, from_task)
    again = f"acode work spawn --from-task {from_task} --title {shlex.quote(title)}"
    _check_engine(
        run_turn,
        engine or parent.engine,
        again=f"{again} --engine {engine}" if engine else again,
    )
    with held(ws, f"spawn-{parent.id}"):
        # A spawn killed after its task was made but before its work session: that task
        # is used again rather than doubled.
        started = {w.task_id for w in list_work_sessions(ws)}
        leftover = next(
            (
                t
                for t in list_tasks(ws)
                if t.parent_task == from_task and t.title == title.strip() and t.id not in started
            ),
            None,
        )
        task = leftover or add_task(ws, title, parent_task=from_task)
        return _start(ws, _startable(ws, task.id), engine or parent.engine, run_turn, parent)


def _active_for_task(ws: Workspace, task_id: str) -> WorkSession:
    find_task(ws, task_id)
    for wsession in list_work_sessions(ws):  # most recent first
        if wsession.task_id == task_id and wsession.status == "active":
            return wsession
    raise WorkNotFoundError(
        f"{task_id} has no active work session to spawn from",
        hint=f"start one: acode work task {task_id}",
    )


# -- resuming ------------------------------------------------------------------------------


def resume_work(ws: Workspace, id_or_prefix: str, run_turn: TurnRunner | None) -> Started:
    """Ask the engine to resume its recorded session; when it no longer knows it, start
    a new one whose prompt rebuilds the context from the task, breadcrumbs and
    subtasks. With no ``run_turn`` (hands-off mode) nothing is run."""
    wsession = work_session(ws, id_or_prefix)
    if wsession.status == "closed":
        raise TerminalStateError(
            f"work session {wsession.id} is closed; it cannot be resumed",
            hint=f"start a new one on the task: acode work task {wsession.task_id}",
            code=ErrorCode.WORK_CLOSED,
        )
    _check_engine(run_turn, wsession.engine, again=f"acode work resume {wsession.id}")
    _deliver_summaries(ws, wsession)
    wsession = _refresh(ws, wsession.id)
    task = find_task(ws, wsession.task_id)
    if run_turn is None:
        return Started(wsession=wsession, task=task)
    turns: list[tuple[str, EngineTurn]] = []
    # Aider keeps no id: its conversation is the work session's history file ("").
    known = wsession.ai_session_id or ("" if wsession.engine == "aider" else None)
    if known is not None:
        turn = _turn(run_turn, resume_prompt(task, wsession), known, wsession)
        how = "resumed" if turn.ok else "resume_failed"
        wsession = _record_turn(ws, wsession.id, how, turn)
        turns.append((how, turn))
        if turn.ok or not turn.forgotten:
            return Started(wsession=wsession, task=task, turns=tuple(turns), asked=known)
    turn = _turn(run_turn, rebuilt_prompt(task, wsession), None, wsession)
    wsession = _record_turn(ws, wsession.id, "rebuilt", turn)
    turns.append(("rebuilt", turn))
    return Started(wsession=wsession, task=task, turns=tuple(turns), asked=known)


# -- breadcrumbs -------------------------------------------------------------------------


def _checked_cookie(
    ws: Workspace, cookie: str | None, expected: str | None, *, listing: bool = False
) -> WorkSession:
    """The active work session ``cookie`` names; anything else is refused, naming the
    cookie expected and the one received."""
    sessions = list_work_sessions(ws)
    active = [w.id for w in sessions if w.status == "active"]
    want = expected or (", ".join(active) if active else "none (no work session is active)")
    refused = "breadcrumbs not listed" if listing else "breadcrumb rejected"
    written = "" if listing else "; nothing was written"
    if not cookie:
        only = expected or (active[0] if len(active) == 1 else None)
        retry = (
            f"acode wsession breadcrumb list --cookie {only}"
            if listing and only
            else "pass --cookie with the work session's id, as its prompt gives it"
        )
        raise CookieError(
            f"missing --cookie: expected cookie {want}; {refused}", hint=retry + written
        )
    found = next((w for w in sessions if w.id == cookie), None)
    status = "unknown" if found is None else f"{found.status} session"
    if found is None or found.status != "active" or (expected and cookie != expected):
        raise CookieError(
            f"cookie mismatch: expected cookie {want} (active session), received cookie "
            f"{cookie} ({status}); {refused}",
            hint="use the cookie of the work session you are working in" + written,
        )
    return found


def add_breadcrumb(
    ws: Workspace, cookie: str | None, message: str, *, expected: str | None = None
) -> Breadcrumb:
    """Validate the message against the contract and the cookie, then record it."""
    fields = parse_breadcrumb(message)
    wsession = _checked_cookie(ws, cookie, expected)
    crumb = _append_breadcrumb(ws, wsession, fields)
    _refresh(ws, wsession.id)
    return crumb


def _append_breadcrumb(
    ws: Workspace, wsession: WorkSession, fields: Mapping[str, Any]
) -> Breadcrumb:
    with append_to(ws, wsession.id) as session:
        if session.state is not SessionState.EXECUTING:
            raise CookieError(
                f"work session {wsession.id} closed meanwhile; breadcrumb rejected",
                hint="nothing was written",
            )
        number = sum(1 for _ in _steps_with_prefix(journal_of(session), "bc-")) + 1
        crumb = Breadcrumb(
            id=breadcrumb_id(number),
            message=fields["message"],
            timestamp=_now(),
            ai_session_id=wsession.ai_session_id,
            kind=fields.get("kind", "note"),
            files=tuple(fields.get("files", ())),
            data=fields.get("data"),
        )
        record = crumb.to_dict()
        # The title is shown cut: masked first, or a secret cut short would keep no shape.
        title = redact(crumb.message)[:60]
        session.step(crumb.id, lambda ctx: record, input=record, title=title)
    return crumb


def list_breadcrumbs(
    ws: Workspace, cookie: str | None, *, expected: str | None = None
) -> WorkSession:
    return _checked_cookie(ws, cookie, expected, listing=True)


# -- closing -------------------------------------------------------------------------------


def close_work(ws: Workspace, id_or_prefix: str, summary: str | None) -> WorkSession:
    """Close the work session, mark its task done and, for a subtask, send the parent a
    summary breadcrumb."""
    wsession = work_session(ws, id_or_prefix)
    if wsession.status == "closed":
        raise TerminalStateError(
            f"work session {wsession.id} is already closed",
            hint="`acode work show` shows it",
            code=ErrorCode.WORK_CLOSED,
        )
    text = parse_summary(summary or "") or _default_summary(wsession)
    with append_to(ws, wsession.id) as session:
        record = {"summary": text, "at": _now()}
        session.step("close", lambda ctx: record, input=record, title="close")
        session.complete()
    set_task_status(ws, wsession.task_id, TaskStatus.DONE)
    closed = _refresh(ws, wsession.id)
    if closed.parent_wsession_id is not None:
        _deliver_summaries(ws, work_session(ws, closed.parent_wsession_id))
        _refresh(ws, closed.parent_wsession_id)
    return closed


def _default_summary(wsession: WorkSession) -> str:
    if wsession.breadcrumbs:
        return wsession.breadcrumbs[-1].message
    return f"{wsession.task_id} completed"


def _deliver_summaries(ws: Workspace, parent: WorkSession) -> bool:
    """Every closed subtask's summary as a breadcrumb of the parent, once: run again by
    later commands, it completes a close that was killed half-way. True when it added one."""
    if parent.status != "active":
        return False
    added = False
    delivered = {
        b.data.get("subtask_wsession")
        for b in parent.breadcrumbs
        if isinstance(b.data, dict) and "subtask_wsession" in b.data
    }
    for sub in parent.subtasks:
        if sub.status != "completed" or sub.wsession_id in delivered:
            continue
        fields = {
            "message": f"Subtask {sub.task_id} completed: {sub.summary}",
            "kind": "summary",
            "data": {"subtask_wsession": sub.wsession_id, "task_id": sub.task_id},
        }
        _append_breadcrumb(ws, parent, fields)
        added = True
    return added
