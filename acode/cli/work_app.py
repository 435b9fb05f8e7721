"""`acode task`, `acode settings`, `acode work` and `acode wsession`: parse and render;
the work itself is in acode.work."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from acode.cli.console import count, emit_json, out_console
from acode.cli.options import JsonOption, WorkspaceOption

if TYPE_CHECKING:
    from acode.domain.work import Task, WorkSession
    from acode.engine.lifecycle import Workspace
    from acode.work.engine_output import EngineTurn
    from acode.work.sessions import Started, TurnRunner

__all__ = ["settings_app", "task_app", "work_app", "wsession_app"]

task_app = typer.Typer(help="Tasks kept in docs/acode/tasks/.", no_args_is_help=True)
settings_app = typer.Typer(help="Workspace settings (.agent/config.yml).", no_args_is_help=True)
work_app = typer.Typer(help="Work sessions: an AI engine on a task.", no_args_is_help=True)
wsession_app = typer.Typer(help="What an engine records in its work session.", no_args_is_help=True)
breadcrumb_app = typer.Typer(
    help="Breadcrumbs: findings recorded with a cookie.", no_args_is_help=True
)
wsession_app.add_typer(breadcrumb_app, name="breadcrumb")

TaskId = Annotated[str, typer.Argument(help="The task id, e.g. task-001.", metavar="TASK")]
WsessionId = Annotated[
    str,
    typer.Argument(help="The work session id (its cookie) or a prefix.", metavar="WSESSION"),
]
Summary = Annotated[
    str | None, typer.Option("--summary", help="What was found or done (for the parent).")
]
Engine = Annotated[
    str | None,
    typer.Option(
        "--engine", help="claude, codex, aider, agent or command (default: work_engine setting)."
    ),
]


def _ws(option: Path | None) -> Workspace:
    """The workspace, with whatever a killed command left half done finished first."""
    from acode.cli.entry import workspace_dir
    from acode.engine.lifecycle import open_workspace
    from acode.work.sessions import repair

    ws = open_workspace(workspace_dir(option))
    if ws.config.store.url is not None or ws.paths.db.exists():
        repair(ws)
    return ws


def _listing(rows: list[Any], as_json: bool, empty: str) -> None:
    """A list command's output: JSON rows, text lines, or what to do when there are none."""
    if as_json:
        emit_json(rows)
    else:
        _say(rows or [empty])


def _say(lines: list[str]) -> None:
    console = out_console()
    for line in lines:
        console.print(line, markup=False, highlight=False)


# -- tasks ---------------------------------------------------------------------------------


def _task_line(task: Task) -> str:
    parent = f" (subtask of {task.parent_task})" if task.parent_task else ""
    return f"{task.id}  {task.status.value:<11}  {task.title}{parent}"


