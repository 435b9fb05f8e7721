"""`acode resume`: choose the session, show what will happen, ask what the mode allows,
then run the rest of the plan (or start it over)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from acode.cli.console import err_console, keyboard, out_console, print_lines
from acode.cli.resume_menu import (
    ask_next,
    ask_restart,
    plan_lines,
    risk_lines,
    trouble_hint,
    trouble_menu,
)
from acode.cli.views import environment_lines, print_preview
from acode.domain.age import ago_text
from acode.engine.catalog import find_session
from acode.errors import (
    AcodeError,
    CheckpointError,
    ConfigError,
    NothingToResumeError,
    TooOldForAutopilotError,
    UsageError,
)
from acode.operations.inspection import read_store
from acode.resume.modes import (
    AutopilotVerdict,
    Candidate,
    Mode,
    candidates,
    default_mode,
    judge_for_autopilot,
    log_autopilot,
)
from acode.resume.service import (
    ChangedFilesAction,
    ResumePreview,
    log_refusal,
    preview_in,
    preview_resume,
    refuse_problems,
)
from acode.system.workspace import StatePaths

if TYPE_CHECKING:
    from acode.engine.steps.base import InProgressStrategy
    from acode.store.base import EventStore
    from acode.store.records import SessionRow

__all__ = ["ResumeRequest", "run_resume"]


class ResumeRequest(NamedTuple):
    """What the command line asks of a resume (read by the parser, or by the entry point
    for a plain dry run)."""

    workspace: Path
    session_id: str | None
    dry_run: bool
    strategy: InProgressStrategy | None
    force: bool
    changed_files_action: ChangedFilesAction | None
    verify: bool
    mode: Mode | None
    as_json: bool
    any_age: bool = False


def run_resume(req: ResumeRequest) -> int:
    on_terminal = sys.stdin.isatty()
    if req.mode is Mode.PREFLIGHT and not on_terminal:
        raise UsageError(
            "--mode preflight needs a terminal: it goes on only when you type 'proceed'",
            hint="use --mode autopilot in scripts, or --dry-run to see the report",
        )
    mode = req.mode or default_mode(on_terminal)
    can_ask = on_terminal and not req.as_json
    if req.dry_run:
        return _dry_run(req, mode, can_ask=can_ask)
    session_id = req.session_id
    if session_id is None:
        with read_store(req.workspace) as store:
            session_id = _pick(store, mode, req.as_json)
    if session_id is None:
        out_console().print("Nothing resumed.")
        return 0
    try:
        return _resume_chosen(req, session_id, on_terminal=on_terminal, can_ask=can_ask)
    except CheckpointError as untrusted:
        return _untrusted(req.workspace, session_id, untrusted, can_ask=can_ask)


def _dry_run(req: ResumeRequest, mode: Mode, *, can_ask: bool) -> int:
    """What the resume would do, shown: no lock taken, nothing written."""
    if req.session_id is not None:
        return _show(req, req.session_id, None, can_ask=can_ask)
    with read_store(req.workspace) as store:
        session_id = _pick(store, mode, req.as_json)
        if session_id is None:
            out_console().print("Nothing resumed.")
            return 0
        return _show(req, session_id, store, can_ask=can_ask)


def _show(req: ResumeRequest, session_id: str, store: EventStore | None, *, can_ask: bool) -> int:
    """The dry run's preview of ``session_id``, read from ``store`` when the session was
    found in it (the store is opened once)."""
    try:
        if store is None:
            preview = preview_resume(session_id, req.workspace, verify=req.verify)
        else:
            preview = preview_in(store, req.workspace, session_id, verify=req.verify)
    except CheckpointError as untrusted:
        return _untrusted(req.workspace, session_id, untrusted, can_ask=can_ask)
    print_preview(preview, dry_run=True, as_json=req.as_json)
    return 0


def _untrusted(
    workspace: Path, session_id: str, untrusted: CheckpointError, *, can_ask: bool
) -> int:
    """A history that cannot be trusted: its options said, or asked on a terminal."""
    row = _row(workspace, session_id)
    short = row.short_id if row is not None else session_id
    error = trouble_hint(untrusted, short)
    if can_ask and error is not untrusted:
        return trouble_menu(workspace, session_id, short, error)
    raise error from untrusted


def _resume_chosen(req: ResumeRequest, session_id: str, *, on_terminal: bool, can_ask: bool) -> int:
    from acode.system.locks import is_locked

    row = _row(req.workspace, session_id)
    if row is not None and is_locked(StatePaths(req.workspace).locks, row.id):
        # Another process runs it: the resume's own lock check names the holder, at once.
        return _resume(req, row.id, req.mode or default_mode(on_terminal), None)
    preview = _checked(req, session_id, verify=req.verify)
    _refuse_library(preview)
    recorded = Mode(preview.start_mode) if preview.start_mode in set(Mode) else None
    mode = req.mode or recorded or default_mode(on_terminal)
    if mode is Mode.AUTOPILOT:
        verdict = judge_for_autopilot(
            preview,
            any_age=req.any_age,
            # --force goes past changed files too, unless --abort-on-changes says stop.
            continue_on_changes=req.changed_files_action == "continue"
            or (req.force and req.changed_files_action != "abort"),
            force=req.force,
        )
        if verdict.safe:
            log_autopilot(req.workspace, preview, verdict, "resume")
            return _resume(req, session_id, mode, req.changed_files_action)
        if not can_ask:
            log_autopilot(req.workspace, preview, verdict, "stopped")
            if verdict.too_old:
                raise _too_old(preview, verdict)
            # The resume's own checks stop it, with every change named and logged.
            return _resume(req, session_id, mode, req.changed_files_action)
        log_autopilot(req.workspace, preview, verdict, "interactive")
        out_console().print(
            f"Autopilot does not resume session {preview.row.short_id} on its own: "
            + "; ".join(verdict.problems)
            + ". Switching to interactive mode.",
            markup=False,
        )
        mode = Mode.INTERACTIVE
    if mode is Mode.PREFLIGHT:
        if not on_terminal:
            raise UsageError(
                f"session {preview.row.short_id} was started in preflight mode (acode run "
                "--mode preflight), which needs a terminal: it goes on only when you type "
                "'proceed'",
                hint=f"resume it on a terminal, or here with: acode resume {preview.row.short_id} "
                "--mode autopilot",
            )
        if not req.verify:  # preflight checks the whole history, as --verify does
            preview = _checked(req, session_id, verify=True)
        if not _preflight(preview):
            out_console().print("Not resumed; nothing was changed.")
            return 0
        # The person has seen every change and said proceed.
        return _resume(req, session_id, mode, "continue")
    if mode is Mode.INTERACTIVE and can_ask:
        return _interactive(req, session_id, preview)
    return _resume(req, session_id, mode, req.changed_files_action)


def _refuse_library(preview: ResumePreview) -> None:
    """A program's session continues in that program, before any question is asked."""
    if preview.plan is None and preview.agent is None:
        raise UsageError(
            f"session {preview.row.short_id} was started by a program through the library",
            hint=f"run that program again; it continues with "
            f"acode.resume_session({preview.row.short_id!r})",
        )


