"""Performing a step: the position it takes, what a replay finds recorded there, its
recovery when it was left unfinished, its start record, its side effect and the commit
of its outcome. Every kind of step goes this way (``perform``); a python step without
input or observer has two lanes of its own, one new and one replayed, that record the
same (tests/engine/test_step_lane.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

from acode.domain.config import AcodeConfig
from acode.domain.events import EventType
from acode.domain.frozen import build
from acode.domain.idempotency import key_prefix
from acode.domain.kinds import StepKind
from acode.domain.reducer import FIRST_ATTEMPT, StepRecord, StepStatus, step_record
from acode.engine.interrupts import Interrupts
from acode.engine.journal import Journal
from acode.engine.notices import Notice, ignore, step_notice
from acode.engine.observer import Approver, NullObserver, Observer, StepPhase
from acode.engine.progress_file import ProgressFile
from acode.engine.replay import GENERAL, NO_INPUT
from acode.engine.state_changes import StateChanges
from acode.engine.step_failures import StepFailures
from acode.engine.step_positions import StepPositions
from acode.engine.step_records import input_hash as hash_of_input
from acode.engine.step_records import step_payload
from acode.engine.steps.base import (
    InProgressStrategy,
    Outcome,
    Prepared,
    Recovery,
    RecoveryAction,
    StepAction,
    StepContext,
    StepEnv,
    Wait,
    WaitingAction,
)

# The other step kinds load on their first call: a library caller's session of python
# steps, or its replay, needs neither git, subprocesses nor the model client.
from acode.engine.steps.python_step import (
    PythonStep,
    StepFunction,
    is_retryable,
    recorded_form,
)
from acode.errors import PauseRequested, StepFailedError
from acode.system.log import log_event
from acode.system.workspace import StatePaths

if TYPE_CHECKING:
    from acode.engine.handoff import Handoff

__all__ = ["StepExecutor", "StrategyPrompt"]

# Asked for an interrupted step under strategy "prompt": (step id, kind) -> "rollback",
# "retry", or None to stop. An implementation with no one to ask returns "rollback".
StrategyPrompt = Callable[[str, str], "InProgressStrategy | None"]

# Most steps prepare nothing: one shared, never changed.
_NOTHING_PREPARED = Prepared()


class StepExecutor:
    """The steps of one session, performed in the order of their calls. What a caller
    may set on the session (its observer, approver, interrupts and strategy) is held
    here, where every step reads it."""

    def __init__(
        self,
        *,
        journal: Journal,
        workspace: Path,
        config: AcodeConfig,
        progress: ProgressFile,
        states: StateChanges,
        observer: Observer,
        approver: Approver | None,
        interrupts: Interrupts,
        strategy: InProgressStrategy,
        strategy_prompt: StrategyPrompt | None,
        fresh_after_ns: int | None,
    ) -> None:
        self._journal = journal
        self._workspace = workspace
        self._config = config
        self._progress = progress
        self._states = states
        self.observer = observer
        self.approver = approver
        self.interrupts = interrupts
        self.strategy = strategy
        self.strategy_prompt = strategy_prompt
        self._fresh_after_ns = fresh_after_ns
        self.positions = StepPositions(journal)
        self._replay = self.positions.replay
        self._recorded_until = self.positions.recorded_until
        self.failures = StepFailures(journal, states, self._recorded_until, self.notice)
        self._key_prefix = key_prefix(journal.session_id)
        self._transcript: list[dict[str, Any]] | None = None
        # The run step whose ghost snapshot this process took (``as_left``).
        self._ghosted: StepContext | None = None
        # Records the work tree after the steps that may change it (None: hand-off off).
        self.handoff: Handoff | None = None

    # -- python steps ------------------------------------------------------------------

    def python(
        self,
        step_id: str,
        fn: Callable[[StepContext], Any],
        input: Any,
        task: str | None,
        title: str | None,
    ) -> Any:
        """``Session.step``, on an active session. A python step without input or
        observer takes a lane of its own: replayed, or new past the recorded history."""
        if input is None and isinstance(self.observer, NullObserver):
            positions = self.positions
            position = positions.position
            if position < self._recorded_until:
                # The replay's own lane: the recorded result of a completed python step
                # called again with its id, as a resumed library caller's loop does for
                # every step it had done. Anything else there (a different id or kind, an
                # input, a failure, a step with a `steps` row to check) is GENERAL:
                # ``perform`` decides, and raises what it finds.
                replayed = self._replay.completed(position, step_id)
                if replayed is not GENERAL:
                    # The id is the one recorded here, so ``check_id`` has nothing to
                    # refuse: acode checked it when it recorded it, and a history gives
                    # an id one position. Taken without the settling of ``_advance``: no
                    # step before a recorded position is left unsettled
                    # (``StepFailures.unsettle`` leaves those as they were).
                    positions.seen_ids.add(step_id)
                    positions.position = position + 1
                    return replayed
            elif is_retryable(fn):
                return self._new_step(step_id, fn, task)
        # Built by acode.domain.frozen: one per call.
        action = build(PythonStep, fn=fn, arguments=input, kind=StepKind.PYTHON)
        return self.perform(action, step_id, task, title)

    def _new_step(self, step_id: str, fn: StepFunction, task: str | None) -> Any:
        """A python step past the recorded history, for a retryable function without
        input, with no observer to tell: most steps of a library's loop. ``perform``
        does the same for it, through the branches of every other kind of step and
        history; tests/engine/test_step_lane.py holds the two to the same records."""
        self.positions.check_id(step_id)
        position = self._advance(step_id)
        ctx = self._context(step_id, StepKind.PYTHON, task, position, FIRST_ATTEMPT)
        try:
            result = recorded_form(self.interrupts.call(fn, ctx), step_id)
        except BaseException as exc:
            self.failures.record(exc, ctx, NO_INPUT, ignore)
        payload = step_payload(ctx, NO_INPUT)
        payload["result"] = result
        try:
            self._journal.write_completion(payload)
        except BaseException as exc:
            self.failures.record(exc, ctx, NO_INPUT, ignore)
        self._progress.update(self._journal)
        self.interrupts.check()
        return result

    # -- every kind --------------------------------------------------------------------

    def perform(self, action: StepAction, step_id: str, task: str | None, title: str | None) -> Any:
        """Run ``action`` as step ``step_id`` once, and return what its caller gets."""
        input_hash = hash_of_input(action.input())
        record = self.positions.recorded(step_id, action.kind, input_hash)
        position = self._advance(step_id)
        if record is not None and record.status is StepStatus.COMPLETED:
            # Replay of a completed step: its recorded result, decoded only now, with no
            # step context, key or query (the record came with its window).
            self.notice(position, step_id, action.kind, task, title)(StepPhase.SKIPPED, None)
            return action.value(self._journal.store, self._recorded_result(record))
        notice = self.notice(position, step_id, action.kind, task, title)
        attempt = 1
        if record is not None:
            if record.status is StepStatus.FAILED:
                raise self._recorded_failure(record)
            env = self._env(step_id, action.kind, task, position, record.attempt)
            if action.waits:
                # Taken up again as the attempt that waited: it did nothing to recover.
                return self._execute(action, env, input_hash, notice, has_row=True)
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
        notice: Notice,
    ) -> Recovery | None:
        """A recorded position that did not finish: its recovery when it turns out done
        (and is now recorded so), else None after it was put right for another attempt.
        A recovery that cannot decide (a step marked not retryable, a refused rollback)
        is not the step's failure: the step stays as it was for the next resume, unless
        the caller goes on past it (``StepFailures.settle``)."""
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
            self.failures.unsettle(env.ctx, input_hash, exc)
            raise
        log_event(
            StatePaths(self._workspace),
            "step_recovery",
            session_id=self._journal.session_id,
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
                self.failures.record(exc, env.ctx, input_hash, notice, recovery.files)
            if self.handoff is not None:
                self.handoff.after_step(self._journal, env.ctx)
            return recovery
        if recovery.action is RecoveryAction.ROLLBACK_AND_RETRY:
            base = step_payload(env.ctx, input_hash)
            rolled_back = {**base, "restored": list(recovery.restored), "started": started}
            try:
                self._journal.write(
                    [(EventType.STEP_ROLLED_BACK, rolled_back)],
                    steps=[step_record(StepStatus.ROLLED_BACK, 0, base)],
                    checkpoint=False,
                )
            except BaseException as exc:
                self.failures.record(exc, env.ctx, input_hash, notice)
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
        notice: Notice,
        *,
        has_row: bool,
    ) -> Any:
        prepared = _NOTHING_PREPARED
        try:
            outcome = None
            if action.waits:
                outcome = cast(WaitingAction, action).awaited(env, has_row)
            if outcome is None:
                if action.durable_start:
                    has_row = True
                    prepared = action.prepare(env)
                    base = step_payload(env.ctx, input_hash)
                    self._journal.write(
                        [(EventType.STEP_STARTED, {**base, **prepared.record})],
                        steps=[step_record(StepStatus.IN_PROGRESS, 0, base)],
                        blobs=prepared.blobs,
                        checkpoint=False,
                    )
                    if "ghost" in prepared.record:
                        self._ghosted = env.ctx
                        if self.handoff is not None:
                            self.handoff.snapshot_taken()
                notice(StepPhase.STARTED, None)
                with self.interrupts.interruptible():
                    outcome = action.execute(env, prepared)
            if outcome.wait is not None:
                self._wait(env.ctx, input_hash, outcome.wait, has_row=has_row)
        except BaseException as exc:
            self.failures.record(exc, env.ctx, input_hash, notice)
        try:
            self._finish(env, input_hash, outcome, has_row=has_row)
        except BaseException as exc:
            self.failures.record(exc, env.ctx, input_hash, notice, outcome.files)
        if self.handoff is not None:
            self.handoff.after_step(self._journal, env.ctx)
        self._progress.update(self._journal)
        if outcome.told is None:
            notice(StepPhase.DONE, None, timed=True)
        else:
            notice(*outcome.told)
        self.interrupts.check()
        if outcome.value is not None:
            return outcome.value
        return action.value(env.store, outcome.result)

    def _wait(self, ctx: StepContext, input_hash: str, wait: Wait, *, has_row: bool) -> NoReturn:
        """Step ``ctx`` waits: recorded so, with the session's state, the first time."""
        if not has_row:
            base = step_payload(ctx, input_hash)
            self._journal.write(
                [(wait.event, {**base, **wait.fields}), *self._states.to(*wait.state)],
                steps=[step_record(StepStatus.IN_PROGRESS, 0, base)],
            )
            self._progress.update(self._journal, final=True)
        raise wait.error

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
        of the history. One whose row exists (a start record, an earlier attempt), or
        that records events of its own with it, has its row brought up to date in the
        same commit."""
        payload = step_payload(env.ctx, input_hash)
        payload["result"] = outcome.result
        if recovered:
            payload["recovered"] = True
        entries = [*outcome.events]
        if outcome.state is not None:
            entries += self._states.to(*outcome.state)
        has_row = has_row or bool(entries)
        if not (has_row or outcome.messages or outcome.blobs or outcome.files):
            self._journal.write_completion(payload)
            return
        entries.append((EventType.STEP_COMPLETED, payload))
        self._journal.write(
            entries,
            steps=[step_record(StepStatus.COMPLETED, 0, payload)] if has_row else (),
            messages=outcome.messages,
            blobs=outcome.blobs,
            files=outcome.files,
        )
        if outcome.messages and self._transcript is not None:
            self._transcript.extend(content for _, content in outcome.messages)

    # -- what a step is told, and what it recorded ------------------------------------

    def _advance(self, step_id: str) -> int:
        """Give ``step_id`` the next position, and return it; a step left unsettled
        before it is recorded as failed first."""
        if self.failures.unsettled is not None:
            self.failures.settle()
        positions = self.positions
        positions.seen_ids.add(step_id)
        position = positions.position
        positions.position = position + 1
        return position

    def _env(
        self, step_id: str, kind: StepKind, task: str | None, position: int, attempt: int
    ) -> StepEnv:
        ctx = self._context(step_id, kind, task, position, attempt)
        return StepEnv(
            ctx=ctx,
            store=self._journal.store,
            config=self._config,
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
            workspace=self._workspace,
            task_id=task,
        )

    def notice(
        self, position: int, step_id: str, kind: StepKind, task: str | None, title: str | None
    ) -> Notice:
        return step_notice(self.observer, self._journal, position, step_id, kind, task, title)

    def _recorded_failure(self, record: StepRecord) -> StepFailedError:
        """The error of a step recorded as failed, raised again where the first run
        raised it."""
        error = self._replay.outcome(record)[1]
        return StepFailedError(
            str(error.get("error")),
            hint=f"step {record.step_id!r} failed in an earlier run of this session",
        )

    def _recorded_result(self, record: StepRecord) -> Any:
        return self._replay.outcome(record)[1]["result"]

    def _started_record(self, record: StepRecord) -> dict[str, Any]:
        event_type, payload = self._replay.outcome(record)
        if event_type == EventType.STEP_ROLLED_BACK:
            started: dict[str, Any] = payload["started"]
            return started
        return payload

    def conversation(self) -> list[dict[str, Any]]:
        """The messages of the session's model steps, in order."""
        if self._transcript is None:
            # Each message held to the digest its step's event recorded of it.
            rows = self._journal.history.messages()
            self._transcript = [json.loads(r.content) for r in rows]
        return self._transcript

    def as_left(self) -> dict[str, Any]:
        """At a pause inside a run step whose ghost snapshot this process took: the work
        tree as the interruption left it, kept as a snapshot too, so that a resume tells
        a person's changes since from the step's own (acode.engine.rollback). A pause
        in a step this process did not run (stopped at its recovery) keeps the earlier
        pause's snapshot: the work tree may hold a person's changes by now."""
        unsettled = self.failures.unsettled
        if unsettled is None or unsettled.ctx is not self._ghosted:
            return {}
        from acode.engine.rollback import take_as_left

        return take_as_left(self._workspace, unsettled.ctx)
