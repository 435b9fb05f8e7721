"""Running a session from the CLI, shared by `run` and `resume` and by plan and agent
sessions: progress, interruption, approvals and the exit status."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from acode.cli.console import count, emit_json, emit_started, err_console, out_console
from acode.cli.progress import RichObserver, quiet_screen
from acode.domain.plan import Plan
from acode.domain.states import TERMINAL, SessionState
from acode.engine.observer import ApprovalRequest, Approver, Observer
from acode.engine.plan_runner import run_plan
from acode.engine.session import Session
from acode.errors import (
    EXIT_APPROVAL_PENDING,
    EXIT_INTERRUPTED,
    AcodeError,
    ApprovalPending,
    EnvironmentFaultError,
    ModelError,
    PauseRequested,
    SessionTakenOverError,
    StepFailedError,
    StorageError,
)
from acode.security.redaction import redact

if TYPE_CHECKING:
    from acode.resume.modes import StartMode

__all__ = ["drive", "drive_plan", "never_asks", "start_plan", "terminal_approver"]


def never_asks(request: ApprovalRequest) -> bool | None:
    """Autopilot never asks: an approval without a decision stops the run (exit 20)."""
    return None


def terminal_approver(observer: Observer, workspace: Path) -> Approver:
    """Shows what the approval gates and asks on the terminal, with the progress display
    out of the way; answers None when there is no terminal to ask on, at the end of
    input, and when what the approval gates changed while the person decided (then the
    session waits, and a resume shows it again)."""

    def ask(request: ApprovalRequest) -> bool | None:
        if not sys.stdin.isatty():
            return None
        from acode.cli.approval_prompt import ask_approval, show_gated
        from acode.engine.approval_view import changed_since_shown, view_of

        view = view_of(request.subject)
        with quiet_screen(observer):
            # Without a view the question is all there is: an agent's plan was shown as
            # it was made, and the last step of a plan gates nothing.
            if view is not None:
                show_gated(view)
            answer = ask_approval(
                request.step_id,
                request.question,
                view,
                denied="the session stops, CANCELLED",
                ctrl_c="pause the session without deciding; acode resume asks again",
            )
            if answer and changed_since_shown(workspace, request.subject) is not None:
                err_console().print(
                    "What this approval gates changed while you were deciding (the work "
                    "tree changed): your answer was not recorded.",
                    markup=False,
                )
                return None
        return answer

    return ask


def start_plan(
    plan: Plan, ws: Path, *, as_json: bool, mode: StartMode, plan_file: Path | None = None
) -> int:
    """`acode run PLAN`: a new session of ``plan`` (read from ``plan_file``), run to its
    end or to a stop."""
    from acode.engine.interrupts import Interrupts
    from acode.engine.lifecycle import start_session
    from acode.resume.modes import Mode

    total = len(plan.steps())
    from acode.cli.progress import choose_observer

    observer = choose_observer(as_json)
    with Interrupts().installed() as interrupts:
        session = start_session(
            plan.title,
            ws,
            plan=plan,
            plan_file=plan_file,
            observer=observer,
            approver=never_asks if mode.mode is Mode.AUTOPILOT else terminal_approver(observer, ws),
            interrupts=interrupts,
            mode=mode.mode.value,
            mode_chosen=mode.chosen,
        )
        if as_json:
            emit_started(
                {"event": "started", "id": session.id, "title": plan.title, "total_steps": total}
            )
        else:
            out_console().print(
                f"Session {session.short_id} started: {plan.title} "
                f"({len(plan.tasks)} tasks, {total} steps)",
                markup=False,
            )
        return drive_plan(session, plan, as_json=as_json)


def drive_plan(session: Session, plan: Plan, *, as_json: bool) -> int:
    """Run the plan to its end or to a stop; returns the exit status."""
    return drive(session, lambda s: run_plan(s, plan), as_json=as_json)


def drive(session: Session, body: Callable[[Session], SessionState], *, as_json: bool) -> int:
    """Run ``body`` (which returns the final state) to its end or to a stop; returns the
    exit status and closes the session."""
    try:
        code = _drive(session, body, as_json)
    finally:
        session.close()
    if session.state in TERMINAL:
        _apply_retention(session)
    return code


def _apply_retention(session: Session) -> None:
    """The workspace's retention: settings, applied once a session has ended. Whatever
    goes wrong in it is said and logged; the session's own outcome stands."""
    from acode.operations.prune import apply_retention

    try:
        report = apply_retention(session.workspace, ended=session.id)
    except (AcodeError, OSError) as problem:
        err_console().print(
            f"Retention: nothing was pruned ({problem}); see: acode session prune --dry-run",
            markup=False,
        )
        return
    if report is not None and report.selection.removals:
        removed = report.selection.removals
        err_console().print(
            f"Retention: pruned {count(len(removed), 'ended session')} "
            f"({report.selection.freed:,} bytes) as .agent/config.yml's retention: says.",
            markup=False,
        )


