"""Resume: select a session, refuse what cannot be resumed, take the lock, verify the
checkpoint and the chain, plan the continuation, and only then write.

Every check runs before the first write, so a resume that fails leaves the session
exactly as it was.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from acode.domain.config import AcodeConfig
from acode.domain.events import EventType
from acode.domain.kinds import StepKind
from acode.domain.position import Position, position_in
from acode.domain.reducer import SessionSummary, StepRecord, StepStatus
from acode.domain.states import SessionState, is_terminal
from acode.domain.timing import WorkTime
from acode.engine.catalog import (
    LEDGER_KINDS,
    AgentRecord,
    current_config,
    find_session,
    recorded_agent,
    recorded_config,
    recorded_mode,
    recorded_plan,
    resumable_sessions,
)
from acode.engine.journal import Journal, verify_history
from acode.engine.lifecycle import (
    Workspace,
    existing_workspace,
    open_handoff,
    open_workspace_store,
    session_config,
    take_lock_and_lease,
)
from acode.engine.progress_file import progress_path, recorded_checkpoint
from acode.engine.sync_link import open_sync_link, sync_status
from acode.errors import (
    AcodeError,
    CheckpointError,
    ContinuationError,
    EnvironmentValidationError,
    ErrorCode,
    NothingToResumeError,
    SessionNotFoundError,
    SessionPrunedError,
    TerminalStateError,
    UsageError,
)
from acode.resume.environment import (
    ChangedFile,
    EnvironmentReport,
    RollbackPreview,
    changed_files,
    check_model,
    config_changes,
    since_pause,
)
from acode.security.signing import load_signer
from acode.store.base import EventStore
from acode.store.records import SessionRow
from acode.system.clock import Clock, SystemClock
from acode.system.log import log_event
from acode.system.workspace import StatePaths

if TYPE_CHECKING:
    from acode.domain.continuation import ContinuationPlan
    from acode.domain.plan import Plan
    from acode.engine.interrupts import Interrupts
    from acode.engine.observer import Approver, Observer
    from acode.engine.session import Session, StrategyPrompt
    from acode.engine.steps.base import InProgressStrategy
    from acode.resume.arrival import Arrival
    from acode.sync.status import SyncStatus

__all__ = [
    "ChangedFilesAction",
    "ResumePreview",
    "log_refusal",
    "preview_in",
    "preview_resume",
    "refuse_problems",
    "resume_session",
    "select_for_resume",
]


class ResumePreview(NamedTuple):
    """What a resume would do, found before it does anything: what `acode resume
    --dry-run` shows, as values.

    ``row`` and ``summary`` are the session and its state at its newest checkpoint
    (``summary.steps_completed``, ``summary.total_steps``: None for an agent's), ``plan``
    and ``continuation`` what a plan session skips, what was in progress and what
    remains, ``environment`` the report of the checks (``environment.valid``),
    ``resume_at`` and ``last_completed`` where it goes on and the last step done,
    ``work_time`` how long the completed steps took and the estimate of the rest.
    """

    row: SessionRow
    summary: SessionSummary
    checkpoint_id: int
    plan: Plan | None
    continuation: ContinuationPlan | None
    environment: EnvironmentReport | None = None
    sync: SyncStatus | None = None  # None: no remote configured
    agent: AgentRecord | None = None  # an agent session's task and flags
    start_mode: str | None = None  # chosen with `acode run --mode`: its resume's default
    interrupted_s: int | None = None  # since the session's last event
    replay_order: Mapping[str, object] | None = None  # of the completed steps (FR-037)
    mode: str | None = None  # this resume's (autopilot, interactive, preflight)
    # The newest completed step (None: none yet), where it is in the plan.
    last_completed: Position | None = None
    # How long the completed steps took, and an estimate of the rest.
    work_time: WorkTime | None = None
    # The work tree to bring from another machine first (None: it is here).
    handoff: Arrival | None = None
    # The session is in a PostgreSQL store (store.url), which no mirror syncs.
    in_store: bool = False

    @property
    def resume_at(self) -> Position | None:
        """The step the resume starts from (None: the session is at its start, or it
        has no plan to tell the next step by)."""
        c, plan = self.continuation, self.plan
        if plan is None or c is None or c.resume_task_number is None:
            return None
        assert c.resume_step_number is not None
        step = plan.tasks[c.resume_task_number - 1].steps[c.resume_step_number - 1]
        return position_in(plan, step.id)

    def log_record(self) -> dict[str, object]:
        """The `session_resume` record, with the interruption's length, the mode and the
        replay order (docs/requirements.md: the resume record, 5 of "Choosing what to
        resume"; FR-037)."""
        c = self.continuation
        remaining = None
        if self.summary.total_steps is not None:
            remaining = self.summary.total_steps - self.summary.steps_completed
        return {
            "event": "session_resume",
            "session_id": self.row.id,
            "checkpoint_id": self.checkpoint_id,
            "skipped_tasks": len(c.skipped_tasks) if c else 0,
            "skipped_steps": self.summary.steps_completed,
            "remaining_steps": remaining,
            "in_progress_action": c.in_progress_action if c else None,
            "sync_status": (
                self.sync.mode.value if self.sync else "in_store" if self.in_store else "local"
            ),
            "environment_valid": self.environment.valid if self.environment else None,
            "interrupted_seconds": self.interrupted_s,
            "mode": self.mode,
            "replay_order": self.replay_order,
        }


def _existing(workspace: Path | str, config: AcodeConfig | None) -> Workspace:
    try:
        return existing_workspace(workspace, config)
    except SessionNotFoundError as exc:
        raise NothingToResumeError(exc.message, hint=exc.hint) from exc


def select_for_resume(store: EventStore, id_or_prefix: str | None) -> SessionRow:
    """The session to resume: the one named, else the most recent resumable one. Whether
    it can be resumed is decided once its history is verified (``_refuse``)."""
    if id_or_prefix is None:
        candidates = resumable_sessions(store)
        if not candidates:
            raise NothingToResumeError(
                "no resumable session in this workspace",
                hint='start one with `acode run PLAN.yaml` or `acode run "TASK"`; '
                "`acode session list` shows all",
            )
        return candidates[0]
    try:
        return find_session(store, id_or_prefix)
    except SessionNotFoundError as exc:
        # Exit 14, nothing to resume; a pruned session keeps its own code.
        code = exc.code if isinstance(exc, SessionPrunedError) else None
        raise NothingToResumeError(exc.message, hint=exc.hint, code=code) from exc


def _refuse(journal: Journal) -> None:
    """Refuse what cannot be resumed, by the signed history: a terminal state, a
    discarded session, a ledger. The sessions row must say what the history says: one
    edited to say otherwise is refused as such, never believed."""
    row, summary = journal.row, journal.summary
    assert summary is not None
    recorded = (summary.state.value, summary.discarded, _kind(journal))
    if (row.state, row.archived, row.kind) != recorded:
        raise CheckpointError(
            f"session {row.short_id}: the sessions table says it is {row.state} (kind "
            f"{row.kind}{', discarded' if row.archived else ''}), its signed history "
            f"{recorded[0]} (kind {recorded[2]}{', discarded' if recorded[1] else ''}): "
            "the database was edited",
            hint="refusing to use it; its history is kept unchanged for inspection "
            f"(`acode session history {row.short_id}`)",
            code=ErrorCode.CHAIN_BROKEN,
        )
    if is_terminal(summary.state):
        raise TerminalStateError(
            f"cannot resume session {row.short_id}: it is {summary.state.value}",
            hint=f"terminal sessions never run again; {_start_again(journal)}",
        )
    if row.kind in LEDGER_KINDS:
        raise UsageError(
            f"session {row.short_id} is a {'work session' if row.kind == 'work' else 'task list'}"
            ": its commands continue it, not `acode resume`",
            hint=f"acode work resume {row.id}" if row.kind == "work" else "acode task list",
        )
    if summary.discarded:
        raise NothingToResumeError(
            f"session {row.short_id} was discarded",
            hint=f"its history stays readable: acode session history {row.short_id}",
        )


def _start_again(journal: Journal) -> str:
    """How to start the work of a finished session anew, as a command that works when
    pasted here: a plan session's plan file, an agent session's task, quoted for the
    shell, with the workspace named when the current directory is outside it."""
    import shlex

    created = journal.history.event(1).payload
    kind = _kind(journal)
    # The directory it started in (the sessions row holds the workspace's name in a
    # shared store), named when it is on this machine.
    started_in = str(created.get("workspace") or journal.row.workspace)
    where = _workspace_option(started_in) if Path(started_in).is_dir() else ""
    if kind == "agent":
        task = created.get("task", journal.row.title)
        return f"start a new one: acode run {shlex.quote(str(task))}{where}"
    if kind == "plan":
        plan_file = created.get("plan_file")
        if isinstance(plan_file, str) and Path(plan_file).is_file():
            shown = shlex.quote(_shown(plan_file))
            return f"start a new one from its plan file: acode run {shown}{where}"
        return (
            f"start a new one from the plan file of {journal.row.title!r}: "
            f"acode run PLAN.yaml{where}"
        )
    if kind in LEDGER_KINDS:
        return "new work starts with the commands of `acode work --help`"
    return "start a new one: run the program that started it again (acode.open_session)"


def _shown(path: str) -> str:
    """``path`` relative to the current directory when it is below it."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except (ValueError, OSError):  # elsewhere, or the current directory is gone
        return path


def _workspace_option(workspace: str) -> str:
    """`` --workspace DIR`` when a command run here would not find ``workspace``."""
    import shlex

    try:
        here = Path.cwd()
    except OSError:
        here = None
    if here is not None and here.is_relative_to(workspace):
        return ""
    return f" --workspace {shlex.quote(workspace)}"


def _cut_short(journal: Journal, paths: StatePaths, later: int | None = None) -> None:
    """Refuse a history that ends before a position known elsewhere: what its progress
    file named, or ``later`` (what the remote mirror holds). Cutting the newest events
    off rolls a session back to an earlier, valid state, which nothing in the database
    itself can tell; these can."""
    summary = journal.summary
    assert summary is not None
    known = [(recorded_checkpoint(progress_path(paths, journal.row.id)), "its progress file")]
    known.append((later, "the remote mirror"))
    for seq, where in known:
        if seq is not None and seq > summary.seq:
            short = journal.row.short_id
            raise CheckpointError(
                f"session {short}: its history ends at event {summary.seq}, but {where} "
                f"knows event {seq}: the newest events were cut off (the session rolled "
                "back to an earlier state): the database was edited",
                hint="refusing to use it; restore the database from a backup, or start a "
                f"new session (`acode session history {short}` shows what is left)",
                code=ErrorCode.CHAIN_BROKEN,
            )


def _kind(journal: Journal) -> str:
    """The session's kind as its first events record it: named there from schema 7 on,
    before that told by its plan or its task (a library session and a ledger look alike)."""
    created = journal.history.event(1).payload
    if isinstance(created.get("kind"), str):
        return str(created["kind"])
    if "task" in created:
        return "agent"
    if journal.summary is not None and journal.summary.plan_hash is not None:
        return "plan"
    return journal.row.kind if journal.row.kind in ("library", *LEDGER_KINDS) else "library"


def _preview(
    journal: Journal, config: AcodeConfig, now_us: int, *, shown: bool = True
) -> ResumePreview:
    """``shown``: with what only a person reads (the last step done, the work's time),
    which a program resuming its own session does without: the time is read from every
    event, and recovery must cost the same at any length."""
    row, history, summary = journal.row, journal.history, journal.summary
    assert summary is not None
    plan = recorded_plan(history, row, summary)
    unfinished = journal.unfinished_steps()
    continuation = None
    if plan is not None:
        from acode.domain.continuation import PlanMismatch, check_positions, plan_continuation

        try:
            check_positions(
                plan, summary.next_position, {s.position: s.step_id for s in unfinished}
            )
        except PlanMismatch as mismatch:
            raise ContinuationError(
                f"cannot plan the continuation of session {row.short_id}: {mismatch}; "
                "it was recorded by a program that ran other steps than its plan",
                hint=f"run that program again (acode.resume_session({row.short_id!r})), or "
                f"give the session up: acode session discard {row.short_id}; nothing was "
                "changed",
            ) from mismatch
        continuation = plan_continuation(plan, _plan_statuses(plan, summary, unfinished))
    last_event_us = history.event(summary.seq).ts_us if summary.seq else now_us
    last_completed = work_time = None
    if shown:
        last_completed = _last_completed(journal.store, row, plan, continuation)
        completed, took_us = journal.store.step_times(row)
        total = summary.total_steps
        remaining = None if total is None else total - summary.steps_completed
        work_time = WorkTime(
            completed_steps=completed, completed_us=took_us, remaining_steps=remaining
        )
    return ResumePreview(
        row=row,
        summary=summary,
        checkpoint_id=journal.checkpoint_id,
        plan=plan,
        continuation=continuation,
        sync=sync_status(journal.store, row, config.sync.remote),
        agent=recorded_agent(history, row),
        start_mode=recorded_mode(history, row),
        interrupted_s=max(0, now_us - last_event_us) // 1_000_000,
        replay_order=_replay_order(plan, summary, unfinished),
        last_completed=last_completed,
        work_time=work_time,
        in_store=config.store.url is not None,
    )


def _last_completed(
    store: EventStore, row: SessionRow, plan: Plan | None, c: ContinuationPlan | None
) -> Position | None:
    """The completed step of the highest position: a plan's from its continuation (the
    signed history's), any other's read backwards from the end of the history, a few
    events at any length. Only shown: an event that does not decode is not this
    function's to report (the replay that reads it refuses it), and gives None."""
    if plan is not None and c is not None:
        return position_in(plan, c.skipped_steps[-1]) if c.skipped_steps else None
    count = 4
    while True:
        try:
            newest = store.newest_steps(row, count)
        except (ValueError, TypeError, KeyError):
            return None
        done = [s for s in newest if s.status is StepStatus.COMPLETED]
        if done:
            return position_in(plan, done[-1].step_id, done[-1].task_id)
        if len(newest) < count:
            return None
        count *= 8


def _plan_statuses(
    plan: Plan, summary: SessionSummary, unfinished: list[StepRecord]
) -> dict[str, StepStatus]:
    """A plan runs its steps in order, one position each: every position before the
    summary's next one completed, except the few that did not finish."""
    status = {s.position: s.status for s in unfinished}
    return {
        step.id: status.get(i, StepStatus.COMPLETED)
        for i, step in enumerate(plan.steps()[: summary.next_position])
    }


_REPLAY_RANGES = 10  # a log line stays short however long the session (50,000 steps)


def _replay_order(
    plan: Plan | None, summary: SessionSummary, unfinished: list[StepRecord]
) -> dict[str, object]:
    """The order the completed steps replay in (FR-037), bounded: their count, their
    positions (1-based) as at most ten ranges, and, in a plan, the first and the last
    step's id."""
    from acode.domain.continuation import replay_ranges

    ranges = replay_ranges(summary.next_position, (s.position for s in unfinished))
    order: dict[str, object] = {
        "by": "timestamp, event_id",
        "steps": summary.steps_completed,
        "positions": [[first + 1, last + 1] for first, last in ranges[:_REPLAY_RANGES]],
    }
    if len(ranges) > _REPLAY_RANGES:
        order["ranges_left_off"] = len(ranges) - _REPLAY_RANGES
    if ranges and plan is not None:  # other sessions name their steps as they go
        steps = plan.steps()
        order["first"], order["last"] = steps[ranges[0][0]].id, steps[ranges[-1][1]].id
    return order


def _needs_model(store: EventStore, preview: ResumePreview) -> bool:
    """Whether the rest of the session talks to the model."""
    if preview.agent is not None:
        return True
    plan, c = preview.plan, preview.continuation
    if plan is None or c is None:
        return store.has_messages(preview.row.sid)
    remaining = {c.in_progress, *c.pending_steps}
    return any(s.kind is StepKind.MODEL and s.id in remaining for s in plan.steps())


class _InProgress(NamedTuple):
    """What the interrupted steps mean for the environment check."""

    paths: frozenset[str]  # their own recovery answers for these: not checked here
    changes: tuple[ChangedFile, ...]  # a person's changes since a pause
    rollback: RollbackPreview | None  # what a rollback to a ghost snapshot will do


def _in_progress(
    journal: Journal,
    workspace: Path,
    strategy: InProgressStrategy,
    fresh_after: Callable[[], int],
    *,
    ghosts: bool = True,
) -> _InProgress:
    """What the steps left in progress touched; ``ghosts`` False: their snapshots are
    another machine's, not fetched (strategy retry), and the work tree that arrived from
    there is what they run again on."""
    paths: set[str] = set()
    changes: list[ChangedFile] = []
    rollback = None
    for step in journal.unfinished_steps():
        if step.status is StepStatus.FAILED:
            continue
        started = journal.history.event(step.event_seq).payload
        started = started.get("started", started)
        if isinstance(started.get("path"), str):
            paths.add(started["path"])
        paths.update(started.get("snapshot") or {})
        ghost = started.get("ghost")
        if isinstance(ghost, str) and ghosts:
            from acode.engine.rollback import AsLeft, plan_rollback, with_as_left
            from acode.system.snapshot import BACKUP_SUFFIX, snapshot_ref

            as_left = AsLeft.of(with_as_left(journal.history, step, started))
            plan = plan_rollback(workspace, ghost, as_left=as_left, fresh_after_ns=fresh_after())
            paths |= plan.decided
            changes += [since_pause(workspace, kept) for kept in plan.changes]
            if strategy != "retry":  # retry runs the command again on the files as they are
                backup = snapshot_ref(journal.row.id, step.step_id, step.attempt) + BACKUP_SUFFIX
                kept = tuple((k.path, k.reason.value) for k in plan.kept)
                left = None if as_left is None else as_left.snapshot
                rollback = RollbackPreview(
                    step=step.step_id,
                    snapshot=ghost,
                    as_left=left,
                    revert=plan.revert,
                    delete=plan.delete,
                    kept=kept,
                    backup_ref=backup,
                )
    return _InProgress(paths=frozenset(paths), changes=tuple(changes), rollback=rollback)


def _environment(
    journal: Journal,
    ws: Workspace,
    preview: ResumePreview,
    config: AcodeConfig,
    *,
    strategy: InProgressStrategy,
    fresh_after: Callable[[], int],
    arrived: bool = False,
) -> ResumePreview:
    """``preview`` with the environment report (and the in-progress step's action as
    the rollback it will be), all found within resume.validation_timeout_seconds: the
    files and the settings are checked in full, whatever they take (no file is ever
    skipped); the model server is given what is left of that time (``check_model``).
    ``fresh_after`` is asked only by the rollback of a step to its ghost snapshot."""
    from acode.resume.conflicts import classify

    began = time.monotonic()
    budget = ws.config.resume.validation_timeout_seconds  # this resume's, not the record's
    store, row = journal.store, journal.row
    # Files arriving from another machine are checked once they are here.
    exists = ws.root.is_dir()
    arriving = preview.handoff is not None
    checked: list[str] = []
    changed: list[ChangedFile] = []
    rollback = None
    if exists and not arriving:
        # With retry the snapshot of a step left running elsewhere was not fetched: the
        # tree that arrived is what the step runs again on.
        ghosts = not arrived or strategy != "retry"
        found = _in_progress(journal, ws.root, strategy, fresh_after, ghosts=ghosts)
        checked, changed = changed_files(ws.root, store.file_fields(row.sid), ignore=found.paths)
        reported = {c.path for c in changed}
        changed += [c for c in found.changes if c.path not in reported]
        rollback = found.rollback
        changed = classify(
            journal,
            preview.plan,
            preview.continuation,
            changed,
            agent=preview.agent is not None,
        )
    settings = config_changes(
        session_config(recorded_config(row, journal.history)),
        session_config(current_config(journal.history, row, ws.config)),
    )
    model = None
    if _needs_model(store, preview):
        model = check_model(config, until=began + budget)
    report = EnvironmentReport(
        workspace=str(ws.root),
        workspace_exists=exists,
        checked=tuple(checked),
        changed=tuple(changed),
        config=tuple(settings),
        model=model,
        rollback=rollback,
        seconds=time.monotonic() - began,
        budget_seconds=budget,
    )
    c = preview.continuation
    if (
        c is not None
        and c.in_progress_action == "retry"
        and (rollback is not None or (arriving and strategy != "retry" and _ghosted(journal)))
    ):
        # A run that declares no paths is rolled back to its ghost snapshot: the plan
        # alone cannot tell that it has one.
        c = replace(c, in_progress_action="rollback_retry")
    return preview._replace(environment=report, continuation=c)


def _ghosted(journal: Journal) -> bool:
    """Whether a step left in progress rolls back to a ghost snapshot: one taken on
    another machine, before its work tree arrives here."""
    from acode.resume.arrival_snapshots import named_snapshots

    return bool(named_snapshots(journal))


def _may_arrive(config: AcodeConfig) -> bool:
    """Whether a session may have its work tree on another machine: only with hand-off
    on or a workspace name in a shared store. A workspace known by its path sees the
    sessions recorded in it alone, and without hand-off none recorded a work tree: then
    nothing more is read (a resume's cost stays the same however long its history) and
    nothing of git is loaded (acode.resume.arrival)."""
    store = config.store
    return config.handoff.remote is not None or bool(store.url and store.workspace)


def _arrive(
    journal: Journal, ws: Workspace, *, strategy: InProgressStrategy, force: bool
) -> Arrival | None:
    """The work tree of a session that ran on another machine, brought here; first the
    snapshot a step left running there rolls back to, so that the rollback here is the
    one a resume there would do (only strategy retry does without it)."""
    if not _may_arrive(ws.config):
        return None
    from acode.resume.arrival import arrive

    fetched: tuple[str, ...] = ()
    if strategy != "retry":
        from acode.resume.arrival_snapshots import bring_snapshots

        fetched = bring_snapshots(journal, ws)
    arrival = arrive(journal, ws, force=force)
    return arrival._replace(snapshots=fetched) if arrival is not None else None


def _held_by_us(ws: Workspace, session_id: str) -> bool:
    """Whether this process held the session's lock last (a program resuming a session
    it ran itself). Read before the lock is taken, which records this process."""
    from acode.system.locks import read_owner

    owner = read_owner(ws.paths.locks, session_id)
    return owner is not None and owner.pid == os.getpid()


def _run_step_interrupted(journal: Journal) -> bool:
    return any(step.kind == StepKind.RUN for step in journal.unfinished_steps())


def _fresh_after(journal: Journal, held_by_us: bool, fallback_ns: int) -> int:
    """From when a file cannot have been changed by the interrupted run: the start of
    this process, when the run was an earlier one (its last event is older), so that a
    file written since, such as the output of `acode resume > out.txt`, is not taken for
    the step's doing. Otherwise (a program resuming a session it ran itself, a worker
    running long before it took the session over) ``fallback_ns``: when this resume took
    the lock, which the interrupted run had let go of."""
    from acode.system.process_table import process_start_ns

    start, summary = process_start_ns(), journal.summary
    if start is None or held_by_us or summary is None or summary.seq == 0:
        return fallback_ns
    newest = journal.history.event(summary.seq).ts_us * 1000
    return start if start > newest else fallback_ns


def preview_resume(
    id_or_prefix: str | None = None,
    workspace: Path | str = ".",
    *,
    clock: Clock | None = None,
    verify: bool = False,
) -> ResumePreview:
    """What `acode resume` would do with the session ``id_or_prefix`` of ``workspace``
    (default: the most recently updated resumable one), with the environment report:
    what `acode resume --dry-run` shows, as a ResumePreview. Takes no lock and writes
    nothing, so it works while another process runs the session.

    It runs the checks a resume runs before its first write, and raises what the resume
    would: NothingToResumeError (no such session, or none resumable; discarded),
    TerminalStateError (COMPLETED, FAILED, CANCELLED), CheckpointError (a history that
    fails its checks). A changed environment does not raise: ``environment`` says what
    changed. ``verify`` replays the whole history first (`--verify`)."""
    began = time.time_ns()
    ws = _existing(workspace, None)
    store = open_workspace_store(ws)
    try:
        return _preview_in(store, ws, id_or_prefix, clock or SystemClock(), verify, began)
    finally:
        store.close()


def preview_in(
    store: EventStore, workspace: Path | str, id_or_prefix: str | None, *, verify: bool = False
) -> ResumePreview:
    """``preview_resume`` read from the workspace's ``store``, which the caller opened
    (the CLI, to find the session in it) and closes. Whatever durability it was opened
    with: a preview writes nothing but, for a session recorded before the chain was
    keyed, its history chained again, which the default (``full``) never weakens."""
    began = time.time_ns()
    return _preview_in(
        store, _existing(workspace, None), id_or_prefix, SystemClock(), verify, began
    )


def _preview_in(
    store: EventStore,
    ws: Workspace,
    id_or_prefix: str | None,
    clock: Clock,
    verify: bool,
    began_ns: int,
) -> ResumePreview:
    row = select_for_resume(store, id_or_prefix)
    signer = load_signer()
    journal = Journal.load(store, row, clock, signer)
    _refuse(journal)
    _cut_short(journal, ws.paths)
    if verify:
        verify_history(store, journal.row, signer)
    held_by_us = _held_by_us(ws, row.id)
    preview = _preview(journal, ws.config, clock.now_us())
    if _may_arrive(ws.config):
        from acode.resume.arrival import pending_arrival
        from acode.resume.arrival_snapshots import missing_snapshots

        arrival = pending_arrival(journal, ws)
        if arrival is not None and ws.config.resume.in_progress_strategy != "retry":
            arrival = arrival._replace(snapshots=tuple(missing_snapshots(journal, ws)))
        preview = preview._replace(handoff=arrival)
    return _environment(
        journal,
        ws,
        preview,
        ws.config,
        strategy=ws.config.resume.in_progress_strategy,
        # The start of this process is asked of psutil, which a dry run loads only when it
        # previews a rollback.
        fresh_after=lambda: _fresh_after(journal, held_by_us, began_ns),
    )


ChangedFilesAction = Literal["prompt", "continue", "abort"]


def _judge(
    preview: ResumePreview,
    *,
    force: bool,
    action: ChangedFilesAction,
    ask: Callable[[ResumePreview], bool] | None,
) -> None:
    """Refuse, with everything found, unless it is safe or the person said go on:
    ``force`` goes on past a changed configuration (past changed files, ``action``
    decides), never past a missing workspace or model."""
    env = preview.environment
    if env is None:
        return
    short = preview.row.short_id
    refuse_problems(preview)
    if env.config and not force:
        changes = ", ".join(f"{c.key}: {c.recorded!r} -> {c.current!r}" for c in env.config)
        raise EnvironmentValidationError(
            f"the configuration changed since session {short} started: {changes}",
            hint="restore .agent/config.yml, or continue with the new configuration: "
            f"acode resume {short} --force",
        )
    # A change no step still to run touches is reported (and logged), never asked about.
    if not env.blocking or action == "continue":
        return
    if action == "prompt" and ask is not None and ask(preview):
        return
    listing = "; ".join(_listed(c) for c in env.blocking)
    raise EnvironmentValidationError(
        f"files of session {short} changed since it stopped: {listing}",
        hint=f"review them (`acode resume {short} --dry-run`), restore them, or keep them "
        f"and go on: acode resume {short} --continue-on-changes",
    )


def refuse_problems(preview: ResumePreview) -> None:
    """Refuse what stops a resume whatever anyone decides: a missing workspace, an
    unavailable model."""
    env, short = preview.environment, preview.row.short_id
    if env is not None and env.problems():
        raise EnvironmentValidationError(
            f"cannot resume session {short}: " + "; ".join(env.problems()),
            hint=_problem_hint(env, short),
        )


def _listed(change: ChangedFile) -> str:
    if change.conflict is None:
        return f"{change.path} ({change.change.value})"
    return (
        f"{change.path} ({change.change.value}; written by session {change.conflict.session}, "
        f"step {change.conflict.step}, after this session last saw it)"
    )


def _problem_hint(env: EnvironmentReport, short: str) -> str:
    model = env.model
    if model is not None and model.busy:
        return model.busy_hint(
            f"run: acode resume {short} (--force does not skip this check: the rest of the "
            "session needs the model)"
        )
    return (
        f"fix what is listed, then run `acode resume {short}` again (--force does not go past "
        "this); nothing was changed"
    )


def resume_session(
    id_or_prefix: str | None = None,
    workspace: Path | str = ".",
    config: AcodeConfig | None = None,
    *,
    observer: Observer | None = None,
    approver: Approver | None = None,
    interrupts: Interrupts | None = None,
    strategy: InProgressStrategy | None = None,
    clock: Clock | None = None,
    on_preview: Callable[[ResumePreview], None] | None = None,
    force: bool = False,
    changed_files_action: ChangedFilesAction | None = None,
    ask_about_changes: Callable[[ResumePreview], bool] | None = None,
    verify: bool = False,
    strategy_prompt: StrategyPrompt | None = None,
    mode: str | None = None,
) -> Session:
    """Continue a session in a new process; completed steps replay from the record.

    ``config`` is the configuration as it is now (default: the workspace's
    `.agent/config.yml`); it must equal the one the session started with unless
    ``force``, and the session runs on with the recorded one. ``force`` resumes despite
    the environment report: with the configuration as it is now, and with changed files
    as they are unless ``changed_files_action`` is "abort"; never without the workspace
    or the model."""
    clock = clock or SystemClock()
    ws: Workspace = _existing(workspace, config)
    try:
        return _resume(
            ws,
            id_or_prefix,
            clock=clock,
            observer=observer,
            approver=approver,
            interrupts=interrupts,
            strategy=strategy,
            on_preview=on_preview,
            force=force,
            changed_files_action=changed_files_action,
            ask_about_changes=ask_about_changes,
            verify=verify,
            strategy_prompt=strategy_prompt,
            mode=mode,
        )
    except AcodeError as refused:
        log_refusal(ws.paths, id_or_prefix, refused)
        raise


def log_refusal(paths: StatePaths, id_or_prefix: str | None, refused: AcodeError) -> None:
    """A resume refused by one of its checks, in the log with its code."""
    log_event(
        paths,
        "resume_refused",
        session=id_or_prefix,
        code=refused.code.value,
        message=refused.message,
    )


def _resume(
    ws: Workspace,
    id_or_prefix: str | None,
    *,
    clock: Clock,
    observer: Observer | None,
    approver: Approver | None,
    interrupts: Interrupts | None,
    strategy: InProgressStrategy | None,
    on_preview: Callable[[ResumePreview], None] | None,
    force: bool,
    changed_files_action: ChangedFilesAction | None,
    ask_about_changes: Callable[[ResumePreview], bool] | None,
    verify: bool,
    strategy_prompt: StrategyPrompt | None,
    mode: str | None,
) -> Session:
    # Loaded here, not with this module: a preview (--dry-run) runs no step.
    from acode.engine.session import Session
    from acode.system.orphans import reap_orphans

    signer = load_signer()
    with ExitStack() as cleanup:
        store = open_workspace_store(ws)
        cleanup.callback(store.close)
        row = select_for_resume(store, id_or_prefix)
        held_by_us = _held_by_us(ws, row.id)
        # Before anything of the session is read: once the lease is ours (a PostgreSQL
        # store), whatever its last holder wrote is in the store, and it writes no more.
        lock, lease = take_lock_and_lease(ws, store, row.id, clock, cleanup, label=row.short_id)
        locked = time.time_ns()
        row = store.session(row.id)  # it may have moved on while we took the lock
        # With the lock free, whoever ran the session is gone: the commands it left
        # running are stopped before they can change anything more, and what it staged
        # is debris.
        orphans = reap_orphans(ws.paths, row.id)
        if orphans:
            log_event(ws.paths, "orphans_stopped", session_id=row.id, process_groups=orphans)
            locked = time.time_ns()  # what they wrote until now may be the step's
        ws.paths.clear_temp(row.id)
        journal = Journal.load(store, row, clock, signer)
        row = journal.row  # chained again under the key, if it was recorded before
        _refuse(journal)
        _cut_short(journal, ws.paths)
        sync = open_sync_link(ws.paths, ws.config.sync.remote, row.id)
        if sync is not None:
            # Pushes what waits, takes the lease, and tells the remote's newest event.
            remote = sync.claim(ws.paths.db, row.short_id)
            _cut_short(journal, ws.paths, remote)
        recorded = recorded_config(row, journal.history)
        if verify:
            verify_history(store, row, signer)
        # With --force the person chose the configuration as it is now.
        config = current_config(journal.history, row, ws.config) if force else recorded
        strategy = strategy or config.resume.in_progress_strategy
        # A session that ran on another machine: its work tree is brought here, and then
        # checked as any other below.
        arrival = _arrive(journal, ws, strategy=strategy, force=force)
        # Only the rollback of an interrupted run step asks it, and the start of this
        # process is asked of psutil, which a resume of other steps does without.
        fresh_after = (
            _fresh_after(journal, held_by_us, locked) if _run_step_interrupted(journal) else locked
        )
        if orphans:  # the start of this process came before they were gone
            fresh_after = max(fresh_after, locked)
        if arrival is not None:  # what the check-out wrote is the session's, not a person's
            fresh_after = max(fresh_after, time.time_ns())
        preview = _preview(
            journal, ws.config, clock.now_us(), shown=on_preview is not None
        )._replace(mode=mode)
        if config.resume.validate_environment:
            preview = _environment(
                journal,
                ws,
                preview,
                config,
                strategy=strategy,
                fresh_after=lambda: fresh_after,
                arrived=arrival is not None,
            )
        preview = preview._replace(handoff=arrival)
        # --force is "resume despite the environment report": past changed files too,
        # unless the caller said abort in so many words.
        action = changed_files_action or ("continue" if force else None)
        _judge(
            preview,
            force=force,
            action=action or config.resume.changed_files_action,
            ask=ask_about_changes,
        )
        if on_preview is not None:
            on_preview(preview)
        # Every check is done: only now is anything written.
        journal.write(_resume_entries(preview))
        log_event(ws.paths, **_log_fields(preview))
        cleanup.pop_all()  # the Session owns the store, the lock and the lease from here on
    return Session(
        journal=journal,
        workspace=ws.root,
        config=config,
        lock=lock,
        lease=lease,
        signer=signer,
        observer=observer,
        approver=approver,
        interrupts=interrupts,
        strategy=strategy,
        strategy_prompt=strategy_prompt,
        sync=sync,
        handoff=open_handoff(ws, row.id),
        fresh_after_ns=fresh_after,
    )


def _log_fields(preview: ResumePreview) -> dict[str, Any]:
    fields: dict[str, Any] = dict(preview.log_record())
    if preview.continuation is not None:
        fields["continuation"] = preview.continuation.to_dict()
    env = preview.environment
    if env is not None:
        fields["validation_seconds"] = round(env.seconds, 3)
    if env is not None and env.changed:
        fields["changed_files"] = env.to_dict()["changed_files"]
    if env is not None and env.rollback is not None:
        fields["rollback"] = env.rollback.to_dict()
    return fields


def _resume_entries(preview: ResumePreview) -> list[tuple[EventType, dict[str, object]]]:
    summary = preview.summary
    entries: list[tuple[EventType, dict[str, object]]] = [
        (EventType.SESSION_RESUMED, preview.log_record())
    ]
    target = _state_after_resume(summary)
    if target is not summary.state:
        entries.append(
            (
                EventType.STATE_CHANGED,
                {"from": summary.state.value, "to": target.value, "reason": "resumed"},
            )
        )
    return entries


def _state_after_resume(summary: SessionSummary) -> SessionState:
    if summary.state is SessionState.PAUSED:
        return summary.resume_state or SessionState.EXECUTING
    if summary.state is SessionState.CREATED:
        return SessionState.EXECUTING
    return summary.state
