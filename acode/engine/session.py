"""A running session: executes steps once, records them, and replays them on resume.

``Session.step`` and the kind helpers (``read``, ``write``, ...) take a position in
the session's sequence of calls. On a resumed session, a call at a position that
was completed returns the recorded result without running; a call whose id, kind
or input differs from the record at that position raises NonDeterminismError; a
call found started but unfinished is handled by its kind (see ``steps/``).

``Session`` is the library's facade: it checks that the session takes steps and hands
them to the step executor (acode.engine.step_executor), which holds the positions
(step_positions), the failures left to settle (step_failures) and the notices to the
observer (notices); the session's own state changes are acode.engine.state_changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from acode.domain.config import AcodeConfig
from acode.domain.states import SessionState, is_terminal
from acode.engine.interrupts import Interrupts
from acode.engine.journal import Journal
from acode.engine.observer import Approver, NullObserver, Observer
from acode.engine.progress_file import ProgressFile
from acode.engine.state_changes import StateChanges
from acode.engine.step_executor import StepExecutor, StrategyPrompt
from acode.engine.steps.base import InProgressStrategy, StepAction, StepContext
from acode.errors import PauseRequested, StepFailedError, UsageError
from acode.security.signing import Signer
from acode.system.locks import SessionLock
from acode.system.workspace import StatePaths

if TYPE_CHECKING:
    from acode.domain.marks import Mark
    from acode.engine.handoff import Handoff
    from acode.engine.leases import StoreLease
    from acode.engine.sync_link import SyncLink
    from acode.system.process import CommandResult

__all__ = ["Session", "StrategyPrompt", "journal_of"]


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
        lease: StoreLease | None = None,
        observer: Observer | None = None,
        approver: Approver | None = None,
        interrupts: Interrupts | None = None,
        strategy: InProgressStrategy | None = None,
        strategy_prompt: StrategyPrompt | None = None,
        sync: SyncLink | None = None,
        handoff: Handoff | None = None,
        fresh_after_ns: int | None = None,
    ) -> None:
        """``handoff``: records and pushes the work tree (acode.engine.handoff); it is
        started here, after a resume wrote its ``session_resumed`` event. ``lease``:
        the session's lease in a PostgreSQL store (acode.engine.leases), given back at
        ``close`` with the lock."""
        self._journal = journal
        self.workspace = workspace
        self.config = config
        self._lock = lock
        self._lease = lease
        self._signer = signer
        self._closed = False
        self._progress = ProgressFile(StatePaths(workspace))
        self._states = StateChanges(journal, self._progress, workspace)
        observer = observer or NullObserver()
        self._steps = StepExecutor(
            journal=journal,
            workspace=workspace,
            config=config,
            progress=self._progress,
            states=self._states,
            observer=observer,
            approver=approver,
            interrupts=interrupts or Interrupts(),
            strategy=strategy or config.resume.in_progress_strategy,
            strategy_prompt=strategy_prompt,
            fresh_after_ns=fresh_after_ns,
        )
        self._sync = sync
        if sync is not None:
            sync.start(journal, observer)
        self._handoff = handoff
        if handoff is not None:
            if lease is not None:
                handoff.may_push = lease.still_ours
            summary = journal.summary
            handoff.start(journal, resumed=summary is not None and summary.resumes > 0)
            self._steps.handoff = handoff

    # -- what a caller may set: read by every step ---------------------------------------

    @property
    def observer(self) -> Observer:
        return self._steps.observer

    @observer.setter
    def observer(self, observer: Observer) -> None:
        self._steps.observer = observer

    @property
    def approver(self) -> Approver | None:
        return self._steps.approver

    @approver.setter
    def approver(self, approver: Approver | None) -> None:
        self._steps.approver = approver

    @property
    def interrupts(self) -> Interrupts:
        return self._steps.interrupts

    @interrupts.setter
    def interrupts(self, interrupts: Interrupts) -> None:
        self._steps.interrupts = interrupts

    @property
    def strategy(self) -> InProgressStrategy:
        return self._steps.strategy

    @strategy.setter
    def strategy(self, strategy: InProgressStrategy) -> None:
        self._steps.strategy = strategy

    @property
    def strategy_prompt(self) -> StrategyPrompt | None:
        return self._steps.strategy_prompt

    @strategy_prompt.setter
    def strategy_prompt(self, prompt: StrategyPrompt | None) -> None:
        self._steps.strategy_prompt = prompt

    # -- what a caller may read ----------------------------------------------------

    @property
    def id(self) -> str:
        return self._journal.session_id

    @property
    def short_id(self) -> str:
        """How people see this session: its shortest unique id prefix."""
        return self._journal.short_id

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
        return self._steps.positions.skip_completed()

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
        self._require_active()
        return self._steps.python(step_id, fn, input, task, title)

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

        action = ModelStep(prompt=prompt, history=tuple(self._steps.conversation()))
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

        action = ApproveStep(
            question=question,
            history=self._journal.history,
            signer=self._signer,
            approver=self.approver,
            subject=subject,
        )
        result: bool = self._perform(action, step_id, task, title or f"approve {question}")
        return result

    def _perform(
        self, action: StepAction, step_id: str, task: str | None, title: str | None
    ) -> Any:
        self._require_active()
        return self._steps.perform(action, step_id, task, title)

    # -- lifecycle ----------------------------------------------------------------------

    def _transition(self, target: SessionState, reason: str) -> None:
        failures = self._steps.failures
        if failures.unsettled is not None and is_terminal(target):
            failures.settle()  # the session ends without it: its outcome is known now
        if self._handoff is not None:
            # The work tree as the session leaves it: a step that was not recorded
            # (a python step's files, a record that failed) travels too.
            summary = self._journal.summary
            self._handoff.record(self._journal, summary.current_step if summary else None, 0)
            if is_terminal(target):
                self._handoff.ended()
        self._states.record(target, reason, self._steps.as_left)

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
                if self._handoff is not None:
                    self._handoff.close()  # the last push of the ref, within a grace period
            finally:
                try:
                    if self._lease is not None:
                        self._lease.release()
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
