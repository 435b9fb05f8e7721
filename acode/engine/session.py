"""A running session: executes steps once, records them, and replays them on resume.

``Session.step`` and the kind helpers (``read``, ``write``, ...) take a position in
the session's sequence of calls. On a resumed session, a call at a position that
was completed returns the recorded result without running; a call whose id, kind
or input differs from the record at that position raises NonDeterminismError; a
call found started but unfinished is handled by its kind (see ``steps/``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from acode.domain.config import AcodeConfig
from acode.domain.events import EventType, canonical_json
from acode.domain.frozen import build
from acode.domain.idempotency import STEP_ID_PATTERN, key_prefix
from acode.domain.kinds import StepKind
from acode.domain.reducer import (
    DEFAULT_STEP_KIND,
    FIRST_ATTEMPT,
    StepRecord,
    StepStatus,
    step_record,
)
from acode.domain.states import SessionState, can_transition, is_terminal
from acode.engine.interrupts import Interrupts
from acode.engine.journal import Journal
from acode.engine.observer import (
    Approver,
    NullObserver,
    Observer,
    StepNotice,
    StepPhase,
)
from acode.engine.progress_file import ProgressFile
from acode.engine.replay import GENERAL, NO_INPUT, ReplayCursor
from acode.engine.steps.base import (
    InProgressStrategy,
    Outcome,
    Prepared,
    Recovery,
    RecoveryAction,
    StepAction,
    StepContext,
    StepEnv,
)

# The other step kinds load on their first call: a library caller's session of python
# steps, or its replay, needs neither git, subprocesses nor the model client.
from acode.engine.steps.python_step import (
    PythonStep,
    StepFunction,
    is_retryable,
    recorded_form,
)
from acode.errors import (
    AcodeError,
    ApprovalPending,
    CheckpointError,
    ErrorCode,
    NonDeterminismError,
    PauseRequested,
    StepFailedError,
    UsageError,
)
from acode.security.signing import Signer
from acode.store.records import FileRow
from acode.system.faults import environment_fault
from acode.system.locks import SessionLock
from acode.system.log import log_event
from acode.system.workspace import StatePaths

if TYPE_CHECKING:
    from acode.domain.marks import Mark
    from acode.engine.steps.approve_step import ApproveStep
    from acode.engine.sync_link import SyncLink
    from acode.system.process import CommandResult

__all__ = ["Session", "StrategyPrompt", "journal_of"]

# Asked for an interrupted step under strategy "prompt": (step id, kind) -> "rollback",
# "retry", or None to stop. An implementation with no one to ask returns "rollback".
StrategyPrompt = Callable[[str, str], "InProgressStrategy | None"]

# Most steps prepare nothing: one shared, never changed.
_NOTHING_PREPARED = Prepared()


def _input_hash(data: Mapping[str, Any]) -> str:
    if not data:
        return NO_INPUT
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:32]


def _ignore(*_: object, **__: object) -> None:
    return None


class _Unsettled(NamedTuple):
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


# A seek in the step id ledger costs about as much as reading this many of its ids
# (docs/benchmarks.md, "Figures behind design choices").
_IDS_PER_SEEK = 5


def _seeks_before_reading(recorded: int) -> int:
    return recorded // _IDS_PER_SEEK


class Session:
    """One session, held by this process (its lock is held until ``close``)."""

    def __init__(
        self,
        *,
        journal: Journal,
        workspace: Path,
        config: AcodeConfig,
        lock: SessionLock,
        signer: Signer,
        observer: Observer | None = None,
        approver: Approver | None = None,
        interrupts: Interrupts | None = None,
        strategy: InProgressStrategy | None = None,
        strategy_prompt: StrategyPrompt | None = None,
        sync: SyncLink | None = None,
        fresh_after_ns: int | None = None,
    ) -> None:
        self._journal = journal
        self.workspace = workspace
        self.config = config
        self._lock = lock
        self._signer = signer
        self.observer: Observer = observer or NullObserver()
        self.approver = approver
        self.interrupts = interrupts or Interrupts()
        self.strategy: InProgressStrategy = strategy or config.resume.in_progress_strategy
        self.strategy_prompt = strategy_prompt
        self._fresh_after_ns = fresh_after_ns
        summary = journal.summary
        assert summary is not None
        # Positions below this may have records; a fresh session never looks.
        self._recorded_until = summary.next_position
        self._replay = ReplayCursor(journal.history, self._recorded_until, self._edited)
        self._position = 0
        self._seen_ids: set[str] = set()
        # Set by skip_completed: the session whose step id ledger holds the skipped ids,
        # and how many new ids may still be looked up there one seek at a time.
        self._ledger_sid: int | None = None
        self._ledger_seeks_left = 0
        self._key_prefix = key_prefix(journal.session_id)
        self._transcript: list[dict[str, Any]] | None = None
        # A step whose call raised with no outcome recorded (``_unsettle``).
        self._unsettled: _Unsettled | None = None
        # The run step whose ghost snapshot this process took (``_as_left``).
        self._ghosted: StepContext | None = None
        self._closed = False
        self._progress = ProgressFile(StatePaths(workspace))
        self._sync = sync
        if sync is not None:
            sync.start(journal, self.observer)

    # -- what a caller may read ----------------------------------------------------

    @property
    def id(self) -> str:
        return self._journal.session_id

    @property
    def short_id(self) -> str:
        """How people see this session: its shortest unique id prefix."""
        if not self._journal.row.short_id:
            return self._journal.store.short_id(self.id)
        return self._journal.row.short_id

    @property
    def title(self) -> str:
        return self._journal.row.title

    @property
    def state(self) -> SessionState:
        return self._journal.state

    @property
    def steps_completed(self) -> int:
        assert self._journal.summary is not None
        return self._journal.summary.steps_completed

    @property
    def total_steps(self) -> int | None:
        assert self._journal.summary is not None
        return self._journal.summary.total_steps

    def skip_completed(self) -> int:
        """Go on after the steps the session recorded, without calling them again, and
        return the position of the first step still to run: where the caller's loop
        picks up (``for i in range(s.skip_completed(), n)``). The calls take positions
        from there on, so recovery costs the same however long the history is; the
        skipped steps' results are not returned (call the steps again for those: they
        return their recorded results). A step left unfinished by the interruption
        needs its call to be settled, so it is refused here; so is a call after the
        first step call. Work sessions and the task list use it as open-ended ledgers."""
        if self._position:
            raise UsageError(
                f"session {self.short_id}: skip_completed() comes before the first step call"
            )
        unsettled = [
            r.step_id
            for r in self._journal.unfinished_steps()
            if r.status in (StepStatus.IN_PROGRESS, StepStatus.ROLLED_BACK)
        ]
        if unsettled:
            raise UsageError(
                f"session {self.short_id} has unfinished steps ({', '.join(unsettled)}); "
                "they cannot be skipped",
                hint="call the steps from the first one: completed steps return their "
                f"recorded results and acode settles the others (or: acode resume {self.short_id})",
            )
        # No step id may be used twice: a new one is looked up in the step id ledger,
        # one seek, and among the few recorded ids the ledger does not hold yet.
        self._seen_ids = set(self._journal.unledgered_step_ids)
        self._ledger_sid = self._journal.row.sid
        self._ledger_seeks_left = _seeks_before_reading(self._recorded_until)
        self._position = self._recorded_until
        return self._position

    # -- step kinds ------------------------------------------------------------------

    def step(
        self,
        step_id: str,
        fn: Callable[[StepContext], Any],
        *,
        input: Any = None,
        task: str | None = None,
        title: str | None = None,
    ) -> Any:
        """Run ``fn(ctx)`` once and return its JSON-able result."""
        if input is None and isinstance(self.observer, NullObserver):
            if self._position < self._recorded_until:
                replayed = self._replayed_step(step_id)
                if replayed is not GENERAL:
                    return replayed
            elif is_retryable(fn):
                return self._new_step(step_id, fn, task)
        # Built by acode.domain.frozen: one per call.
        action = build(PythonStep, fn=fn, arguments=input, kind=StepKind.PYTHON)
        return self._perform(action, step_id, task, title)

    def _new_step(self, step_id: str, fn: StepFunction, task: str | None) -> Any:
        """``step`` past the recorded history, for a retryable function without input,
        with no observer to tell: most steps of a library's loop. ``_perform`` does the
        same for it, through the branches of every other kind of step and history;
        tests/engine/test_step_lane.py holds the two to the same records."""
        self._require_active()
        self._check_id(step_id)
        position = self._advance(step_id)
        ctx = self._context(step_id, StepKind.PYTHON, task, position, FIRST_ATTEMPT)
        try:
            result = recorded_form(self.interrupts.call(fn, ctx), step_id)
        except BaseException as exc:
            self._record_failure(exc, ctx, NO_INPUT, _ignore)
        payload = self._step_payload(ctx, NO_INPUT)
        payload["result"] = result
        try:
            self._journal.write_completion(payload)
        except BaseException as exc:
            self._record_failure(exc, ctx, NO_INPUT, _ignore)
        self._progress.update(self._journal)
        self.interrupts.check()
        return result

    def _replayed_step(self, step_id: str) -> Any:
        """``step`` at a recorded position, without input or observer: the recorded
        result of a completed python step called again with its id, as a resumed
        library caller's loop does for every step it had done. Anything else there (a
        different id or kind, an input, a failure, a step with a `steps` row to check)
        is GENERAL: ``_perform`` decides, and raises what it finds."""
        self._require_active()
        position = self._position
        result = self._replay.completed(position, step_id)
        if result is not GENERAL:
            # The id is the one recorded here, so ``_check_id`` has nothing to refuse:
            # acode checked it when it recorded it, and a history gives an id one position.
            # ``_advance`` without its settling: no step before a recorded position is
            # left unsettled (``_unsettle`` leaves those as they were).
            self._seen_ids.add(step_id)
            self._position = position + 1
        return result

    def read(
        self, step_id: str, path: str, *, task: str | None = None, title: str | None = None
    ) -> str:
        from acode.engine.steps.file_steps import ReadStep

        return str(self._perform(ReadStep(path), step_id, task, title or f"read {path}"))

    def write(
        self,
        step_id: str,
        path: str,
        content: str | bytes,
        *,
        task: str | None = None,
        title: str | None = None,
    ) -> dict[str, Any]:
        from acode.engine.steps.file_steps import WriteStep

        data = content.encode() if isinstance(content, str) else content
        result: dict[str, Any] = self._perform(
            WriteStep(path, data), step_id, task, title or f"write {path}"
        )
        return result

    def edit(
        self,
        step_id: str,
        path: str,
        old: str,
        new: str,
        *,
        task: str | None = None,
        title: str | None = None,
    ) -> dict[str, Any]:
        from acode.engine.steps.file_steps import EditStep

        result: dict[str, Any] = self._perform(
            EditStep(path, old, new), step_id, task, title or f"edit {path}"
        )
        return result

    def run(
        self,
        step_id: str,
        command: str,
        *,
        idempotent: bool = False,
        timeout: float | None = None,
        paths: tuple[str, ...] | list[str] = (),
        check: str | None = None,
        task: str | None = None,
        title: str | None = None,
    ) -> CommandResult | dict[str, Any]:
        from acode.engine.steps.run_step import RunStep

        action = RunStep(
            command=command, idempotent=idempotent, timeout=timeout, paths=tuple(paths), check=check
        )
        result: CommandResult | dict[str, Any] = self._perform(
            action, step_id, task, title or f"run {command}"
        )
        return result

    def commit(
        self, step_id: str, message: str, *, task: str | None = None, title: str | None = None
    ) -> str:
        from acode.engine.steps.commit_step import CommitStep

        return str(self._perform(CommitStep(message), step_id, task, title or f"commit {message}"))

    def model(
        self, step_id: str, prompt: str, *, task: str | None = None, title: str | None = None
    ) -> str:
        from acode.engine.steps.model_step import ModelStep

        action = ModelStep(prompt=prompt, history=tuple(self._conversation()))
        return str(self._perform(action, step_id, task, title or f"model {prompt}"))

    def chat(
        self,
        step_id: str,
        request: Mapping[str, Any],
        request_hash: str,
        *,
        new_messages: Sequence[Mapping[str, Any]] = (),
        task: str | None = None,
        title: str | None = None,
    ) -> dict[str, Any]:
        """Send ``request`` (a body from ``model_client.build_chat_payload``) once and
        return the recorded answer: content, tool_calls, finish_reason, usage, model,
        request_hash and, when the model has a price, cost_usd. ``new_messages`` are added
        to the session's transcript with the answer."""
        from acode.engine.steps.chat_step import ChatStep

        action = ChatStep(
            request=request, request_hash=request_hash, new_messages=tuple(new_messages)
        )
        result: dict[str, Any] = self._perform(action, step_id, task, title or step_id)
        return result

    def approve(
        self,
        step_id: str,
        question: str,
        *,
        subject: object = None,
        task: str | None = None,
        title: str | None = None,
    ) -> bool:
        """Ask a person; the decision is recorded and signed. Raises ApprovalPending
        when there is no decision and no one to ask."""
        from acode.engine.steps.approve_step import ApproveStep

        self._require_active()
        action = ApproveStep(question=question, subject=subject)
        input_hash = _input_hash(action.input())
        position, record = self._claim(step_id, action.kind, input_hash)
        notice = self._notice(position, step_id, action.kind, task, title or f"approve {question}")
        if record is not None and record.status is StepStatus.COMPLETED:
            notice(StepPhase.SKIPPED, None)
            return action.value(self._journal.store, self._recorded_result(record))
        if record is not None and record.status is StepStatus.FAILED:
            raise self._recorded_failure(record)
        ctx = self._context(step_id, action.kind, task, position, FIRST_ATTEMPT)
        try:
            approved = self._decide(action, ctx, record, input_hash, notice)
        except BaseException as exc:
            self._record_failure(exc, ctx, input_hash, notice)
        if approved:
            notice(StepPhase.DONE, "approved")
        else:
            notice(StepPhase.FAILED, "denied")
        return approved

    def _decide(
        self,
        action: ApproveStep,
        ctx: StepContext,
        record: StepRecord | None,
        input_hash: str,
        notice: Callable[..., None],
    ) -> bool:
        """The decision of approval step ``ctx``, recorded: the one recorded while what it
        approved is unchanged, else the approver's. Raises ApprovalPending when there is
        none, after recording that the step waits."""
        gate = action.gate()
        history = self._journal.history
        decision = action.recorded(history, self._signer, ctx, gate) if record else None
        entries: list[tuple[EventType, dict[str, Any]]] = []
        if decision is None and self.approver is not None:
            notice(StepPhase.STARTED, None)
            with self.interrupts.interruptible():  # Ctrl+C at the prompt pauses the session
                decision = action.ask(self.approver, self._signer, ctx, gate)
            if decision is not None:
                entries.append((EventType.APPROVAL_DECIDED, decision))
        base = self._step_payload(ctx, input_hash)
        if decision is None:
            if record is None:
                awaiting = f"step {ctx.step_id} awaits approval"
                self._journal.write(
                    [
                        (EventType.APPROVAL_REQUESTED, action.request(base, gate)),
                        *self._to(SessionState.AWAITING_APPROVAL, awaiting),
                    ],
                    steps=[step_record(StepStatus.IN_PROGRESS, 0, base)],
                )
                self._progress.update(self._journal, final=True)
            raise ApprovalPending(ctx.step_id, action.question)
        result = action.result(decision)
        entries += self._to(SessionState.EXECUTING, "approval decided")
        entries.append((EventType.STEP_COMPLETED, {**base, "result": result}))
        self._journal.write(entries, steps=[step_record(StepStatus.COMPLETED, 0, base)])
        return bool(result["approved"])

    # -- the engine ----------------------------------------------------------------------

    def _perform(
        self, action: StepAction, step_id: str, task: str | None, title: str | None
    ) -> Any:
        self._require_active()
        input_hash = _input_hash(action.input())
        position, record = self._claim(step_id, action.kind, input_hash)
        if record is not None and record.status is StepStatus.COMPLETED:
            # Replay of a completed step: its recorded result, decoded only now, with no
            # step context, key or query (the record came with its window).
            self._notice(position, step_id, action.kind, task, title)(StepPhase.SKIPPED, None)
            return action.value(self._journal.store, self._recorded_result(record))
        notice = self._notice(position, step_id, action.kind, task, title)
        attempt = 1
        if record is not None:
            if record.status is StepStatus.FAILED:
                raise self._recorded_failure(record)
            env = self._env(step_id, action.kind, task, position, record.attempt)
            recovered = self._revisit(action, env, record, input_hash, notice)
            if recovered is not None:
                notice(StepPhase.RECOVERED, recovered.detail, timed=True)
                return action.value(env.store, recovered.result)
            attempt = record.attempt + 1
        env = self._env(step_id, action.kind, task, position, attempt)
        return self._execute(action, env, input_hash, notice, has_row=record is not None)

    def _revisit(
        self,
        action: StepAction,
        env: StepEnv,
        record: StepRecord,
        input_hash: str,
        notice: Callable[..., None],
    ) -> Recovery | None:
        """A recorded position that did not finish: its recovery when it turns out done
        (and is now recorded so), else None after it was put right for another attempt.
        A recovery that cannot decide (a step marked not retryable, a refused rollback)
        is not the step's failure: the step stays as it was for the next resume, unless
        the caller goes on past it (``_settle``)."""
        try:
            started = self._started_record(record)
            if "ghost" in started:
                from acode.engine.rollback import with_as_left

                # What a pause found, for the rollback to tell a person's changes.
                started = with_as_left(self._journal.history, record, started)
            if env.strategy == "prompt":
                env = env._replace(strategy=self._ask_strategy(record))
            recovery = action.recover(env, started)
        except BaseException as exc:
            self._unsettle(env.ctx, input_hash, exc)
            raise
        log_event(
            StatePaths(self.workspace),
            "step_recovery",
            session_id=self.id,
            step=record.step_id,
            kind=action.kind.value,
            action=recovery.action.value,
            detail=recovery.detail,
            restored=list(recovery.restored),
        )
        if recovery.action is RecoveryAction.ALREADY_DONE:
            outcome = Outcome(recovery.result, files=recovery.files)
            try:
                self._finish(env, input_hash, outcome, has_row=True, recovered=True)
            except BaseException as exc:
                self._record_failure(exc, env.ctx, input_hash, notice, recovery.files)
            return recovery
        if recovery.action is RecoveryAction.ROLLBACK_AND_RETRY:
            base = self._step_payload(env.ctx, input_hash)
            rolled_back = {**base, "restored": list(recovery.restored), "started": started}
            try:
                self._journal.write(
                    [(EventType.STEP_ROLLED_BACK, rolled_back)],
                    steps=[step_record(StepStatus.ROLLED_BACK, 0, base)],
                    checkpoint=False,
                )
            except BaseException as exc:
                self._record_failure(exc, env.ctx, input_hash, notice)
            notice(StepPhase.ROLLED_BACK, recovery.detail)
        return None

    def _ask_strategy(self, record: StepRecord) -> InProgressStrategy:
        """Strategy "prompt": the person decides; with no one to ask, roll back (the
        safe default)."""
        if self.strategy_prompt is None:
            return "rollback"
        choice = self.strategy_prompt(record.step_id, record.kind)
        if choice is None:
            raise PauseRequested  # the person chose to stop here
        return choice

    def _execute(
        self,
        action: StepAction,
        env: StepEnv,
        input_hash: str,
        notice: Callable[..., None],
        *,
        has_row: bool,
    ) -> Any:
        prepared = _NOTHING_PREPARED
        try:
            if action.durable_start:
                has_row = True
                prepared = action.prepare(env)
                base = self._step_payload(env.ctx, input_hash)
                self._journal.write(
                    [(EventType.STEP_STARTED, {**base, **prepared.record})],
                    steps=[step_record(StepStatus.IN_PROGRESS, 0, base)],
                    blobs=prepared.blobs,
                    checkpoint=False,
                )
                if "ghost" in prepared.record:
                    self._ghosted = env.ctx
            notice(StepPhase.STARTED, None)
            with self.interrupts.interruptible():
                outcome = action.execute(env, prepared)
        except BaseException as exc:
            self._record_failure(exc, env.ctx, input_hash, notice)
        try:
            self._finish(env, input_hash, outcome, has_row=has_row)
        except BaseException as exc:
            self._record_failure(exc, env.ctx, input_hash, notice, outcome.files)
        self._progress.update(self._journal)
        notice(StepPhase.DONE, None, timed=True)
        self.interrupts.check()
        if outcome.value is not None:
            return outcome.value
        return action.value(env.store, outcome.result)

    def _record_failure(
        self,
        exc: BaseException,
        ctx: StepContext,
        input_hash: str,
        notice: Callable[..., None],
        files: Sequence[FileRow] = (),
    ) -> NoReturn:
        """Called in the handler of ``exc``, raised by step ``ctx`` before its outcome
        was recorded: record the step as failed and raise its StepFailedError. What is
        not the step's own failure (``_step_failure``), and a failure that cannot be
        recorded, leave the step unsettled and are raised as they are. ``files``: the
        workspace files as the step left them, when it ran to its end."""
        fault = environment_fault(exc, f"step {ctx.step_id!r}")
        if fault is not None:  # a full disk, say: the step runs again on resume
            self._unsettle(ctx, input_hash, fault, files)
            raise fault from exc
        failure = _step_failure(exc, ctx.step_id)
        if failure is None:
            self._unsettle(ctx, input_hash, exc, files)
            raise exc
        try:
            self._fail(ctx, input_hash, failure.message, files)
        except BaseException as unrecorded:
            # The caller gets the error of the write, which a replay raises again.
            self._unsettle(ctx, input_hash, unrecorded, files)
            raise
        notice(StepPhase.FAILED, failure.message)
        if failure is exc:
            raise failure
        raise failure from exc

    def _unsettle(
        self,
        ctx: StepContext,
        input_hash: str,
        exc: BaseException,
        files: Sequence[FileRow] = (),
    ) -> None:
        """Note that step ``ctx`` ended by ``exc`` with no outcome recorded. Nothing is
        written now: an interrupted run, an unavailable model or database leave the step
        for resume to finish. A caller that goes on past it has it recorded as failed
        first (``_settle``), so that every position a call took has its outcome in the
        history, in order, and a replay raises where the first run raised."""
        if ctx.position + 1 < self._recorded_until:
            # Later positions were recorded (by an acode before every failure was): an
            # outcome written now would come after theirs. It stays as it was.
            return
        self._unsettled = _Unsettled(
            ctx=ctx, input_hash=input_hash, error=_error_text(exc), files=tuple(files)
        )

    def _settle(self) -> None:
        """Record the unsettled step as failed, now that the caller has gone on."""
        unsettled = self._unsettled
        assert unsettled is not None
        ctx = unsettled.ctx
        entries = []
        if self._journal.summary is not None and self._journal.summary.pending_approval == (
            ctx.step_id
        ):
            entries = self._to(SessionState.EXECUTING, f"step {ctx.step_id} went unanswered")
        # The error the caller saw, which a replay raises again.
        self._fail(ctx, unsettled.input_hash, unsettled.error, unsettled.files, entries)
        self._unsettled = None
        self._notice(ctx.position, ctx.step_id, StepKind(ctx.kind), ctx.task_id, None)(
            StepPhase.FAILED, f"{unsettled.error} (the session went on without this step)"
        )

    def _recorded_failure(self, record: StepRecord) -> StepFailedError:
        """The error of a step recorded as failed, raised again where the first run
        raised it."""
        error = self._outcome_payload(record)
        return StepFailedError(
            str(error.get("error")),
            hint=f"step {record.step_id!r} failed in an earlier run of this session",
        )

    def _check_id(self, step_id: str) -> None:
        """Refuse an id that is not one, or that the session used before."""
        if not STEP_ID_PATTERN.fullmatch(step_id):
            raise UsageError(
                f"invalid step id {step_id!r}",
                hint="use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
            )
        if step_id in self._seen_ids or (self._ledger_sid is not None and self._in_ledger(step_id)):
            raise NonDeterminismError(
                f"step id {step_id!r} is used twice in session {self.short_id}",
                hint="every step of a session needs its own id",
            )

    def _in_ledger(self, step_id: str) -> bool:
        """Whether the ledger of the skipped steps holds ``step_id``. A seek each, until
        the seeks have cost what reading the whole ledger once does: from then on its
        ids are in memory, so a long run after skip_completed() pays at most twice the
        cheaper of the two, and its steps cost what a fresh session's do (NFR-004,
        docs/requirements.md)."""
        assert self._ledger_sid is not None
        if self._ledger_seeks_left > 0:
            self._ledger_seeks_left -= 1
            return self._journal.store.has_step_id(self._ledger_sid, step_id)
        self._seen_ids |= self._journal.store.step_id_ledger(self._ledger_sid)
        self._ledger_sid = None
        return step_id in self._seen_ids

    def _advance(self, step_id: str) -> int:
        """Give ``step_id`` the next position, and return it; a step left unsettled
        before it is recorded as failed first."""
        if self._unsettled is not None:
            self._settle()
        self._seen_ids.add(step_id)
        position = self._position
        self._position = position + 1
        return position

    def _claim(
        self, step_id: str, kind: StepKind, input_hash: str
    ) -> tuple[int, StepRecord | None]:
        """Take the next position; return it with the record found there, if any."""
        self._check_id(step_id)
        position = self._position
        # Calls take positions in order, so by the time a call reaches a position past
        # the recorded ones, every recorded id has been claimed again in _seen_ids.
        record = self._replay.record(position)
        if record is not None and (
            record.step_id != step_id
            or record.kind != kind.value
            or (record.input_hash or NO_INPUT) != input_hash
        ):
            raise NonDeterminismError(
                f"session {self.short_id}, position {position}: recorded step "
                f"{record.step_id!r} ({record.kind}), now called as {step_id!r} ({kind.value})"
                + (
                    ""
                    if record.step_id != step_id or record.kind != kind.value
                    else " with a different input"
                ),
                hint="the code or plan changed since the session was recorded; restore it, "
                "or start a new session",
            )
        return self._advance(step_id), record

    def _env(
        self, step_id: str, kind: StepKind, task: str | None, position: int, attempt: int
    ) -> StepEnv:
        ctx = self._context(step_id, kind, task, position, attempt)
        return StepEnv(
            ctx=ctx,
            store=self._journal.store,
            config=self.config,
            strategy=self.strategy,
            fresh_after_ns=self._fresh_after_ns,
        )

    def _context(
        self, step_id: str, kind: StepKind, task: str | None, position: int, attempt: int
    ) -> StepContext:
        # Built by acode.domain.frozen: every step makes one.
        return build(
            StepContext,
            session_id=self._journal.row.id,
            step_id=step_id,
            kind=str(kind),  # a StrEnum's value, without the lookup of Enum.value
            attempt=attempt,
            position=position,
            idempotency_key=f"{self._key_prefix}{step_id}:{attempt}",
            workspace=self.workspace,
            task_id=task,
        )

    def _step_payload(self, ctx: StepContext, input_hash: str) -> dict[str, Any]:
        """The fields every event about a step carries."""
        # No idempotency key: it is made from the session, step and attempt recorded here.
        payload: dict[str, Any] = {"step": ctx.step_id, "position": ctx.position}
        if ctx.kind != DEFAULT_STEP_KIND:
            payload["kind"] = ctx.kind
        if ctx.attempt != FIRST_ATTEMPT:
            payload["attempt"] = ctx.attempt
        if input_hash != NO_INPUT:
            payload["input_hash"] = input_hash
        if ctx.task_id is not None:
            payload["task"] = ctx.task_id
        return payload

    def _finish(
        self,
        env: StepEnv,
        input_hash: str,
        outcome: Outcome,
        *,
        has_row: bool,
        recovered: bool = False,
    ) -> None:
        """Record the step's completion. A step whose completion is its first event
        needs no `steps` row: its event is its record, found by a replay in the order
        of the history. One whose row exists (a start record, an earlier attempt) has
        it brought up to date in the same commit."""
        payload = self._step_payload(env.ctx, input_hash)
        payload["result"] = outcome.result
        if recovered:
            payload["recovered"] = True
        if not (has_row or outcome.messages or outcome.blobs or outcome.files):
            self._journal.write_completion(payload)
            return
        self._journal.write(
            [(EventType.STEP_COMPLETED, payload)],
            steps=[step_record(StepStatus.COMPLETED, 0, payload)] if has_row else (),
            messages=outcome.messages,
            blobs=outcome.blobs,
            files=outcome.files,
        )
        if outcome.messages and self._transcript is not None:
            self._transcript.extend(content for _, content in outcome.messages)

    def _fail(
        self,
        ctx: StepContext,
        input_hash: str,
        error: str,
        files: Sequence[FileRow] = (),
        entries: Sequence[tuple[EventType, dict[str, Any]]] = (),
    ) -> None:
        base = self._step_payload(ctx, input_hash)
        self._journal.write(
            [*entries, (EventType.STEP_FAILED, {**base, "error": error})],
            steps=[step_record(StepStatus.FAILED, 0, base)],
            files=files,
        )

    def _edited(self, what: str, hint: str | None = None) -> CheckpointError:
        return CheckpointError(
            f"session {self.short_id}: {what}: the database was edited",
            hint=hint or "inspect with `acode resume --verify`",
            code=ErrorCode.CHAIN_BROKEN,
        )

    def _outcome_payload(self, record: StepRecord) -> dict[str, Any]:
        return self._replay.outcome(record)[1]

    def _recorded_result(self, record: StepRecord) -> Any:
        return self._outcome_payload(record)["result"]

    def _started_record(self, record: StepRecord) -> dict[str, Any]:
        event_type, payload = self._replay.outcome(record)
        if event_type == EventType.STEP_ROLLED_BACK:
            started: dict[str, Any] = payload["started"]
            return started
        return payload

    def _conversation(self) -> list[dict[str, Any]]:
        if self._transcript is None:
            # Each message held to the digest its step's event recorded of it.
            rows = self._journal.history.messages()
            self._transcript = [json.loads(r.content) for r in rows]
        return self._transcript

    def _notice(
        self, position: int, step_id: str, kind: StepKind, task: str | None, title: str | None
    ) -> Callable[..., None]:
        """What tells the observer of a phase of this step; with no observer, nothing
        (not even the notice) is made."""
        observer = self.observer
        if isinstance(observer, NullObserver):
            return _ignore
        total = self.total_steps
        # From now, not from STARTED: what comes before the step's command (a recovery, a
        # ghost snapshot of the work tree, the durable start record) is the step's cost
        # too, and in a big repository it is most of it.
        began = time.monotonic()

        def tell(phase: StepPhase, detail: str | None, *, timed: bool = False) -> None:
            """``timed``: give the time since this step was taken up."""
            duration_ms = int((time.monotonic() - began) * 1000) if timed else None
            observer.on_step(
                StepNotice(
                    phase=phase,
                    position=position,
                    step_id=step_id,
                    kind=kind.value,
                    title=title or step_id,
                    task_id=task,
                    total=total,
                    detail=detail,
                    duration_ms=duration_ms,
                )
            )

        return tell

    # -- lifecycle ----------------------------------------------------------------------

    def _to(self, target: SessionState, reason: str) -> list[tuple[EventType, dict[str, Any]]]:
        current = self.state
        if current is target or not can_transition(current, target):
            return []
        return [
            (EventType.STATE_CHANGED, {"from": current.value, "to": target.value, "reason": reason})
        ]

    def _transition(self, target: SessionState, reason: str) -> None:
        if self._unsettled is not None and is_terminal(target):
            self._settle()  # the session ends without it: its outcome is known now
        entries = self._to(target, reason)
        if entries:
            if target is SessionState.PAUSED:
                entries[0][1].update(self._as_left())
            self._journal.write(entries)
            self._progress.update(self._journal, final=True)
            if is_terminal(target):
                from acode.system.snapshot import prune_snapshots

                # Snapshots exist for rolling back; a finished session never rolls back.
                prune_snapshots(self.workspace, self.id, keep_backups=True)

    def _as_left(self) -> dict[str, Any]:
        """At a pause inside a run step whose ghost snapshot this process took: the work
        tree as the interruption left it, kept as a snapshot too, so that a resume tells
        a person's changes since from the step's own (acode.engine.rollback). A pause
        in a step this process did not run (stopped at its recovery) keeps the earlier
        pause's snapshot: the work tree may hold a person's changes by now."""
        unsettled = self._unsettled
        if unsettled is None or unsettled.ctx is not self._ghosted:
            return {}
        from acode.engine.rollback import take_as_left

        return take_as_left(self.workspace, unsettled.ctx)

    def checkpoint(self, label: str) -> Mark:
        """Name the point the session has reached (``acode session checkpoint`` does it
        for a session no process runs). Every step is checkpointed already: a mark adds
        a name, shown in the history, the progress file and the export. A label the
        session has already marked returns that mark, so a resumed program that calls
        this again records nothing new."""
        from acode.engine.marks import record_mark

        self._require_active()
        mark, new = record_mark(self._journal, label)
        if new:
            self._progress.update(self._journal)
        return mark

    def complete(self) -> None:
        self._transition(SessionState.COMPLETED, "all steps done")

    def fail(self, reason: str) -> None:
        self._transition(SessionState.FAILED, reason)

    def pause(self, reason: str) -> None:
        self._transition(SessionState.PAUSED, reason)

    def cancel(self, reason: str) -> None:
        self._transition(SessionState.CANCELLED, reason)

    def _require_active(self) -> None:
        if self._closed:
            raise UsageError(f"session {self.short_id} is closed")
        state = self._journal.state
        if is_terminal(state):
            raise UsageError(f"session {self.short_id} is {state.value}; it takes no more steps")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._progress.flush()
                if self._sync is not None:
                    self._sync.close()  # the last push and the lease, within a grace period
            finally:
                self._lock.release()
                self._journal.store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Leaving the block normally completes the session. A pause records PAUSED; a
        failed step records FAILED; any other exception leaves the session as it was,
        resumable, exactly as a crash would."""
        if self._closed:
            return
        try:
            if exc_type is None:
                self.complete()
            elif issubclass(exc_type, (PauseRequested, KeyboardInterrupt)):
                self.pause("interrupted")
            elif issubclass(exc_type, StepFailedError):
                self.fail(str(exc))
        finally:
            self.close()


def journal_of(session: Session) -> Journal:
    """The journal a session writes: for acode's own layers (work sessions, tests), not
    part of the library's API, which reads a session through its methods."""
    return session._journal
