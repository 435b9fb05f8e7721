"""A run step's rollback to its ghost snapshot reverts the step's work and no more: not a
person's changes since the pause, nor a file changed after the resume began."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import acode
from acode.domain.events import EventType
from acode.engine.rollback import AsLeft, KeptReason, plan_rollback, roll_back
from acode.engine.session import journal_of
from acode.engine.steps import run_step
from acode.errors import PauseRequested
from acode.system.process import CommandResult
from acode.system.snapshot import snapshot_ref, snapshot_worktree

SESSION = "0190abcd-0000-7000-8000-000000000002"
BACKUP = f"refs/acode/{SESSION}/step-1-before-rollback"


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "rollback-tests-secret")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q")
    for name in ("a.txt", "b.txt", "c.txt"):
        _write(path, name, f"{name} before\n")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "initial")
    return path


def _user_state(repo: Path) -> tuple[object, ...]:
    """The user's index, HEAD, branches and stash, which no snapshot or rollback touches."""
    return (
        (repo / ".git" / "index").read_bytes(),
        _git(repo, "rev-parse", "HEAD"),
        _git(repo, "for-each-ref", "refs/heads"),
        _git(repo, "stash", "list"),
    )


def _step_changes(repo: Path) -> None:
    """What an interrupted command did."""
    _write(repo, "a.txt", "a.txt by the step\n")
    _write(repo, "made.txt", "made by the step\n")
    _write(repo, "b.txt", "b.txt by the step\n")


def test_after_a_pause_only_the_steps_own_changes_are_reverted(repo: Path) -> None:
    user = _user_state(repo)
    ghost = snapshot_worktree(repo, snapshot_ref(SESSION, "step", 1))
    _step_changes(repo)
    left = snapshot_worktree(repo, snapshot_ref(SESSION, "step", 1) + "-as-left")
    _write(repo, "b.txt", "b.txt fixed by a person\n")  # the step's file, changed since
    _write(repo, "c.txt", "c.txt by a person\n")
    _write(repo, "notes.txt", "a person's notes\n")
    (repo / "made.txt").unlink()  # a person removed what the step made: nothing to do

    plan = plan_rollback(repo, ghost, as_left=AsLeft(left))
    done = roll_back(repo, ghost, backup_ref=BACKUP, as_left=AsLeft(left))

    assert done == plan
    assert (plan.revert, plan.delete) == (("a.txt",), ())
    assert {(k.path, k.reason) for k in plan.changes} == {
        ("b.txt", KeptReason.SINCE_PAUSE),
        ("c.txt", KeptReason.SINCE_PAUSE),
        ("notes.txt", KeptReason.SINCE_PAUSE),
    }
    assert (repo / "a.txt").read_text() == "a.txt before\n"
    assert (repo / "b.txt").read_text() == "b.txt fixed by a person\n"
    assert (repo / "c.txt").read_text() == "c.txt by a person\n"
    assert (repo / "notes.txt").read_text() == "a person's notes\n"
    assert not (repo / "made.txt").exists()
    assert _git(repo, "show", f"{BACKUP}:a.txt") == "a.txt by the step\n"
    assert _user_state(repo) == user


def test_a_file_put_back_by_hand_since_the_pause_is_nothing_to_report(repo: Path) -> None:
    ghost = snapshot_worktree(repo, snapshot_ref(SESSION, "step", 1))
    _step_changes(repo)
    left = snapshot_worktree(repo, snapshot_ref(SESSION, "step", 1) + "-as-left")
    _write(repo, "a.txt", "a.txt before\n")  # as before the step: what a rollback wants

    plan = plan_rollback(repo, ghost, as_left=AsLeft(left))

    assert "a.txt" not in plan.revert
    assert plan.changes == ()
    assert "a.txt" in plan.decided


