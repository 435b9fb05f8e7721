"""Steps that end by an exception: recorded as the step's failure, or, when that is not
the step's doing, left unsettled until resume finishes the step or the caller goes on
past it (then recorded as failed, so that every position a call took has its outcome in
the history, in order, and a replay raises where the first run raised)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NoReturn

from acode.domain.events import EventType
from acode.domain.kinds import StepKind
from acode.domain.reducer import StepStatus, step_record
from acode.domain.states import SessionState
from acode.engine.journal import Journal
from acode.engine.notices import Notice
from acode.engine.observer import StepPhase
from acode.engine.state_changes import StateChanges
from acode.engine.step_records import step_payload
from acode.engine.steps.base import StepContext
from acode.errors import (
    AcodeError,
    ApprovalPending,
    PauseRequested,
    StepFailedError,
    UsageError,
)
from acode.store.records import FileRow
from acode.system.faults import environment_fault

__all__ = ["StepFailures", "Unsettled"]

# The notice of a step: (position, step id, kind, task, title) -> Notice.
NoticeOf = Callable[[int, str, StepKind, str | None, str | None], Notice]


class Unsettled(NamedTuple):
    """A step whose call raised before any outcome of it was recorded."""

    ctx: StepContext
    input_hash: str
    error: str
    files: tuple[FileRow, ...]


def _step_failure(exc: BaseException, step_id: str) -> StepFailedError | None:
    """``exc`` as the failure of step ``step_id``, recorded as its outcome; None for
    what is not the step's doing and must not become its outcome: a pause, an approval
    no one can give now, an unavailable model or database, a history that fails its
    integrity checks (and the environment's faults: acode.system.faults)."""
    if isinstance(exc, StepFailedError):
        return exc
    if isinstance(exc, UsageError):
        # A path outside the workspace, say: running it again can never succeed, so
        # the step fails rather than leave a session that every resume stops at.
        return StepFailedError(exc.message, hint=exc.hint)
    if isinstance(exc, AcodeError | ApprovalPending) or not isinstance(exc, Exception):
        return None
    return StepFailedError(f"step {step_id!r} raised {type(exc).__name__}: {exc}")


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, AcodeError):
        return exc.message
    if isinstance(exc, PauseRequested | KeyboardInterrupt):
        return "interrupted"
    return str(exc) or type(exc).__name__


class StepFailures:
    def __init__(
        self, journal: Journal, states: StateChanges, recorded_until: int, notice_of: NoticeOf
    ) -> None:
        self._journal = journal
        self._states = states
        self._recorded_until = recorded_until
        self._notice_of = notice_of
        # A step whose call raised with no outcome recorded (``unsettle``).
        self.unsettled: Unsettled | None = None

    def record(
        self,
        exc: BaseException,
        ctx: StepContext,
        input_hash: str,
        notice: Notice,
        files: Sequence[FileRow] = (),
    ) -> NoReturn:
        """Called in the handler of ``exc``, raised by step ``ctx`` before its outcome
        was recorded: record the step as failed and raise its StepFailedError. What is
        not the step's own failure (``_step_failure``), and a failure that cannot be
        recorded, leave the step unsettled and are raised as they are. ``files``: the
        workspace files as the step left them, when it ran to its end."""
        fault = environment_fault(exc, f"step {ctx.step_id!r}")
        if fault is not None:  # a full disk, say: the step runs again on resume
            self.unsettle(ctx, input_hash, fault, files)
            raise fault from exc
        failure = _step_failure(exc, ctx.step_id)
        if failure is None:
            self.unsettle(ctx, input_hash, exc, files)
            raise exc
        try:
            self._fail(ctx, input_hash, failure.message, files)
        except BaseException as unrecorded:
            # The caller gets the error of the write, which a replay raises again.
            self.unsettle(ctx, input_hash, unrecorded, files)
            raise
        notice(StepPhase.FAILED, failure.message)
        if failure is exc:
            raise failure
        raise failure from exc

    def unsettle(
        self,
        ctx: StepContext,
        input_hash: str,
        exc: BaseException,
        files: Sequence[FileRow] = (),
    ) -> None:
        """Note that step ``ctx`` ended by ``exc`` with no outcome recorded. Nothing is
        written now: an interrupted run, an unavailable model or database leave the step
        for resume to finish. A caller that goes on past it has it recorded as failed
        first (``settle``)."""
        if ctx.position + 1 < self._recorded_until:
            # Later positions were recorded (by an acode before every failure was): an
            # outcome written now would come after theirs. It stays as it was.
            return
        self.unsettled = Unsettled(
            ctx=ctx, input_hash=input_hash, error=_error_text(exc), files=tuple(files)
        )

    def settle(self) -> None:
        """Record the unsettled step as failed, now that the caller has gone on."""
        unsettled = self.unsettled
        assert unsettled is not None
        ctx = unsettled.ctx
        entries = []
        if self._journal.summary is not None and self._journal.summary.pending_approval == (
            ctx.step_id
        ):
            entries = self._states.to(SessionState.EXECUTING, f"step {ctx.step_id} went unanswered")
        # The error the caller saw, which a replay raises again.
        self._fail(ctx, unsettled.input_hash, unsettled.error, unsettled.files, entries)
        self.unsettled = None
        self._notice_of(ctx.position, ctx.step_id, StepKind(ctx.kind), ctx.task_id, None)(
            StepPhase.FAILED, f"{unsettled.error} (the session went on without this step)"
        )

    def _fail(
        self,
        ctx: StepContext,
        input_hash: str,
        error: str,
        files: Sequence[FileRow] = (),
        entries: Sequence[tuple[EventType, dict[str, Any]]] = (),
    ) -> None:
        base = step_payload(ctx, input_hash)
        self._journal.write(
            [*entries, (EventType.STEP_FAILED, {**base, "error": error})],
            steps=[step_record(StepStatus.FAILED, 0, base)],
            files=files,
        )
