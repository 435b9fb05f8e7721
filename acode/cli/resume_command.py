"""`acode resume`: choose the session, show what will happen, ask what the mode allows,
then run the rest of the plan."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from acode.cli.console import err_console, keyboard, out_console
from acode.cli.views import environment_lines, print_preview
from acode.errors import NothingToResumeError, UsageError
from acode.resume.listing import session_position
from acode.resume.modes import Candidate, Mode, candidates, default_mode
from acode.resume.service import ChangedFilesAction, ResumePreview, preview_resume
from acode.runtime.inspection import read_store

if TYPE_CHECKING:
    from acode.runtime.observer import ApprovalRequest
    from acode.runtime.steps.base import InProgressStrategy
    from acode.store.sqlite_store import SqliteStore

__all__ = ["ResumeRequest", "run_resume"]


@dataclass(frozen=True)
class ResumeRequest:
    workspace: Path
    session_id: str | None
    dry_run: bool
    strategy: InProgressStrategy | None
    force: bool
    changed_files_action: ChangedFilesAction | None
    verify: bool
    mode: Mode | None
    as_json: bool


def run_resume(req: ResumeRequest) -> int:
    on_terminal = sys.stdin.isatty()
    mode = req.mode or default_mode(on_terminal)
    if mode is Mode.PREFLIGHT and not on_terminal:
        raise UsageError(
            "--mode preflight needs a terminal: it goes on only when you type 'proceed'",
            hint="use --mode autopilot in scripts, or --dry-run to see the report",
        )
    session_id = req.session_id or _pick(req.workspace, mode, req.as_json)
    if session_id is None:
        out_console().print("Nothing resumed.")
        return 0
    if req.dry_run:
        preview = preview_resume(session_id, req.workspace, verify=req.verify)
        print_preview(preview, dry_run=True, as_json=req.as_json)
        return 0
    action = req.changed_files_action
    if mode is Mode.PREFLIGHT:
        if not _preflight(preview_resume(session_id, req.workspace, verify=req.verify)):
            out_console().print("Not resumed; nothing was changed.")
            return 0
        action = "continue"  # the person has seen every change and said proceed
    return _resume(req, session_id, mode, action)


def _resume(
    req: ResumeRequest, session_id: str, mode: Mode, action: ChangedFilesAction | None
) -> int:
    # What runs the rest of the session loads only here: --dry-run and the prompts before
    # it never run a step.
    from acode.cli.driver import drive, drive_plan, terminal_approver
    from acode.cli.progress import choose_observer
    from acode.cli.prompts import changed_files_prompt, strategy_prompt
    from acode.resume.service import resume_session
    from acode.runtime.interrupts import Interrupts

    shown: list[ResumePreview] = []

    def show(preview: ResumePreview) -> None:
        if preview.plan is None and preview.agent is None:
            raise UsageError(
                f"session {preview.row.short_id} was started by a program through the library",
                hint=f"run that program again; it continues with "
                f"acode.resume_session({preview.row.short_id!r})",
            )
        shown.append(preview)
        print_preview(preview, dry_run=False, as_json=req.as_json)

    observer = choose_observer(req.as_json)
    approver = terminal_approver(observer, req.workspace) if mode is not Mode.AUTOPILOT else _nobody
    with Interrupts().installed() as interrupts:
        session = resume_session(
            session_id,
            req.workspace,
            observer=observer,
            approver=approver,
            interrupts=interrupts,
            strategy=req.strategy,
            on_preview=show,
            force=req.force,
            changed_files_action=action,
            ask_about_changes=changed_files_prompt(req.workspace)
            if mode is Mode.INTERACTIVE
            else None,
            verify=req.verify,
            strategy_prompt=strategy_prompt(observer) if mode is not Mode.AUTOPILOT else None,
        )
        preview = shown[0]
        if preview.agent is not None:
            from acode.cli.agent_command import agent_body

            return drive(session, agent_body(preview.agent.task, req.as_json), as_json=req.as_json)
        assert preview.plan is not None
        return drive_plan(session, preview.plan, as_json=req.as_json)


def _nobody(request: ApprovalRequest) -> bool | None:
    """Autopilot never asks: an approval without a decision stops the run (exit 20)."""
    return None


def _pick(workspace: Path, mode: Mode, as_json: bool) -> str | None:
    with read_store(workspace) as store:
        found = candidates(store, time.time_ns() // 1000) if store is not None else []
        if not found:
            raise NothingToResumeError(
                "no resumable session in this workspace",
                hint='start one with `acode run PLAN.yaml` or `acode run "TASK"`; '
                "`acode session list` shows all",
            )
        if mode is Mode.AUTOPILOT or as_json:
            return found[0].row.id
        assert store is not None
        # Only for the list a person reads: where each stands takes its plan.
        places = {c.row.id: _place(store, c) for c in found}
    return _choose(found, places)


def _place(store: SqliteStore, c: Candidate) -> str:
    position = session_position(store, c.row)
    return position.describe() if position is not None else c.where


def _describe(number: int | None, c: Candidate, where: str) -> list[str]:
    head = f"{number}. " if number is not None else ""
    lines = [
        f"  {head}{c.row.short_id} - {c.row.state} - {c.row.title!r}",
        f"     Paused at: {where}",
        f"     Interrupted: {_ago(c.age.seconds)} ({c.age.age.value})",
    ]
    if c.age.advice:
        lines.append(f"     Note: {c.age.advice}")
    return lines


def _ago(seconds: int) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} seconds ago"


def _choose(found: list[Candidate], places: dict[str, str]) -> str | None:
    from rich.prompt import Confirm, Prompt

    console = out_console()
    if len(found) == 1:
        console.print("Found 1 resumable session:")
        for line in _describe(None, found[0], places[found[0].row.id]):
            console.print(line, markup=False)
        ok = Confirm.ask(
            "Resume this session?", default=True, console=err_console(), stream=keyboard()
        )
        return found[0].row.id if ok else None
    console.print(f"Found {len(found)} resumable sessions (most recent first):")
    for number, candidate in enumerate(found, start=1):
        for line in _describe(number, candidate, places[candidate.row.id]):
            console.print(line, markup=False)
    choices = [str(n) for n in range(1, len(found) + 1)] + ["none"]
    answer = Prompt.ask(
        "Resume which one?", choices=choices, default="1", console=err_console(), stream=keyboard()
    )
    return None if answer == "none" else found[int(answer) - 1].row.id


def _preflight(preview: ResumePreview) -> bool:
    """The full report, file by file, and the whole remaining plan; then 'proceed'."""
    from rich.prompt import Prompt

    console = out_console()
    print_preview(preview, dry_run=True, as_json=False)
    env = preview.environment
    if env is not None:
        changes = {c.path: c.change.value for c in env.changed}
        console.print(f"Files the session touched ({env.files_checked}):")
        for path in env.checked:
            state = changes.get(path, "unchanged")
            console.print(f"  {'✓' if path not in changes else '✗'} {path}: {state}", markup=False)
    c, plan = preview.continuation, preview.plan
    if plan is not None and c is not None:
        remaining = {c.in_progress, *c.pending_steps}
        console.print("Remaining plan:")
        for number, task in enumerate(plan.tasks, start=1):
            steps = [s for s in task.steps if s.id in remaining]
            if steps:
                console.print(f"  Task {number}: {task.title}", markup=False)
                for step in steps:
                    marker = "(in progress) " if step.id == c.in_progress else ""
                    console.print(f"    - {marker}{step.id}: {step.title}", markup=False)
    if env is not None and env.problems():
        for line in environment_lines(preview):
            console.print(line, markup=False)
    answer = Prompt.ask(
        "Type 'proceed' to resume, anything else to stop", console=err_console(), stream=keyboard()
    )
    return answer.strip().lower() == "proceed"