def test_after_a_kill_a_file_changed_after_the_resume_began_is_left_alone(repo: Path) -> None:
    ghost = snapshot_worktree(repo, snapshot_ref(SESSION, "step", 1))
    _step_changes(repo)
    began = time.time_ns()
    time.sleep(0.02)  # past the file system's timestamp granularity
    _write(repo, "b.txt", "b.txt written while the resume runs\n")
    _write(repo, "late.txt", "written while the resume runs\n")

    done = roll_back(repo, ghost, backup_ref=BACKUP, fresh_after_ns=began)

    assert (done.revert, done.delete) == (("a.txt",), ("made.txt",))
    assert {(k.path, k.reason) for k in done.kept} == {
        ("b.txt", KeptReason.AFTER_START),
        ("late.txt", KeptReason.AFTER_START),
    }
    assert done.changes == ()  # after a kill nothing is a change since a pause
    assert (repo / "late.txt").exists()
    assert (repo / "b.txt").read_text() == "b.txt written while the resume runs\n"
    assert (repo / "a.txt").read_text() == "a.txt before\n"


def test_a_run_paused_outputs_are_never_the_persons(repo: Path) -> None:
    ghost = snapshot_worktree(repo, snapshot_ref(SESSION, "step", 1))
    _write(repo, "run.out", "Session started\n")
    left = snapshot_worktree(repo, snapshot_ref(SESSION, "step", 1) + "-as-left")
    _write(repo, "run.out", "Session started\nPaused session\n")

    plan = plan_rollback(repo, ghost, as_left=AsLeft(left, ("run.out",)))

    assert (plan.revert, plan.delete, plan.changes) == ((), (), ())
    assert [(k.path, k.reason) for k in plan.kept] == [("run.out", KeptReason.OUTPUT)]


# -- through a session ----------------------------------------------------------------------


def _half_run(ws: Path) -> Callable[..., CommandResult]:
    def run(command: str, **kwargs: Any) -> CommandResult:
        _step_changes(ws)
        raise KeyboardInterrupt

    return run


def test_a_second_pause_before_the_step_runs_again_keeps_the_first_snapshot(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped at the strategy question, the session pauses again without having run the
    step: the work tree holds a person's changes by now, which must not pass for the
    step's at the next resume."""
    with monkeypatch.context() as patch:
        patch.setattr(run_step, "run_command", _half_run(repo))
        with pytest.raises(KeyboardInterrupt), acode.open_session("t", workspace=repo) as s:
            session_id = s.id
            s.run("step", "true")
    _write(repo, "a.txt", "a.txt fixed by a person\n")

    stop = acode.resume_session(
        session_id,
        workspace=repo,
        strategy="prompt",
        strategy_prompt=lambda step, kind: None,
        changed_files_action="continue",
    )
    with pytest.raises(PauseRequested), stop:
        stop.run("step", "true")
    with acode.resume_session(session_id, workspace=repo, changed_files_action="continue") as s:
        s.run("step", "true")
        pauses = journal_of(s).store.events_of_type(journal_of(s).row, EventType.STATE_CHANGED)

    marked = [e.payload["as_left"]["position"] for e in pauses if "as_left" in e.payload]
    assert marked == [0], "only the pause that interrupted the step recorded the work tree"
    assert (repo / "a.txt").read_text() == "a.txt fixed by a person\n"
    assert (repo / "b.txt").read_text() == "b.txt before\n"
    assert not (repo / "made.txt").exists()


def test_a_process_older_than_the_interrupted_run_still_rolls_back_its_work(
    repo: Path,
) -> None:
    """A long-running program (a worker taking over sessions of others) started before
    the run it resumes: files changed after it started are the step's all the same."""
    _write(repo, ".gitignore", "again\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "ignore the marker")
    # The command kills the acode running it (its parent) the first time, as a crash.
    command = (
        "echo by-the-step > a.txt; echo made > made.txt; "
        "[ -e again ] || { touch again; kill -9 $PPID; }"
    )
    script = (
        "import acode\n"
        f"with acode.open_session('t', workspace={str(repo)!r}) as s:\n"
        "    print(s.id, flush=True)\n"
        f"    s.run('step', {command!r})\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert child.returncode == -9, child.stderr
    session_id = child.stdout.strip()

    with acode.resume_session(session_id, workspace=repo) as s:
        s.run("step", command)
        rolled = journal_of(s).store.events_of_type(journal_of(s).row, EventType.STEP_ROLLED_BACK)

    assert [e.payload["restored"] for e in rolled] == [["a.txt", "made.txt"]]
