"""`acode approve`: show what a waiting approval gates, then record the decision.

On a terminal the person is asked (y / n / v / ?) after seeing it. Without one (a
script), what it gates is printed on stderr and the decision recorded as the options say.
Either way the decision is recorded only if what it gates is still what was shown.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from acode.cli.approval_prompt import ask_approval, show_gated
from acode.cli.console import emit_json, err_console, out_console
from acode.errors import EXIT_INTERRUPTED
from acode.operations.decide import Decision, PendingApproval, decide_approval, pending_approval
from acode.security.redaction import redact, redact_json

__all__ = ["approve_command"]


def approve_command(
    session_id: str | None,
    workspace: Path,
    *,
    step: str | None,
    deny: bool,
    dry_run: bool,
    subject_hash: str | None,
    as_json: bool,
) -> None:
    if as_json and not dry_run:
        decision = decide_approval(
            session_id, workspace, step=step, approved=not deny, shown=subject_hash
        )
        emit_json(_as_json(decision.approval, decision))
        return
    pending = pending_approval(session_id, workspace, step=step)
    if as_json:
        emit_json(_as_json(pending, None))
        return
    console = out_console() if dry_run else err_console()
    console.print(
        f"Session {pending.short_id} waits for approval of step {pending.step_id!r}: "
        f"{redact(pending.question)}",
        markup=False,
    )
    show_gated(pending.gated, console)
    if dry_run:
        out_console().print(
            f"Nothing recorded (--dry-run). Decide with: acode approve {pending.short_id} "
            f"--subject-hash {pending.subject_hash} (add --deny to refuse)",
            markup=False,
        )
        return
    approved = not deny
    # A --subject-hash says the decision was made on what a tool showed: not asked again.
    if approved and subject_hash is None and sys.stdin.isatty():
        try:
            answer = ask_approval(
                pending.step_id,
                pending.question,
                pending.gated,
                denied="the session is cancelled when it is resumed",
                ctrl_c="leave without recording a decision",
            )
        except KeyboardInterrupt:
            answer = None
        if answer is None:  # Ctrl+C, or the end of input
            err_console().print("\nNothing recorded.")
            raise typer.Exit(EXIT_INTERRUPTED)
        approved = answer
    decision = decide_approval(
        session_id,
        workspace,
        step=pending.step_id,
        approved=approved,
        shown=subject_hash or pending.subject_hash,
    )
    verdict = "Approved" if decision.approved else "Denied"
    out_console().print(
        f"{verdict}: {redact(pending.question)} (session {pending.short_id}, step "
        f"{pending.step_id}).\nContinue with: acode resume {pending.short_id}",
        markup=False,
    )


def _as_json(pending: PendingApproval, decision: Decision | None) -> dict[str, Any]:
    view = pending.gated
    gated = (
        None
        if view is None
        else {"step": view.step, "heading": view.heading, "content": view.text, "files": view.files}
    )
    return {
        "session": pending.session_id,
        "step": pending.step_id,
        "question": redact(pending.question),
        "recorded": decision is not None,
        "approved": None if decision is None else decision.approved,
        "by": None if decision is None else decision.by,
        "subject_hash": pending.subject_hash,
        "gated": redact_json(gated),
    }
