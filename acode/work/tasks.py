"""Tasks: JSON files under ``docs/acode/tasks/`` (the repository's truth, read in review),
mirrored in the workspace's task ledger (a session of kind "tasks", one step per change).

Every command first reconciles the two: a file changed by hand is recorded as a new
revision; a recorded task whose file is missing (a command killed between its commit and
its write) gets its file back. Files are written atomically (temporary file, fsync,
rename), so a reader never sees half a task.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from acode.domain.json_text import read_json
from acode.domain.paths import text_problem
from acode.domain.work import Task, TaskStatus, next_task_id, parse_task
from acode.engine.lifecycle import Workspace, now_iso, open_workspace_store, start_session
from acode.engine.session import Session, journal_of
from acode.errors import UsageError, WorkNotFoundError
from acode.system.beneath import Beneath
from acode.system.clock import SystemClock
from acode.system.user_files import read_user_file
from acode.system.workspace import STATE_PARTS
from acode.work.ledger import append_to, held, recorded_results

__all__ = [
    "TASKS_DIR",
    "add_task",
    "find_task",
    "list_tasks",
    "set_task_status",
    "task_ledger",
]

TASKS_DIR = Path("docs/acode/tasks")
_LEDGER_KIND = "tasks"
_LEDGER_LOCK = "tasks-ledger"


def _now() -> str:
    return now_iso(SystemClock())


def _ledger_id(ws: Workspace) -> str:
    """The workspace's task ledger, created on first use (under a lock of its own, so
    two first commands make one ledger)."""
    with held(ws, _LEDGER_LOCK):
        store = open_workspace_store(ws)
        try:
            found = [r for r in store.sessions() if r.kind == _LEDGER_KIND]
        finally:
            store.close()
        if found:
            return found[-1].id
        session = start_session("acode tasks", ws.root, ws.config, ledger=_LEDGER_KIND)
        try:
            return session.id
        finally:
            session.close()


@contextmanager
def task_ledger(ws: Workspace) -> Iterator[tuple[Session, dict[str, Task]]]:
    """The ledger, lock held, reconciled with the files: (session, tasks by id)."""
    with append_to(ws, _ledger_id(ws)) as session:
        yield session, _reconcile(ws, session)


def _recorded(session: Session) -> dict[str, Task]:
    journal = journal_of(session)
    tasks: dict[str, Task] = {}
    for _, result in recorded_results(journal.history):
        if isinstance(result, dict) and "task" in result:
            task = parse_task(result["task"], "the task ledger")
            tasks[task.id] = task
    return tasks


def _reconcile(ws: Workspace, session: Session) -> dict[str, Task]:
    tasks = _recorded(session)
    folder = ws.root / TASKS_DIR
    on_disk = sorted(folder.glob("task-*.json")) if folder.is_dir() else []
    for path in on_disk:
        task = _read_file(path, ws.root)
        if tasks.get(task.id) != task:
            _record(session, task, source="file")
            tasks[task.id] = task
    for task in tasks.values():
        path = ws.root / TASKS_DIR / f"{task.id}.json"
        if not path.exists():
            _write_file(ws, task)
    return dict(sorted(tasks.items()))


def _read_file(path: Path, root: Path) -> Task:
    source = str(path.relative_to(root))
    try:
        data: Any = read_json(read_user_file(path).decode("utf-8"))
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise UsageError(
            f"{source}: not a readable JSON task: {reason}",
            hint="fix the file or restore it from git (`git checkout -- " + source + "`)",
        ) from exc
    task = parse_task(data, source)
    if path.stem != task.id:
        raise UsageError(
            f"{source}: holds task {task.id!r}, but the file is named for {path.stem!r}",
            hint=f"rename the file to {task.id}.json or fix its id",
        )
    return task


def _record(session: Session, task: Task, *, source: str) -> None:
    revision = sum(1 for step_id in _step_ids(session) if step_id.startswith(f"{task.id}.")) + 1
    payload = {"task": task.to_dict(), "source": source}
    session.step(f"{task.id}.{revision}", lambda ctx: payload, input=payload, title=task.title)


def _step_ids(session: Session) -> list[str]:
    journal = journal_of(session)
    return [step_id for step_id, _ in recorded_results(journal.history)]


def _write_file(ws: Workspace, task: Task) -> None:
    text = json.dumps(task.to_dict(), indent=2, ensure_ascii=False) + "\n"
    with Beneath(ws.root) as tree:  # a link on the way is not followed out
        tree.write(
            f"{TASKS_DIR.as_posix()}/{task.id}.json", text.encode("utf-8"), staging=STATE_PARTS
        )


def _save(ws: Workspace, session: Session, task: Task) -> Task:
    """Record, then write: a kill between the two is repaired by the next reconcile."""
    _record(session, task, source="acode")
    _write_file(ws, task)
    return task


def add_task(
    ws: Workspace, title: str, description: str = "", *, parent_task: str | None = None
) -> Task:
    if not title.strip():
        raise UsageError("the task title is empty", hint='acode task add "Implement feature X"')
    problem = text_problem(title, "the title") or text_problem(
        description, "the description", lines=True
    )
    if problem:
        raise UsageError(problem, hint='give printable text: acode task add "Implement feature X"')
    with task_ledger(ws) as (session, tasks):
        if parent_task is not None and parent_task not in tasks:
            raise _no_task(parent_task, tasks)
        now = _now()
        task = Task(
            id=next_task_id(tasks),
            title=title.strip(),
            description=description.strip(),
            parent_task=parent_task,
            created_at=now,
            updated_at=now,
        )
        return _save(ws, session, task)


def set_task_status(ws: Workspace, task_id: str, status: TaskStatus) -> Task:
    with task_ledger(ws) as (session, tasks):
        task = tasks.get(task_id)
        if task is None:
            raise _no_task(task_id, tasks)
        if task.status is status:
            return task
        return _save(ws, session, replace(task, status=status, updated_at=_now()))


def list_tasks(ws: Workspace) -> list[Task]:
    with task_ledger(ws) as (_, tasks):
        return list(tasks.values())


def find_task(ws: Workspace, task_id: str) -> Task:
    with task_ledger(ws) as (_, tasks):
        task = tasks.get(task_id)
        if task is None:
            raise _no_task(task_id, tasks)
        return task


def _no_task(task_id: str, tasks: dict[str, Task]) -> WorkNotFoundError:
    known = ", ".join(list(tasks)[-5:]) or "none yet"
    return WorkNotFoundError(
        f"no task {task_id!r} in {TASKS_DIR} (known: {known})",
        hint='`acode task list` shows them; `acode task add "TITLE"` makes one',
    )
