"""Runs a plan through the Session API, step by step, in order.

The same function serves a fresh run and a resume: on a resumed session, the
completed steps return their recorded results and the run continues after them.
"""

from __future__ import annotations

from acode.domain.kinds import StepKind
from acode.domain.plan import Plan, StepSpec
from acode.domain.states import SessionState
from acode.engine.approval_view import approval_subject
from acode.engine.session import Session
from acode.engine.steps.python_step import import_step_function

__all__ = ["run_plan"]


def run_plan(session: Session, plan: Plan) -> SessionState:
    """Run every step; returns the final state (COMPLETED, or CANCELLED when an
    approval was denied). Pauses, pending approvals and failures propagate."""
    steps = plan.steps()
    for index, spec in enumerate(steps):
        gated = steps[index + 1] if index + 1 < len(steps) else None
        if not _run_step(session, spec, gated):
            session.cancel(f"approval denied at step {spec.id}")
            return SessionState.CANCELLED
    session.complete()
    return SessionState.COMPLETED


def _run_step(session: Session, spec: StepSpec, gated: StepSpec | None) -> bool:
    task, title, ws = spec.task_id, spec.title, session.workspace
    match spec.kind:
        case StepKind.READ:
            session.read(spec.id, spec.target, task=task, title=title)
        case StepKind.WRITE:
            session.write(spec.id, spec.target, spec.content or "", task=task, title=title)
        case StepKind.EDIT:
            session.edit(
                spec.id, spec.target, spec.old or "", spec.new or "", task=task, title=title
            )
        case StepKind.RUN:
            session.run(
                spec.id,
                spec.target,
                idempotent=spec.idempotent,
                timeout=spec.timeout,
                paths=spec.paths,
                check=spec.check,
                task=task,
                title=title,
            )
        case StepKind.APPROVE:
            # The person decides on what they are shown of the step the approval gates
            # (the diff a commit records, the command a run step runs, ...), and the
            # decision is bound to exactly that: when it changes, a recorded decision no
            # longer applies and the question is asked again.
            subject = approval_subject(ws, gated)
            return session.approve(spec.id, spec.target, subject=subject, task=task, title=title)
        case StepKind.MODEL:
            session.model(spec.id, spec.target, task=task, title=title)
        case StepKind.PYTHON:
            fn = import_step_function(spec.target, session.workspace)
            session.step(spec.id, fn, task=task, title=title)
        case StepKind.COMMIT:
            session.commit(spec.id, spec.target, task=task, title=title)
    return True
