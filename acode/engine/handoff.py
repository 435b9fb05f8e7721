"""A running session's hand-off: its work tree recorded on ``refs/acode/sessions/<id>``
after each step that changed it, each commit named in the history by a
``worktree_recorded`` event, and the ref pushed to the workspace's git remote in the
background (docs/fleet.md, "Hand-off: the work tree travels by git").

With ``handoff.remote`` unset nothing here runs, and nothing of it is imported.

The ref moves first, the event follows in a commit of its own: a process killed
between the two leaves the ref one commit ahead of the history, which the next resume
finds and records (:meth:`Handoff.reconcile`), as it puts back a ref found behind the
history. Recording is never a step's failure: a git that cannot record now logs why,
and the next step records the whole work tree again.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from acode.domain.config import HandoffSettings
from acode.domain.events import EventType
from acode.errors import AcodeError
from acode.system.git import is_work_tree
from acode.system.git_command import run_git
from acode.system.handoff_push import Pushed, read_state
from acode.system.handoff_ref import (
    Recorded,
    chain_commit,
    handoff_ref,
    move_ref,
    read_ref,
    record_worktree,
    steps_between,
)
from acode.system.log import log_event
from acode.system.workspace import StatePaths

if TYPE_CHECKING:
    from collections.abc import Callable

    from acode.engine.journal import Journal
    from acode.engine.steps.base import StepContext
    from acode.store.records import SessionRow
    from acode.system.handoff_worker import HandoffPusher

__all__ = [
    "FILE_KINDS",
    "REF_MOVED_AUDIT",
    "Handoff",
    "HandoffStatus",
    "RefsPushed",
    "handoff_status",
    "push_waiting_refs",
]

# The kinds of step that may change the work tree; a run step without declared paths
# is told by comparing trees, like the others.
FILE_KINDS = frozenset({"write", "edit", "run", "commit"})
# An audit event between the ref's move and the event that records it: the crash
# tests kill a process there (tests/crash/autokill.py).
REF_MOVED_AUDIT = "acode.handoff.ref_moved"
# How long the end of a session waits for its last push; the rest waits for the next
# command in the workspace, or `acode sync`.
GRACE_SECONDS = 3.0


class Handoff:
    def __init__(self, workspace: Path, settings: HandoffSettings, session_id: str) -> None:
        assert settings.remote is not None
        self._workspace = workspace
        self._paths = StatePaths(workspace)
        self._remote = settings.remote
        self._push = settings.push
        self._session_id = session_id
        self._ref = handoff_ref(session_id)
        self._last: Recorded | None = None
        self._pusher: HandoffPusher | None = None
        # Asked before each push: False once the session's lease is another process's
        # (PostgreSQL store), which then pushes the session's ref alone.
        self.may_push: Callable[[], bool] | None = None

    def start(self, journal: Journal, *, resumed: bool) -> None:
        """Before the session's first step: a resumed session's ref is brought in line
        with its history; the pusher starts."""
        if resumed:
            self.reconcile(journal)
        if self._push:
            from acode.system.handoff_worker import HandoffPusher

            self._pusher = HandoffPusher(
                workspace=self._workspace,
                remote=self._remote,
                report=self._log_push,
                may_push=self.may_push,
            )
            self._pusher.start()

    def after_step(self, journal: Journal, ctx: StepContext) -> None:
        """After step ``ctx`` completed: record the work tree if the step is of a kind
        that may change it, and it changed."""
        if ctx.kind in FILE_KINDS:
            self.record(journal, ctx.step_id, ctx.attempt)

    def snapshot_taken(self) -> None:
        """A run step's ghost snapshot was recorded: it goes to the remote now, so that
        another machine can roll the step back if this one stops in it."""
        if self._pusher is not None:
            self._pusher.wake.set()

    def ended(self) -> None:
        """The session ended (COMPLETED, FAILED, CANCELLED): its snapshots go from the
        remote with the last push, no resume needs them anywhere."""
        from acode.system.snapshot_push import retire_snapshots

        try:
            retire_snapshots(self._paths, self._session_id)
        except OSError as exc:  # a full disk: they stay on the remote, nothing worse
            log_event(
                self._paths, "handoff_not_retired", session_id=self._session_id, reason=str(exc)
            )

    def record(self, journal: Journal, step: str | None, attempt: int) -> None:
        """Record the work tree when it changed since the last record."""
        assert journal.summary is not None
        try:
            recorded = record_worktree(
                self._workspace,
                self._session_id,
                last=self._last,
                step=step or "-",
                attempt=attempt,
                after_seq=journal.summary.seq,
            )
        except (AcodeError, OSError) as exc:
            # Another process moved the ref, or git or the disk failed: read it again.
            self._last = read_ref(self._workspace, self._ref)
            log_event(
                self._paths, "handoff_not_recorded", session_id=self._session_id, reason=str(exc)
            )
            return
        if recorded is None:
            return
        sys.audit(REF_MOVED_AUDIT, self._ref, recorded.commit)
        self._write_event(journal, recorded, step, attempt, journal.summary.seq)
        if self._pusher is not None:
            self._pusher.wake.set()

    def _write_event(
        self, journal: Journal, recorded: Recorded, step: str | None, attempt: int, after: int
    ) -> None:
        payload: dict[str, Any] = {
            "ref": self._ref,
            "commit": recorded.commit,
            "tree": recorded.tree,
            "head": recorded.head,
            "attempt": attempt,
            "after_seq": after,
            "v": 1,
        }
        if step is not None:
            payload["step"] = step
        journal.write([(EventType.WORKTREE_RECORDED, payload)], checkpoint=False)
        self._last = recorded

    def reconcile(self, journal: Journal) -> None:
        """Bring the ref and the history in line after a process died between them:
        a ref one chain commit ahead of the newest ``worktree_recorded`` event gets its
        event; a ref behind it (or gone) is put back at the recorded commit. Anything
        else (a ref another machine moved) is left as it is, and logged."""
        # Read through the history: each event is checked against the keyed chain.
        events = journal.history.of_type(EventType.WORKTREE_RECORDED)
        named = events[-1].payload["commit"] if events else None
        found = read_ref(self._workspace, self._ref)
        at = found.commit if found is not None else None
        if at == named:
            self._last = found
            return
        ahead = chain_commit(self._workspace, at) if at is not None else None
        if (
            ahead is not None
            and found is not None
            and ahead.parent == named
            and ahead.session_id == self._session_id
        ):
            self._write_event(journal, found, ahead.step, ahead.attempt, ahead.after_seq)
            log_event(self._paths, "handoff_recorded_again", session_id=self._session_id)
            return
        if named is not None and (at is None or self._is_ancestor(at, named)):
            try:
                move_ref(self._workspace, self._ref, named, at)
            except AcodeError as exc:
                log_event(
                    self._paths,
                    "handoff_not_restored",
                    session_id=self._session_id,
                    reason=str(exc),
                )
            self._last = read_ref(self._workspace, self._ref)
            return
        log_event(
            self._paths,
            "handoff_ref_diverged",
            session_id=self._session_id,
            ref_at=at,
            history_names=named,
        )
        self._last = found

    def _is_ancestor(self, old: str, new: str) -> bool:
        args = ["merge-base", "--is-ancestor", old, new]
        return run_git(self._workspace, args).returncode == 0

    def close(self, grace: float = GRACE_SECONDS) -> None:
        if self._pusher is not None:
            self._pusher.close(grace)

    def _log_push(self, pushed: Pushed) -> None:
        fields: dict[str, Any] = {"remote": self._remote, "sessions": list(pushed.session_ids)}
        if pushed.reason is not None:
            fields["reason"] = pushed.reason
        event = "handoff_pushed" if pushed.reason is None else "handoff_push_failed"
        log_event(self._paths, event, **fields)


class HandoffStatus(NamedTuple):
    """Where a session's hand-off ref stands, from this machine's records alone."""

    remote: str
    ref: str
    recorded: str | None  # the ref's commit here
    pushed: str | None  # what the remote was last seen to hold
    unpushed: int | None  # chain commits (steps) the remote does not have; None: unknown
    push: bool  # pushed in the background while a session runs
    failures: int
    failing_since_us: int | None
    reason: str | None
    next_try_us: int | None
    conflict: bool
    in_git: bool  # the workspace is in a git work tree: there is something to record
    # The commit the history names last, when this clone's ref does not hold it: the
    # work tree was recorded in another clone (another machine); None: it is here.
    elsewhere: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


def handoff_status(
    row: SessionRow, workspace: Path, settings: HandoffSettings, named: str | None = None
) -> HandoffStatus | None:
    """None when hand-off is off. ``named``: the commit the session's (verified) history
    names last, None when it recorded none."""
    if not settings.remote:
        return None
    ref = handoff_ref(row.id)
    found = read_ref(workspace, ref)
    elsewhere = None
    if named is not None and (found is None or found.commit != named):
        from acode.system.handoff_fetch import holds

        elsewhere = None if holds(workspace, ref, named) else named
    in_git = found is not None or is_work_tree(workspace)
    state = read_state(StatePaths(workspace), row.id)
    recorded = found.commit if found is not None else None
    if recorded is None:
        unpushed: int | None = 0
    elif recorded == state.pushed:
        unpushed = 0
    else:
        unpushed = steps_between(workspace, state.pushed, recorded)
    return HandoffStatus(
        remote=settings.remote,
        ref=ref,
        recorded=recorded,
        pushed=state.pushed,
        unpushed=unpushed,
        push=settings.push,
        failures=state.failures,
        failing_since_us=state.failing_since_us,
        reason=state.reason,
        next_try_us=state.next_try_us,
        conflict=state.conflict,
        in_git=in_git,
        elsewhere=elsewhere,
    )


class RefsPushed(NamedTuple):
    """What `acode sync` did with the hand-off refs: the sessions pushed, those still
    waiting, and why (None: none waits)."""

    remote: str
    pushed: tuple[str, ...]
    waiting: tuple[str, ...]
    reason: str | None


def push_waiting_refs(
    workspace: Path, settings: HandoffSettings, *, wait: bool, timeout: float
) -> RefsPushed:
    """Push every session's hand-off ref the remote does not hold yet (conflicts left
    out), and the steps' snapshots beside them; with ``wait``, try again with back-off
    until ``timeout`` seconds pass."""
    import random
    import time

    from acode.domain.backoff import Backoff
    from acode.system.handoff_push import push_refs, refs_to_push
    from acode.system.snapshot_push import joined, push_snapshots, snapshots_to_push

    assert settings.remote is not None
    paths = StatePaths(workspace)
    backoff = Backoff()
    deadline = time.monotonic() + timeout
    pushed: list[str] = []
    failures = 0
    while True:
        pending = refs_to_push(workspace, paths, conflicts=True)
        left = max(deadline - time.monotonic(), 0.1)
        result = push_refs(workspace, paths, settings.remote, pending, timeout=left)
        if result.retry_at_us is None:  # the remote answered: the snapshots follow
            ghosts = snapshots_to_push(workspace, paths, asked=True)
            result = joined(
                result, push_snapshots(workspace, paths, settings.remote, ghosts, timeout=left)
            )
        pushed += result.session_ids
        waiting = tuple(sorted(set(pending) - set(result.session_ids)))
        if result.reason is None or not wait:
            return RefsPushed(settings.remote, tuple(pushed), waiting, result.reason)
        failures += 1
        pause = backoff.delay(failures, random.random())
        if time.monotonic() + pause >= deadline:
            return RefsPushed(settings.remote, tuple(pushed), waiting, result.reason)
        time.sleep(pause)
