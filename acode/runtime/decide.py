"""`acode approve`: record a person's decision for a session waiting on an approval."""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from pathlib import Path

from acode.domain.events import EventType
from acode.domain.reducer import StepStatus
from acode.errors import UsageError
from acode.runtime.approvals import decision_payload
from acode.runtime.catalog import find_session
from acode.runtime.clock import SystemClock
from acode.runtime.journal import Journal
from acode.runtime.lifecycle import existing_workspace, take_lock
from acode.security.signing import load_signer
from acode.store.sqlite_store import open_store

__all__ = ["Decision", "decide_approval"]


@dataclass(frozen=True)
class Decision:
    session_id: str
    short_id: str
    step_id: str
    question: str
    approved: bool
    by: str


def decide_approval(
    id_or_prefix: str,
    workspace: Path | str = ".",
    *,
    step: str | None = None,
    approved: bool = True,
    by: str | None = None,
) -> Decision:
    """Record a signed decision for the session's pending approval (or ``step``)."""
    clock = SystemClock()
    ws = existing_workspace(workspace)
    signer = load_signer()
    store = open_store(ws.paths.db, ws.config.durability)
    try:
        row = find_session(store, id_or_prefix)
        with take_lock(ws, row.id, clock, label=row.short_id):
            row = store.session(row.id)
            journal = Journal.load(store, row, clock, signer)
            row = journal.row
            waiting = [
                s
                for s in journal.unfinished_steps()
                if s.kind == "approve" and s.status is StepStatus.IN_PROGRESS
            ]
            if step is not None:
                waiting = [s for s in waiting if s.step_id == step]
            if not waiting:
                raise UsageError(
                    f"session {row.short_id} has no approval waiting"
                    + (f" at step {step!r}" if step else ""),
                    hint="`acode status` shows what the session is doing",
                )
            target = waiting[-1]
            # What was asked, as the history recorded it: each read checked on its chain.
            request = journal.history.event(target.event_seq).payload
            for earlier in journal.history.of_type(EventType.APPROVAL_DECIDED):
                p = earlier.payload
                if (p["step"], p["position"], p["subject_hash"]) == (
                    target.step_id,
                    target.position,
                    request["subject_hash"],
                ):
                    verdict = "approved" if p["approved"] else "denied"
                    raise UsageError(
                        f"step {target.step_id!r} of session {row.short_id} was already "
                        f"{verdict} by {p['by']}",
                        hint=f"continue with: acode resume {row.short_id}",
                    )
            who = by or getpass.getuser()
            journal.write(
                [
                    (
                        EventType.APPROVAL_DECIDED,
                        decision_payload(
                            signer,
                            row.id,
                            step=target.step_id,
                            position=target.position,
                            approved=approved,
                            subject=request["subject_hash"],
                            by=who,
                        ),
                    )
                ]
            )
            return Decision(
                row.id, row.short_id, target.step_id, request["question"], approved, who
            )
    finally:
        store.close()
