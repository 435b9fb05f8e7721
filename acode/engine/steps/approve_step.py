"""approve: a person's decision, recorded as a signed event.

A decision is bound to exactly what the person was shown (the question and the
subject, by their hash: ``gate``). On resume, a recorded decision stands while that is
unchanged; otherwise the question is asked again. A decision is taken from the history
only when its signature is the user's: one inserted into the database by hand opens
nothing. With no decision and no one to ask, the step waits (``ApprovalPending``).

The session records what this kind decides (``Session.approve``): the request and the
state it leaves the session in, the decision and the completion in one commit.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from acode.domain.events import EventType
from acode.domain.kinds import StepKind
from acode.engine.approvals import decision_payload, decision_valid, subject_hash
from acode.engine.observer import ApprovalRequest, Approver
from acode.engine.steps.base import StepContext
from acode.errors import CheckpointError

if TYPE_CHECKING:
    from acode.engine.history import History
    from acode.security.signing import Signer
    from acode.store.base import EventStore

__all__ = ["ApproveStep"]


@dataclass(frozen=True)
class ApproveStep:
    question: str
    subject: object = None
    kind: StepKind = StepKind.APPROVE
    durable_start: bool = False

    def input(self) -> dict[str, Any]:
        # The subject is not part of the step's identity: a changed subject asks again.
        return {"q": self.question}

    def gate(self) -> str:
        """The hash of what the person is shown, which a decision is bound to."""
        return subject_hash(self.question, self.subject)

    def recorded(
        self, history: History, signer: Signer, ctx: StepContext, gate: str
    ) -> dict[str, Any] | None:
        """The newest decision recorded for this step while what it approved is
        unchanged (``gate``): the payload of its ApprovalDecided event."""
        for event in reversed(history.of_type(EventType.APPROVAL_DECIDED)):
            p = event.payload
            if p.get("step") != ctx.step_id or p.get("position") != ctx.position:
                continue
            if p.get("subject_hash") != gate:
                return None
            if not decision_valid(signer, ctx.session_id, p):
                raise CheckpointError(
                    f"the approval of step {ctx.step_id!r} (event {event.seq}) is not signed "
                    "by this user's key: it was not recorded by acode",
                    hint="refusing to continue; record a decision with `acode approve`",
                )
            return p
        return None

    def ask(
        self, approver: Approver, signer: Signer, ctx: StepContext, gate: str
    ) -> dict[str, Any] | None:
        """The approver's decision, signed: the payload of the ApprovalDecided event to
        record; None when no one can decide now."""
        answer = approver(
            ApprovalRequest(
                session_id=ctx.session_id,
                step_id=ctx.step_id,
                question=self.question,
                subject=self.subject,
            )
        )
        if answer is None:
            return None
        return decision_payload(
            signer,
            ctx.session_id,
            step=ctx.step_id,
            position=ctx.position,
            approved=answer,
            subject=gate,
            by=getpass.getuser(),
        )

    def request(self, base: dict[str, Any], gate: str) -> dict[str, Any]:
        """The payload of the ApprovalRequested event of a step that waits."""
        return {**base, "question": self.question, "subject_hash": gate}

    @staticmethod
    def result(decision: dict[str, Any]) -> dict[str, Any]:
        """The step's recorded result, from its decision."""
        return {"approved": bool(decision["approved"]), "by": decision["by"]}

    def value(self, store: EventStore, result: Any) -> bool:
        return bool(result["approved"])
