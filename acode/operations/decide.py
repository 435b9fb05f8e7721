"""`acode approve`: show what a waiting approval gates, and record a person's decision.

For a plan session, what the approval gates is worked out again from the plan and the
work tree as they are now (see ``approval_view``). The decision is bound to that, not to
what the session saw when it stopped: a person who approves later approves what they are
shown then, and the resume finds the decision valid only while the step would still do
what was shown.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from acode.domain.events import EventType
from acode.domain.reducer import StepRecord, StepStatus
from acode.domain.states import SessionState
from acode.engine.approval_view import GatedView, approval_subject, view_of
from acode.engine.approvals import decision_payload, subject_hash
from acode.engine.catalog import find_session, recorded_plan
from acode.engine.journal import Journal
from acode.engine.lifecycle import existing_workspace, open_workspace_store, take_lock_and_lease
from acode.errors import (
    AmbiguousSessionError,
    ApprovalChangedError,
    SessionNotFoundError,
    UsageError,
)
from acode.security.signing import Signer, load_signer
from acode.store.base import EventStore
from acode.store.records import SessionRow
from acode.system.clock import SystemClock

__all__ = ["Decision", "PendingApproval", "decide_approval", "pending_approval"]


@dataclass(frozen=True)
class PendingApproval:
    """An approval a session waits on. ``gated``: what it gates as things stand now (None
    when acode cannot tell: the last step of a plan, a session not run from a plan).
    ``subject_hash``: what a decision recorded now is bound to."""

    session_id: str
    short_id: str
    step_id: str
    question: str
    gated: GatedView | None
    subject_hash: str


@dataclass(frozen=True)
class Decision:
    approval: PendingApproval
    approved: bool
    by: str


def pending_approval(
    id_or_prefix: str | None, workspace: Path | str = ".", *, step: str | None = None
) -> PendingApproval:
    """The approval the session waits on (or the one at ``step``); records nothing.
    Without an id: the one session of the workspace that waits for an approval."""
    with _waiting(id_or_prefix, workspace, step) as waiting:
        return waiting.pending


def decide_approval(
    id_or_prefix: str | None,
    workspace: Path | str = ".",
    *,
    step: str | None = None,
    approved: bool = True,
    by: str | None = None,
    shown: str | None = None,
) -> Decision:
    """Record a signed decision for the session's pending approval (or ``step``), bound
    to what it gates now. ``shown``: the ``subject_hash`` of what the person decided on;
    an approval is not recorded if what it gates has changed since (a denial always is:
    it stops whatever the step would do)."""
    with _waiting(id_or_prefix, workspace, step) as (row, journal, signer, target, pending):
        if approved and shown is not None and shown != pending.subject_hash:
            raise ApprovalChangedError(
                f"what step {pending.step_id!r} of session {row.short_id} gates changed "
                "after it was shown (the work tree changed): nothing was recorded",
                hint=f"look again and decide: acode approve {row.short_id}",
            )
        for earlier in journal.history.of_type(EventType.APPROVAL_DECIDED):
            p = earlier.payload
            if (p["step"], p["position"], p["subject_hash"]) == (
                target.step_id,
                target.position,
                pending.subject_hash,
            ):
                verdict = "approved" if p["approved"] else "denied"
                raise UsageError(
                    f"step {pending.step_id!r} of session {row.short_id} was already "
                    f"{verdict} by {p['by']}",
                    hint=f"continue with: acode resume {row.short_id}",
                )
        who = by or getpass.getuser()
        payload = decision_payload(
            signer,
            row.id,
            step=target.step_id,
            position=target.position,
            approved=approved,
            subject=pending.subject_hash,
            by=who,
        )
        journal.write([(EventType.APPROVAL_DECIDED, payload)])
        return Decision(approval=pending, approved=approved, by=who)


class _Waiting(NamedTuple):
    row: SessionRow
    journal: Journal
    signer: Signer
    target: StepRecord
    pending: PendingApproval


@contextmanager
def _waiting(
    id_or_prefix: str | None, workspace: Path | str, step: str | None
) -> Iterator[_Waiting]:
    """The session, locked, and the approval it waits on."""
    clock = SystemClock()
    ws = existing_workspace(workspace)
    signer = load_signer()
    store = open_workspace_store(ws)
    try:
        row = _only_waiting(store) if id_or_prefix is None else find_session(store, id_or_prefix)
        with ExitStack() as held:
            # The lease too: on a shared store the session may wait at a terminal of
            # another machine, whose lock file this one cannot see.
            take_lock_and_lease(ws, store, row.id, clock, held, label=row.short_id)
            row = store.session(row.id)
            journal = Journal.load(store, row, clock, signer)
            row = journal.row
            target = _target(journal, step)
            # What was asked, as the history recorded it: each read checked on its chain.
            request = journal.history.event(target.event_seq).payload
            gated, gate = _gated(journal, ws.root, target, request)
            pending = PendingApproval(
                session_id=row.id,
                short_id=row.short_id,
                step_id=target.step_id,
                question=request["question"],
                gated=gated,
                subject_hash=gate,
            )
            yield _Waiting(row=row, journal=journal, signer=signer, target=target, pending=pending)
    finally:
        store.close()


def _only_waiting(store: EventStore) -> SessionRow:
    """The session an ``acode approve`` without an id means: the only one waiting."""
    waiting = [
        row
        for row in store.sessions()
        if row.state == SessionState.AWAITING_APPROVAL and not row.archived
    ]
    if len(waiting) == 1:
        return waiting[0]
    if not waiting:
        raise SessionNotFoundError(
            f"no session in {store.location} waits for an approval",
            hint="`acode session list` shows the sessions; name one: acode approve ID",
        )
    shown = ", ".join(row.short_id for row in waiting[:10])
    raise AmbiguousSessionError(
        f"{len(waiting)} sessions wait for an approval: {shown}",
        hint=f"name the one to decide: acode approve {waiting[0].short_id}",
    )


def _target(journal: Journal, step: str | None) -> StepRecord:
    row = journal.row
    waiting = [
        s
        for s in journal.unfinished_steps()
        if s.kind == "approve"
        and s.status is StepStatus.IN_PROGRESS
        and (step is None or s.step_id == step)
    ]
    if not waiting:
        raise UsageError(
            f"session {row.short_id} has no approval waiting"
            + (f" at step {step!r}" if step else ""),
            hint="`acode status` shows what the session is doing",
        )
    return waiting[-1]


def _gated(
    journal: Journal,
    root: Path,
    target: StepRecord,
    request: dict[str, Any],
) -> tuple[GatedView | None, str]:
    """What the approval gates now, and the hash a decision on it is bound to. A session
    not run from a plan keeps the subject it asked about, which acode cannot show."""
    plan = recorded_plan(journal.history, journal.row, journal.summary)
    if plan is None:
        return None, str(request["subject_hash"])
    steps = plan.steps()
    index = next(i for i, s in enumerate(steps) if s.id == target.step_id)
    following = steps[index + 1] if index + 1 < len(steps) else None
    subject = approval_subject(root, following)
    return view_of(subject), subject_hash(request["question"], subject)
