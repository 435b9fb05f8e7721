"""The hand-off of a library session: its work tree recorded on its private ref, the
history naming each commit, the ref put back in line on resume, the push's environment
(acode.engine.handoff, docs/fleet.md), with real git and a bare repository as remote."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import acode
from acode.domain.config import AcodeConfig, HandoffSettings
from acode.domain.events import EventType
from acode.engine.handoff import handoff_status
from acode.store.base import open_store
from acode.system.workspace import StatePaths

__all__: list[str] = []

SECRET = "handoff-tests-secret-never-in-git"


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", SECRET)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one commit and ``origin``, a bare repository on disk."""
    ws = tmp_path / "ws"
    ws.mkdir()
    git(ws, "init", "--quiet")
    (ws / "README.md").write_text("hi\n")
    git(ws, "add", "README.md")
    git(ws, "commit", "--quiet", "--message", "init")
    git(tmp_path, "init", "--quiet", "--bare", str(tmp_path / "remote.git"))
    git(ws, "remote", "add", "origin", str(tmp_path / "remote.git"))
    return ws


def _config(push: bool) -> AcodeConfig:
    return AcodeConfig(handoff=HandoffSettings(remote="origin", push=push))


def _recorded(ws: Path, session_id: str) -> list[dict[str, Any]]:
    store = open_store(StatePaths(ws).db, "normal")
    try:
        row = store.session(session_id)
        return [e.payload for e in store.events_of_type(row, EventType.WORKTREE_RECORDED)]
    finally:
        store.close()


def test_with_push_off_the_ref_is_recorded_and_waits_for_acode_sync(
    repo: Path, tmp_path: Path
) -> None:
    with acode.open_session("Recorded only", workspace=repo, config=_config(push=False)) as s:
        s.write("w", "a.txt", "a\n")
        s.run("r", "echo b > b.txt")
        sid = s.id

    ref = f"refs/acode/sessions/{sid}"
    assert [p["step"] for p in _recorded(repo, sid)] == ["w", "r"]
    assert git(tmp_path / "remote.git", "for-each-ref") == ""
    store = open_store(StatePaths(repo).db, "normal")
    try:
        status = handoff_status(store.session(sid), repo, _config(push=False).handoff)
    finally:
        store.close()
    assert status is not None
    assert (status.recorded, status.pushed, status.unpushed) == (
        git(repo, "rev-parse", ref).strip(),
        None,
        2,
    )


def test_files_a_python_step_wrote_travel_when_the_session_ends(repo: Path) -> None:
    def make(ctx: acode.StepContext) -> None:
        (repo / "made.txt").write_text("by python\n")

    with acode.open_session("Python", workspace=repo, config=_config(push=False)) as s:
        s.step("py", make)
        sid = s.id

    (payload,) = _recorded(repo, sid)
    assert payload["step"] == "py"
    files = git(repo, "ls-tree", "-r", "--name-only", payload["commit"]).split()
    assert "made.txt" in files


def test_a_ref_found_behind_its_history_is_put_back_by_resume(repo: Path) -> None:
    with (
        pytest.raises(RuntimeError),
        acode.open_session("Left", workspace=repo, config=_config(push=False)) as s,
    ):
        sid = s.id
        s.write("w", "a.txt", "a\n")
        s.write("w2", "b.txt", "b\n")
        raise RuntimeError("the program stops: the session stays resumable")
    ref = f"refs/acode/sessions/{sid}"
    named = _recorded(repo, sid)[-1]["commit"]
    first = _recorded(repo, sid)[0]["commit"]
    git(repo, "update-ref", ref, first)  # the ref behind the history

    with acode.resume_session(sid, workspace=repo, config=_config(push=False)) as s:
        assert git(repo, "rev-parse", ref).strip() == named
        s.write("w", "a.txt", "a\n")
        s.write("w2", "b.txt", "b\n")
        s.write("w3", "c.txt", "c\n")

    chain = git(repo, "log", "--first-parent", "--format=%H", "-3", ref).split()
    assert chain[1:] == [named, first]
    assert _recorded(repo, sid)[-1]["commit"] == chain[0]


def test_git_push_gets_no_key_and_no_terminal_prompt(repo: Path, tmp_path: Path) -> None:
    seen = tmp_path / "push-env.txt"
    hook = repo / ".git" / "hooks" / "pre-push"
    hook.write_text(f"#!/bin/sh\nenv > '{seen}'\n")
    hook.chmod(0o755)

    with acode.open_session("Pushed", workspace=repo, config=_config(push=True)) as s:
        s.write("w", "a.txt", "a\n")
        sid = s.id

    ref = f"refs/acode/sessions/{sid}"
    assert git(tmp_path / "remote.git", "rev-parse", ref) == git(repo, "rev-parse", ref)
    env = seen.read_text()
    assert SECRET not in env
    assert "ACODE_CHECKPOINT_SECRET" not in env
    assert "GIT_TERMINAL_PROMPT=0" in env


def test_the_pusher_retries_by_itself_once_the_remote_is_back(repo: Path, tmp_path: Path) -> None:
    late = tmp_path / "late.git"
    git(repo, "remote", "set-url", "origin", str(late))

    with acode.open_session("Retried", workspace=repo, config=_config(push=True)) as s:
        s.write("w", "a.txt", "a\n")
        ref = f"refs/acode/sessions/{s.id}"
        state = repo / ".agent/state/handoff" / f"{s.id}.json"
        _wait_for(lambda: state.exists() and json.loads(state.read_text())["failures"] >= 1)
        git(tmp_path, "init", "--quiet", "--bare", str(late))
        # No step wakes it: the retry is due after the back-off alone.
        _wait_for(lambda: json.loads(state.read_text())["pushed"] is not None)
        assert git(late, "rev-parse", ref) == git(repo, "rev-parse", ref)


def _wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        time.sleep(0.05)