def _row(workspace: Path, session_id: str) -> SessionRow | None:
    """The session's row, if the id names one (else the preview says why not)."""
    with read_store(workspace) as store:
        if store is None:
            return None
        try:
            return find_session(store, session_id)
        except AcodeError:
            return None


def _too_old(preview: ResumePreview, verdict: AutopilotVerdict) -> AcodeError:
    """Autopilot without a terminal, on a session interrupted a day ago or more: the
    reason, and the command that resumes anyway."""
    short = preview.row.short_id
    return TooOldForAutopilotError(
        f"autopilot does not resume session {short} on its own: {'; '.join(verdict.problems)}",
        hint=f"look first: acode resume --dry-run {short}; then resume it on a terminal "
        f"(acode resume {short}) or here with: acode resume {short} --mode autopilot "
        "--any-age; nothing was changed",
    )


def _checked(req: ResumeRequest, session_id: str, *, verify: bool) -> ResumePreview:
    """The preview a resume decides on; a refusal is logged as the resume's would be."""
    try:
        preview = preview_resume(session_id, req.workspace, verify=verify)
        # Refused at once whatever the mode: the resume's own checks would wait for a
        # silent model server all over again. The preview checked the model that the
        # configuration names now, the resume the recorded one unless --force: the same
        # when nothing changed.
        env = preview.environment
        if env is not None and (not env.config or req.force):
            refuse_problems(preview)
        return preview
    except AcodeError as refused:
        paths = StatePaths(req.workspace)
        # As the resume's own: an unreadable configuration is not a resume refused, and
        # no log creates acode's state where there is none.
        if paths.db.exists() and not isinstance(refused, ConfigError):
            log_refusal(paths, session_id, refused)
        raise


def _interactive(req: ResumeRequest, session_id: str, preview: ResumePreview) -> int:
    """The plan, then resume, start over, view details or abort."""
    print_lines(plan_lines(preview))
    while True:
        answer = ask_next()
        if answer == "r":
            return _resume(req, session_id, Mode.INTERACTIVE, req.changed_files_action)
        if answer == "v":
            print_preview(preview, dry_run=True, as_json=False)
        elif answer == "s" and ask_restart(preview):
            return _restart(req, preview)
        elif answer == "a":
            out_console().print("Nothing resumed.")
            return 0