@task_app.command("add")
def task_add(
    title: Annotated[str, typer.Argument(help="What the task is.")],
    description: Annotated[str, typer.Option("--description", "-d", help="More detail.")] = "",
    parent: Annotated[str | None, typer.Option("--parent", help="The parent task's id.")] = None,
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Add a task (written to docs/acode/tasks/task-NNN.json)."""
    from acode.work.tasks import TASKS_DIR, add_task

    task = add_task(_ws(workspace), title, description, parent_task=parent)
    if as_json:
        emit_json(task.to_dict())
    else:
        _say([f"[TASK] Created {task.id}: {task.title} ({TASKS_DIR / (task.id + '.json')})"])


@task_app.command("list")
def task_list(workspace: WorkspaceOption = None, as_json: JsonOption = False) -> None:
    """List the tasks with their status."""
    from acode.work.tasks import list_tasks

    tasks = list_tasks(_ws(workspace))
    _listing(
        [t.to_dict() for t in tasks] if as_json else [_task_line(t) for t in tasks],
        as_json,
        'No tasks yet. Add one: acode task add "Implement feature X"',
    )


@task_app.command("show")
def task_show(
    task_id: TaskId, workspace: WorkspaceOption = None, as_json: JsonOption = False
) -> None:
    """Show a task and its work sessions."""
    from acode.work.sessions import list_work_sessions
    from acode.work.tasks import find_task

    ws = _ws(workspace)
    task = find_task(ws, task_id)
    sessions = [w for w in list_work_sessions(ws) if w.task_id == task.id]
    if as_json:
        emit_json({**task.to_dict(), "work_sessions": [w.id for w in sessions]})
        return
    lines = [_task_line(task)]
    if task.description:
        lines.append(f"  {task.description}")
    lines += [f"  work session {w.id} ({w.status}, {w.engine})" for w in sessions]
    _say(lines)


@task_app.command("done")
def task_done(
    task_id: TaskId,
    summary: Summary = None,
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Mark a task done; its active work session is closed (a subtask's summary goes to
    its parent's work session)."""
    from acode.domain.work import TaskStatus
    from acode.work.sessions import close_work, list_work_sessions
    from acode.work.tasks import set_task_status

    ws = _ws(workspace)
    active = [w for w in list_work_sessions(ws) if w.task_id == task_id and w.status == "active"]
    lines = []
    for wsession in active:
        closed = close_work(ws, wsession.id, summary)
        lines += _closed_lines(closed)
    task = set_task_status(ws, task_id, TaskStatus.DONE)
    if as_json:
        emit_json({**task.to_dict(), "closed_work_sessions": [w.id for w in active]})
    else:
        _say([f"[TASK] {task.id} marked as done.", *lines])


# -- settings ------------------------------------------------------------------------------


@settings_app.command("set")
def settings_set(
    key: Annotated[str, typer.Argument(help="ai_stacking_mode, work_engine or durability.")],
    value: Annotated[str, typer.Argument(help="The new value.")],
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Change a setting in .agent/config.yml (comments and other keys are kept)."""
    from acode.cli.entry import workspace_dir
    from acode.engine.config import set_setting

    config = set_setting(workspace_dir(workspace), key, value)
    current = getattr(config, key)
    if as_json:
        emit_json({"key": key, "value": current})
        return
    lines = [f"[SETTINGS] Updated: {key} = {current}"]
    if key == "ai_stacking_mode" and current == "managed":
        lines += [
            "[SETTINGS] Managed mode enabled:",
            "  - AI sessions persist via resume tokens",
            "  - Work sessions persist across AI processes",
            "  - Stacking spawns subtasks with session cookies",
            "  - Breadcrumb calls validated with JSON contract",
        ]
    elif key == "ai_stacking_mode":
        lines.append("[SETTINGS] Hands-off mode: acode records work sessions; you run the engine.")
    _say(lines)


@settings_app.command("get")
def settings_get(
    key: Annotated[str, typer.Argument(help="The setting.")],
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print the value of one setting."""
    from acode.engine.config import SETTABLE

    config = _ws(workspace).config
    if key not in SETTABLE:
        from acode.errors import ConfigError

        raise ConfigError(
            f"{key}: not a setting of `acode settings`; they are {', '.join(SETTABLE)}",
            hint="the other keys are in .agent/config.yml (docs/configuration.md)",
        )
    value = getattr(config, key)
    if as_json:
        emit_json({"key": key, "value": value})
    else:
        _say([f"{key} = {value}"])


@settings_app.command("list")
def settings_list(workspace: WorkspaceOption = None, as_json: JsonOption = False) -> None:
    """Print every setting `acode settings` changes, with what it means."""
    from acode.engine.config import SETTABLE

    config = _ws(workspace).config
    values = {key: getattr(config, key) for key in SETTABLE}
    if as_json:
        emit_json(values)
    else:
        width = max(map(len, values))
        _say([f"{k:<{width}} = {v:<9} {SETTABLE[k]}" for k, v in values.items()])


# -- work ----------------------------------------------------------------------------------


def _runner(ws: Workspace) -> TurnRunner | None:
    """None in hands-off mode: acode records, the person runs the engine."""
    if ws.config.ai_stacking_mode == "handsoff":
        return None
    from acode.work.runner import turn_runner

    return turn_runner(ws)


def _started_json(started: Started) -> dict[str, Any]:
    data = {
        **started.wsession.to_dict(),
        "cookie": started.wsession.id,
        "turns": [
            {"how": how, "ok": t.ok, "session_id": t.session_id, "detail": t.detail, "text": t.text}
            for how, t in started.turns
        ],
    }
    if started.asked is not None:
        data["resumed_from"] = started.asked or None  # aider's "" is its chat history
    return data


def _started_lines(started: Started, verb: str) -> list[str]:
    w, task = started.wsession, started.task
    if verb == "Resuming":
        lines = [f"[WORK] Resuming work session: {w.id}", f"[WORK] Task: {task.id} ({task.title})"]
    else:
        lines = [f"[WORK] {verb} work session for task: {task.id} ({task.title})"]
        lines.append(f"[WORK] Work session ID: {w.id}")
    if w.parent_wsession_id:
        lines.append(f"[WORK] Parent work session: {w.parent_wsession_id}")
    lines.append(f"[WORK] Cookie: {w.id}")
    if verb == "Resuming":
        lines += _subtask_lines(w)
    for how, turn in started.turns:
        lines += _turn_lines(how, turn, started)
    if not started.turns:
        lines.append("[WORK] Hands-off mode: run your engine with this prompt, then record")
        lines.append(f"       breadcrumbs with --cookie {w.id}.")
    return lines


def _subtask_lines(w: WorkSession) -> list[str]:
    """The subtasks, as step 6 of the work-session runbook shows them on resume
    (docs/work-sessions.md, "Resuming")."""
    lines = []
    for status, label in (("completed", "completed"), ("active", "in progress")):
        ids = [s.task_id for s in w.subtasks if s.status == status]
        if ids:
            lines.append(f"[WORK] Subtasks {label}: {len(ids)} ({', '.join(ids)})")
    return lines or ["[WORK] Subtasks: none"]


def _turn_lines(how: str, turn: EngineTurn, started: Started) -> list[str]:
    asked = started.asked or "(its chat history)"
    failed = "none, the engine failed"  # the error that follows says why
    if how == "new":
        lines = [f"[WORK] AI session ID: {_engine_id(turn) if turn.ok else failed}"]
    elif how == "resumed":
        lines = [f"[WORK] AI session: {_engine_id(turn)} (resumed)"]
    elif how == "resume_failed":
        reason = f"AI session {asked} no longer available: " if turn.forgotten else ""
        lines = [
            f"[WORK] AI session: {asked}",
            "[WORK] Attempting resume... FAILED",
            f"[WORK] Error: {reason}{turn.detail}",
        ]
        if turn.forgotten:  # its text is the error above; the fallback follows
            return [*lines, ""]
    else:  # rebuilt
        lines = [] if started.asked is not None else ["[WORK] AI session: none recorded", ""]
        lines += [
            "[WORK] Fallback: new AI session, context rebuilt from the record",
            f"[WORK] New AI session ID: {_engine_id(turn) if turn.ok else failed}",
            f"[WORK] Cookie: {started.wsession.id} (unchanged)",
        ]
    if turn.text:
        lines += ["", *turn.text.splitlines()[-20:], ""]
    return lines


def _engine_id(turn: EngineTurn) -> str:
    return turn.session_id or "(the engine keeps no id)"


@work_app.command("task")
def work_task(
    task_id: TaskId,
    engine: Engine = None,
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Start a work session on a task: the engine starts with the task and the cookie."""
    from acode.work.prompts import start_prompt
    from acode.work.sessions import start_work

    ws = _ws(workspace)
    started = start_work(ws, task_id, _engine(ws, engine, "task"), _runner(ws))
    _show_started(started, "Starting", as_json, start_prompt)


def _engine(ws: Workspace, engine: str | None, command: str) -> str:
    import shlex

    from acode.domain.config import ENGINE_NAMES
    from acode.errors import UsageError

    chosen = ws.config.work_engine if engine is None else engine
    if chosen not in ENGINE_NAMES:
        raise UsageError(
            f"--engine {shlex.quote(chosen)}: unknown engine; "
            f"the engines are {', '.join(ENGINE_NAMES)}",
            hint=f"choose one of them; what each needs: acode work {command} --help",
        )
    return chosen


def _show_started(started: Started, verb: str, as_json: bool, prompt: Any) -> None:
    """Print what the command did; an engine whose last turn failed is an error, after
    its output (the work session stays, for `acode work resume`)."""
    if as_json:
        data = _started_json(started)
        if not started.turns:
            data["prompt"] = prompt(started.task, started.wsession)
        emit_json(data)
    else:
        lines = _started_lines(started, verb)
        if not started.turns:
            lines += ["", prompt(started.task, started.wsession)]
        _say(lines)
    if started.turns and not started.turns[-1][1].ok:
        from acode.errors import StepFailedError

        w = started.wsession
        raise StepFailedError(
            f"the engine failed: {started.turns[-1][1].detail}; work session {w.id} is kept",
            hint=f"retry once the cause is fixed: acode work resume {w.id}",
        )


@work_app.command("spawn")
def work_spawn(
    from_task: Annotated[str, typer.Option("--from-task", help="The parent task's id.")],
    title: Annotated[str, typer.Option("--title", help="The subtask's title.")],
    engine: Engine = None,
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Spawn a subtask of a task with an active work session: its own task file, work
    session, cookie and engine session, linked to the parent."""
    from acode.work.prompts import start_prompt
    from acode.work.sessions import spawn_work

    ws = _ws(workspace)
    chosen = None if engine is None else _engine(ws, engine, "spawn")
    started = spawn_work(ws, from_task, title, chosen, _runner(ws))
    if not as_json:
        _say(
            [f"[WORK] Spawning subtask from {from_task}", f"[WORK] Created task: {started.task.id}"]
        )
    _show_started(started, "Starting", as_json, start_prompt)


@work_app.command("resume")
def work_resume(
    wsession_id: WsessionId, workspace: WorkspaceOption = None, as_json: JsonOption = False
) -> None:
    """Resume the engine's recorded session; when the engine has forgotten it, start a new
    one with the context rebuilt from the task, breadcrumbs and subtasks."""
    from acode.work.prompts import rebuilt_prompt
    from acode.work.sessions import resume_work

    ws = _ws(workspace)
    started = resume_work(ws, wsession_id, _runner(ws))
    _show_started(started, "Resuming", as_json, rebuilt_prompt)


@work_app.command("close")
def work_close(
    wsession_id: WsessionId,
    summary: Summary = None,
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Close a work session: its task is done; a subtask's summary goes to the parent."""
    from acode.work.sessions import close_work

    closed = close_work(_ws(workspace), wsession_id, summary)
    if as_json:
        emit_json(closed.to_dict())
    else:
        _say(_closed_lines(closed))


def _closed_lines(closed: WorkSession) -> list[str]:
    lines = [
        f"[WORK SESSION] Task {closed.task_id} marked as completed.",
        f"[WORK SESSION] Work session {closed.id} closed.",
    ]
    if closed.parent_wsession_id:
        lines.append(
            f"[WORK SESSION] Summary breadcrumb sent to parent: {closed.parent_wsession_id}"
        )
    return lines


@work_app.command("list")
def work_list(workspace: WorkspaceOption = None, as_json: JsonOption = False) -> None:
    """List the work sessions, most recent first."""
    from acode.work.sessions import list_work_sessions

    sessions = list_work_sessions(_ws(workspace))
    lines = [
        f"{w.id}  {w.status:<6}  {w.task_id}  {w.engine:<7}  "
        f"{count(len(w.breadcrumbs), 'breadcrumb')}  {count(len(w.subtasks), 'subtask')}"
        for w in sessions
    ]
    _listing(
        [w.to_dict() for w in sessions] if as_json else lines,
        as_json,
        "No work sessions yet. Start one: acode work task task-001",
    )


@work_app.command("show")
def work_show(
    wsession_id: WsessionId, workspace: WorkspaceOption = None, as_json: JsonOption = False
) -> None:
    """Show a work session: engine sessions, breadcrumbs, subtasks."""
    from acode.work.sessions import work_session

    w = work_session(_ws(workspace), wsession_id)
    if as_json:
        emit_json(w.to_dict())
        return
    lines = [
        f"Work session: {w.id} ({w.status})",
        f"Task:         {w.task_id}",
        f"Engine:       {w.engine}, session {w.ai_session_id or 'none yet'}",
        f"Directory:    {w.cwd}",
    ]
    lines += [
        f"  engine session {e.id or '-'} ({e.how}, {e.started_at})" for e in w.engine_sessions
    ]
    lines += [f"  {b.id} [{b.kind}] {b.message}" for b in w.breadcrumbs]
    lines += [f"  subtask {s.task_id} ({s.status}): {s.summary or '-'}" for s in w.subtasks]
    _say(lines)


# -- breadcrumbs ---------------------------------------------------------------------------

Cookie = Annotated[
    str | None,
    typer.Option(
        "--cookie", help="The cookie of the work session (its id), as its prompt gives it."
    ),
]


def _expected_cookie() -> str | None:
    from acode.work.sessions import COOKIE_ENV

    return os.environ.get(COOKIE_ENV) or None


@breadcrumb_app.command("add")
def breadcrumb_add(
    message: Annotated[
        str, typer.Option("--message", help='Text, or JSON {"message", "kind", "files", "data"}.')
    ],
    cookie: Cookie = None,
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Record a breadcrumb in the active work session the cookie names."""
    from acode.work.inbox import INBOX_ENV, add_through
    from acode.work.sessions import add_breadcrumb

    inbox = os.environ.get(INBOX_ENV)
    if inbox:  # inside an engine's turn: the acode running it records it (it holds the key)
        crumb = add_through(inbox, cookie, message)
    else:
        crumb = add_breadcrumb(_ws(workspace), cookie, message, expected=_expected_cookie())
    if as_json:
        emit_json(crumb.to_dict())
        return
    _say(
        [
            f"[WSESSION] Breadcrumb added to {cookie}",
            "[WSESSION] Validation: Cookie matches active session ✓",
            "[WSESSION] Validation: JSON contract satisfied ✓",
            f"[WSESSION] Breadcrumb ID: {crumb.id}",
        ]
    )


@breadcrumb_app.command("list")
def breadcrumb_list(
    cookie: Cookie = None, workspace: WorkspaceOption = None, as_json: JsonOption = False
) -> None:
    """List the breadcrumbs of the active work session the cookie names."""
    from acode.work.inbox import INBOX_ENV, list_through
    from acode.work.sessions import list_breadcrumbs

    inbox = os.environ.get(INBOX_ENV)
    if inbox:
        crumbs = list_through(inbox, cookie)
    else:
        w = list_breadcrumbs(_ws(workspace), cookie, expected=_expected_cookie())
        crumbs, cookie = list(w.breadcrumbs), w.id
    if as_json:
        emit_json([b.to_dict() for b in crumbs])
    elif not crumbs:
        _say([f"No breadcrumbs in {cookie} yet."])
    else:
        _say([f"{b.id}  {b.timestamp}  [{b.kind}] {b.message}" for b in crumbs])
