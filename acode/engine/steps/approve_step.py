"""approve: a person's decision, recorded as a signed event.

A decision is bound to exactly what the person was shown (the question and the
subject, by their hash: ``gate``). On resume, a recorded decision stands while that is
unchanged; otherwise the question is asked again. A decision is taken from the history
only when its signature is the user's: one inserted into the database by hand opens
nothing. With no decision and no one to ask, the step waits (``ApprovalPending``).

It runs through the step path of every kind (acode.engine.step_executor) as a step
that waits: its outcome records the decision and the session's move back to executing
with its completion, in one commit; one that waits records the request and the session's
move to awaiting approval.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from acode.domain.events import EventType
from acode.domain.kinds import StepKind
from acode.domain.states import SessionState
from acode.engine.approvals import decision_payload, decision_valid, subject_hash
from acode.engine.observer import ApprovalRequest, Approver, StepPhase
from acode.engine.steps.base import Outcome, Prepared, Recovery, StepContext, StepEnv, Wait
from acode.errors import ApprovalPending, CheckpointError

if TYPE_CHECKING:
    from acode.engine.history import History
    from acode.security.signing import Signer
    from acode.store.base import EventStore

__all__ = ["ApproveStep"]


@dataclass(frozen=True)
class ApproveStep:
    question: str
    # What a decision is checked and signed with, and who is asked: the session's.
    history: History = field(compare=False)
    signer: Signer = field(compare=False)
    approver: Approver | None = field(default=None, compare=False)
    subject: object = None
    kind: StepKind = StepKind.APPROVE
    durable_start: bool = False
    waits: ClassVar[bool] = True

    def input(self) -> dict[str, Any]:
        # The subject is not part of the step's identity: a changed subject asks again.
        return {"q": self.question}

    def gate(self) -> str:
        """The hash of what the person is shown, which a decision is bound to."""
        return subject_hash(self.question, self.subject)

    def awaited(self, env: StepEnv, resumed: bool) -> Outcome | None:
        """The decision recorded while the step waited, if it still stands; a wait when
        there is none and no one to ask."""
        gate = self.gate()
        decision = self.recorded(env.ctx, gate) if resumed else None
        if decision is not None:
            return self._decided(decision)
        if self.approver is None:
            return self._waiting(env.ctx, gate)
        return None

    def prepare(self, env: StepEnv) -> Prepared:
        return Prepared()

    def execute(self, env: StepEnv, prepared: Prepared) -> Outcome:
        """Ask the approver; what it decides is recorded with the completion."""
        assert self.approver is not None  # else ``awaited`` made the step wait
        gate = self.gate()
        decision = self.ask(self.approver, env.ctx, gate)
        if decision is None:
            return self._waiting(env.ctx, gate)
        return self._decided(decision, events=((EventType.APPROVAL_DECIDED, decision),))

    def recover(self, env: StepEnv, started: dict[str, Any]) -> Recovery:
        raise AssertionError("a step that waits is taken up again, never recovered")

    def _decided(
        self,
        decision: dict[str, Any],
        events: tuple[tuple[EventType, dict[str, Any]], ...] = (),
    ) -> Outcome:
        approved = bool(decision["approved"])
        return Outcome(
            self.result(decision),
            value=approved,
            events=events,
            state=(SessionState.EXECUTING, "approval decided"),
            told=(StepPhase.DONE, "approved") if approved else (StepPhase.FAILED, "denied"),
        )

    def _waiting(self, ctx: StepContext, gate: str) -> Outcome:
        wait = Wait(
            event=EventType.APPROVAL_REQUESTED,
            fields={"question": self.question, "subject_hash": gate},
            state=(SessionState.AWAITING_APPROVAL, f"step {ctx.step_id} awaits approval"),
            error=ApprovalPending(ctx.step_id, self.question),
        )
        return Outcome(None, wait=wait)

    def recorded(self, ctx: StepContext, gate: str) -> dict[str, Any] | None:
        """The newest decision recorded for this step while what it approved is
        unchanged (``gate``): the payload of its ApprovalDecided event."""
        for event in reversed(self.history.of_type(EventType.APPROVAL_DECIDED)):
            p = event.payload
            if p.get("step") != ctx.step_id or p.get("position") != ctx.position:
                continue
            if p.get("subject_hash") != gate:
                return None
            if not decision_valid(self.signer, ctx.session_id, p):
                raise CheckpointError(
                    f"the approval of step {ctx.step_id!r} (event {event.seq}) is not signed "
                    "by this user's key: it was not recorded by acode",
                    hint="refusing to continue; record a decision with `acode approve`",
                )
            return p
        return None

    def ask(self, approver: Approver, ctx: StepContext, gate: str) -> dict[str, Any] | None:
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
            self.signer,
            ctx.session_id,
            step=ctx.step_id,
            position=ctx.position,
            approved=answer,
            subject=gate,
            by=getpass.getuser(),
        )

    @staticmethod
    def result(decision: dict[str, Any]) -> dict[str, Any]:
        """The step's recorded result, from its decision."""
        return {"approved": bool(decision["approved"]), "by": decision["by"]}

    def value(self, store: EventStore, result: Any) -> bool:
        return bool(result["approved"])
