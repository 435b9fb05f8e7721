"""Every position a step call takes ends with its outcome in the history, whatever
failed and wherever: what the step's own failure is recorded at once; what is not (a
database that refuses a write, an approval no one gave, an interruption) is left for
resume, or recorded as failed once the caller goes on past it. Every fault of every
kind: tests/engine/test_step_faults.py; killed processes: tests/crash/test_step_faults.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import acode
from acode.domain.reducer import StepStatus
from acode.domain.states import SessionState
from acode.engine.observer import StepNotice, StepPhase
from acode.engine.session import journal_of
from acode.errors import ApprovalPending, PauseRequested, StepFailedError, StorageError
from acode.store.sqlite.store import SqliteStore
from tests.support.recorded import step_statuses

REPO = Path(__file__).resolve().parents[2]


def _read_only(session: acode.Session, on: bool) -> None:
    """Make the session's database refuse writes for real (SQLITE_READONLY), or not."""
    store = journal_of(session).store
    assert isinstance(store, SqliteStore)
    store.conn.execute(f"PRAGMA query_only = {'ON' if on else 'OFF'}")


class Notices:
    def __init__(self) -> None:
        self.seen: list[StepNotice] = []

    def on_step(self, notice: StepNotice) -> None:
        self.seen.append(notice)


def test_a_failed_edit_then_a_kill_leaves_a_session_that_resumes(workspace: Path) -> None:
    """The defect as it was found: a caller catches a failed edit, goes on, dies."""
    script = textwrap.dedent(
        """
        import os, sys
        import acode
        s = acode.open_session("t", workspace=sys.argv[1])
        print(s.id, flush=True)
        s.write("a", "a.txt", "x")
        try:
            s.edit("e", "missing.txt", "x", "y")
        except acode.StepFailedError:
            pass
        s.write("b", "b.txt", "y")
        os._exit(9)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(workspace)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 9, done.stderr
    session_id = done.stdout.strip()
    with acode.resume_session(session_id, workspace, verify=True) as s:
        s.write("a", "a.txt", "x")
        with pytest.raises(StepFailedError, match=r"cannot edit missing\.txt: no such file"):
            s.edit("e", "missing.txt", "x", "y")
        s.write("b", "b.txt", "y")
        s.write("c", "c.txt", "z")
    assert step_statuses(workspace, session_id) == [
        ("a", StepStatus.COMPLETED),
        ("e", StepStatus.FAILED),
        ("b", StepStatus.COMPLETED),
        ("c", StepStatus.COMPLETED),
    ]


def test_a_step_that_fails_before_it_starts_is_told_and_recorded(workspace: Path) -> None:
    notices = Notices()
    with acode.open_session("t", workspace=workspace, observer=notices) as s:
        with pytest.raises(StepFailedError):
            s.edit("e", "missing.txt", "x", "y")
        s.step("after", lambda ctx: 1)
    told = [(n.step_id, n.phase, n.position) for n in notices.seen if n.step_id == "e"]
    assert told == [("e", StepPhase.FAILED, 0)]
    assert step_statuses(workspace, s.id) == [
        ("e", StepStatus.FAILED),
        ("after", StepStatus.COMPLETED),
    ]


def test_a_step_the_database_refused_runs_again_on_resume(workspace: Path) -> None:
    s = acode.open_session("t", workspace=workspace)
    s.step("a", lambda ctx: 1)
    _read_only(s, True)
    with pytest.raises(StorageError, match="readonly database") as info:
        s.write("w", "w.txt", "content")
    assert "acode resume" in (info.value.hint or "")
    _read_only(s, False)
    s.close()  # the caller stops here, as the CLI does: nothing of "w" was recorded
    assert step_statuses(workspace, s.id) == [("a", StepStatus.COMPLETED)]
    with acode.resume_session(s.id, workspace) as r:
        r.step("a", lambda ctx: 1)
        assert r.write("w", "w.txt", "content")["size"] == 7
    assert (workspace / "w.txt").read_text() == "content"
    assert step_statuses(workspace, s.id) == [
        ("a", StepStatus.COMPLETED),
        ("w", StepStatus.COMPLETED),
    ]


def test_a_caller_going_on_past_a_refused_step_has_it_recorded_as_failed(
    workspace: Path,
) -> None:
    notices = Notices()
    s = acode.open_session("t", workspace=workspace, observer=notices)
    _read_only(s, True)
    with pytest.raises(StorageError) as refused:
        s.step("a", lambda ctx: 1)
    _read_only(s, False)
    s.step("b", lambda ctx: 2)  # going on: "a" is recorded as failed first
    s.close()
    assert step_statuses(workspace, s.id) == [("a", StepStatus.FAILED), ("b", StepStatus.COMPLETED)]
    failed = [n for n in notices.seen if n.step_id == "a" and n.phase is StepPhase.FAILED]
    assert len(failed) == 1
    assert "the session went on without this step" in (failed[0].detail or "")
    with acode.resume_session(s.id, workspace, verify=True) as r:
        with pytest.raises(StepFailedError) as replayed:
            r.step("a", lambda ctx: 1)
        assert replayed.value.message == refused.value.message
        assert r.step("b", lambda ctx: 2) == 2


def test_an_approval_the_caller_went_on_without_fails_and_the_session_completes(
    workspace: Path,
) -> None:
    with acode.open_session("t", workspace=workspace) as s:
        with pytest.raises(ApprovalPending):
            s.approve("ok", "Ship it?")
        assert s.state is SessionState.AWAITING_APPROVAL
        s.step("other", lambda ctx: 1)
        assert s.state.value == "EXECUTING"  # the approval failed, the session went on
        summary = journal_of(s).summary
        assert summary is not None
        assert summary.pending_approval is None
    assert s.state.value == "COMPLETED"
    assert step_statuses(workspace, s.id) == [
        ("ok", StepStatus.FAILED),
        ("other", StepStatus.COMPLETED),
    ]


def test_completing_records_the_step_left_unsettled(workspace: Path) -> None:
    with acode.open_session("t", workspace=workspace) as s:
        _read_only(s, True)
        with pytest.raises(StorageError):
            s.step("last", lambda ctx: 1)
        _read_only(s, False)
    assert s.state is SessionState.COMPLETED
    assert step_statuses(workspace, s.id) == [("last", StepStatus.FAILED)]


def test_a_recovery_refusal_waits_for_the_next_resume_unless_the_caller_goes_on(
    workspace: Path,
) -> None:
    @acode.python_step(retryable=False)
    def once(ctx: acode.StepContext) -> int:
        raise PauseRequested  # interrupted inside: the step stays in progress

    s = acode.open_session("t", workspace=workspace)
    with pytest.raises(PauseRequested):
        s.step("once", once)
    s.close()
    for _ in range(2):  # refused, and left as it was for the next resume
        with acode.resume_session(s.id, workspace) as r:
            with pytest.raises(StepFailedError, match="marked not retryable"):
                r.step("once", once)
            r.close()
        assert step_statuses(workspace, s.id) == [("once", StepStatus.IN_PROGRESS)]
    with acode.resume_session(s.id, workspace) as r:
        with pytest.raises(StepFailedError, match="marked not retryable"):
            r.step("once", once)
        r.step("next", lambda ctx: 1)
    assert step_statuses(workspace, s.id) == [
        ("once", StepStatus.FAILED),
        ("next", StepStatus.COMPLETED),
    ]