def _restart(req: ResumeRequest, preview: ResumePreview) -> int:
    """Start over: the session discarded (its history stays), a new one from the same
    recorded plan or task. Files are left as they are: the new session runs every step
    on them again."""
    from acode.cli import inspect
    from acode.resume.modes import StartMode

    recorded = preview.start_mode
    mode = (
        StartMode(mode=Mode(recorded), chosen=True)
        if recorded
        else StartMode(mode=Mode.INTERACTIVE, chosen=False)
    )
    inspect.session_discard(req.workspace, preview.row.id, False)
    if preview.plan is not None:
        from acode.cli.driver import start_plan

        return start_plan(preview.plan, req.workspace, as_json=req.as_json, mode=mode)
    from acode.cli.agent_command import AgentRequest, run_agent_command
    from acode.engine.lifecycle import open_workspace

    assert preview.agent is not None
    request = AgentRequest(
        workspace=req.workspace,
        task=preview.agent.task,
        overrides=preview.agent.overrides,
        as_json=req.as_json,
        mode=mode,
    )
    return run_agent_command(request, open_workspace(req.workspace).config)


def _resume(
    req: ResumeRequest, session_id: str, mode: Mode, action: ChangedFilesAction | None
) -> int:
    # What runs the rest of the session loads only here: --dry-run and the prompts before
    # it never run a step.
    from acode.cli.driver import drive, drive_plan, never_asks, terminal_approver
    from acode.cli.progress import choose_observer
    from acode.cli.prompts import changed_files_prompt, strategy_prompt
    from acode.engine.interrupts import Interrupts
    from acode.resume.service import resume_session

    shown: list[ResumePreview] = []

    def show(preview: ResumePreview) -> None:
        _refuse_library(preview)
        shown.append(preview)
        print_preview(preview, dry_run=False, as_json=req.as_json)

    observer = choose_observer(req.as_json)
    approver = (
        terminal_approver(observer, req.workspace) if mode is not Mode.AUTOPILOT else never_asks
    )
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
            mode=mode.value,
        )
        preview = shown[0]
        if preview.agent is not None:
            from acode.cli.agent_command import agent_body

            return drive(session, agent_body(preview.agent.task, req.as_json), as_json=req.as_json)
        assert preview.plan is not None
        return drive_plan(session, preview.plan, as_json=req.as_json)


def _pick(store: EventStore | None, mode: Mode, as_json: bool) -> str | None:
    """The session to resume of the workspace's ``store`` (None: none was ever recorded):
    the most recent, or the one a person chooses; None when they choose none."""
    found = candidates(store, time.time_ns() // 1000) if store is not None else []
    if not found:
        raise NothingToResumeError(
            "no resumable session in this workspace",
            hint='start one with `acode run PLAN.yaml` or `acode run "TASK"`; '
            "`acode session list` shows all",
        )
    if mode is Mode.AUTOPILOT or as_json or len(found) == 1:
        # One session goes on to its plan and the question of what to do with it
        # (``_interactive``).
        return found[0].row.id
    assert store is not None
    # Only for the list a person reads: where each stands takes its plan.
    places = {c.row.id: _place(store, c) for c in found}
    return _choose(found, places)


def _place(store: EventStore, c: Candidate) -> str:
    from acode.resume.listing import session_position

    position = session_position(store, c.row)
    return position.describe() if position is not None else c.where


def _describe(number: int, c: Candidate, where: str) -> list[str]:
    lines = [
        f"  {number}. {c.row.short_id} - {c.row.state} - {c.row.title!r}",
        f"     Paused at: {where}",
        f"     Interrupted: {ago_text(c.age.seconds)} ({c.age.age.value})",
    ]
    if c.age.advice:
        lines.append(f"     Note: {c.age.advice}")
    return lines


def _choose(found: list[Candidate], places: dict[str, str]) -> str | None:
    from rich.prompt import Prompt

    console = out_console()
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
    """The full report, file by file, the age and the risks, the whole history verified,
    and the whole remaining plan; then 'proceed'."""
    from rich.prompt import Prompt

    console = out_console()
    print_preview(preview, dry_run=True, as_json=False, verdict=False)
    console.print(
        f"  ✓ Integrity: all {preview.summary.seq} events verified from the first (--verify)",
        markup=False,
    )
    print_lines(risk_lines(preview))
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