def _drive(session: Session, body: Callable[[Session], SessionState], as_json: bool) -> int:
    short = session.short_id
    observer = session.observer
    try:
        try:
            final = body(session)
        finally:
            if isinstance(observer, RichObserver):
                observer.stop()
    except (PauseRequested, KeyboardInterrupt):
        session.pause("interrupted")
        return _report(
            session,
            as_json,
            EXIT_INTERRUPTED,
            f"Paused session {short}; {count(session.steps_completed, 'step')} done. "
            f"Resume with: acode resume {short}",
        )
    except ApprovalPending as pending:
        return _report(
            session,
            as_json,
            EXIT_APPROVAL_PENDING,
            f"Session {short} is waiting for approval of step {pending.step_id!r}: "
            f"{pending.question}\n  approve: acode approve {short}   deny: acode approve "
            f"{short} --deny\n  then:    acode resume {short}",
        )
    except ModelError as unavailable:
        session.pause(f"model unavailable: {unavailable.message}")
        return _report(
            session,
            as_json,
            1,
            f"Paused session {short}: {unavailable}\n"
            f"Resume with: acode resume {short} (the unanswered request is sent again)",
        )
    except SessionTakenOverError as lost:
        # The session is another process's now: this one records nothing, not even a
        # pause (the store would refuse it).
        return _report(
            session, as_json, lost.exit_code, f"Stopped session {short} ({lost.code.value}): {lost}"
        )
    except StepFailedError as failure:
        session.fail(failure.message)
        return _report(session, as_json, 1, f"Session {short} FAILED: {failure}")
    except (StorageError, EnvironmentFaultError) as fault:
        # The machine took no more writes (a full disk, say): the step that met it has no
        # outcome and runs again on resume; a pause is recorded when it still can be.
        with contextlib.suppress(StorageError):
            session.pause(f"stopped by the environment: {fault.message}")
        return _report(
            session,
            as_json,
            1,
            f"Stopped session {short} ({fault.code.value}): {fault.message}\n"
            + (f"{fault.hint}\n" if fault.hint else "")
            + f"Once the cause is gone, resume with: acode resume {short}",
        )
    if final is SessionState.CANCELLED:
        return _report(session, as_json, 1, f"Approval denied: session {short} cancelled.")
    done = session.steps_completed
    return _report(session, as_json, 0, f"Session {short} completed: {count(done, 'step')} done.")


def _report(session: Session, as_json: bool, code: int, message: str) -> int:
    if as_json:
        emit_json(
            {
                "event": "session",
                "id": session.id,
                "state": session.state.value,
                "steps_completed": session.steps_completed,
                "total_steps": session.total_steps,
                "exit_code": code,
                "message": redact(message),
            }
        )
    else:
        console = out_console() if code == 0 else err_console()
        console.print(redact(message), markup=False)
    return code
