"""What a killed run left running, stopped by the resume (acode.system.orphans), with real
process groups: a command's noted group, a process marked with the session but noted
nowhere (a commit step's git), and what must be left alone: another session's processes,
and a noted group whose id the system has given to a program of someone else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from acode.system.orphans import SESSION_ENV, NotedCommand, commands_started, reap_orphans
from acode.system.workspace import StatePaths
from tests.cli.conftest import alive, wait_for

SID = "0193a5b2-7c1d-7e00-8000-0000000000aa"
OTHER_SID = "0193a5b2-7c1d-7e00-8000-0000000000bb"


@pytest.fixture
def paths(tmp_path: Path) -> StatePaths:
    paths = StatePaths(tmp_path)
    paths.state_dir.mkdir(parents=True)
    return paths


@pytest.fixture
def spawn(paths: StatePaths) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Starts ``/bin/sh -c COMMAND`` in a session of its own, as a run step's command is;
    whatever is left is killed after the test."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(command: str, session_id: str | None) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        if session_id is not None:
            env.update(commands_started(paths, session_id))  # as a step starts it
        proc = subprocess.Popen(["/bin/sh", "-c", command], env=env, start_new_session=True)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _noted(paths: StatePaths, spawn, name: str, session_id: str | None, up: Path):
    """A command noted as the step ``name`` of SID's run, started as that run did, and
    running (it touched ``up``): the run was killed then, leaving the note."""
    noted = NotedCommand(paths, SID, name, f"touch {up} && exec sleep 60")
    proc = spawn(noted.command, session_id)
    wait_for(f"{name} to start", up.exists)
    return proc


def test_a_noted_command_of_the_session_is_stopped(paths: StatePaths, spawn, tmp_path) -> None:
    proc = _noted(paths, spawn, "build", SID, tmp_path / "up")

    assert reap_orphans(paths, SID) == [proc.pid]

    assert proc.wait(timeout=10) == -9
    assert list((paths.session_dir(SID) / "children").iterdir()) == []


def test_a_process_marked_with_the_session_is_stopped(paths: StatePaths, spawn) -> None:
    git = spawn("exec sleep 60", SID)  # noted nowhere

    assert reap_orphans(paths, SID) == [git.pid]
    assert git.wait(timeout=10) == -9


def test_a_noted_group_now_of_another_program_is_left_alone(
    paths: StatePaths, spawn, tmp_path: Path
) -> None:
    # The note names a group whose id the system gave to a program that is no acode's.
    foreign = _noted(paths, spawn, "reused", None, tmp_path / "up")

    assert reap_orphans(paths, SID) == []

    assert alive(foreign.pid)
    assert list((paths.session_dir(SID) / "children").iterdir()) == []  # a stale note


def test_another_sessions_processes_are_left_alone(paths: StatePaths, spawn, tmp_path) -> None:
    other = _noted(paths, spawn, "other", OTHER_SID, tmp_path / "up")
    stray = spawn("exec sleep 60", OTHER_SID)

    assert reap_orphans(paths, SID) == []

    assert alive(other.pid)
    assert alive(stray.pid)


def test_the_same_sessions_processes_of_another_copy_of_the_workspace_are_left_alone(
    paths: StatePaths, spawn, tmp_path: Path
) -> None:
    # A second clone holding the same session (a hand-off, a copy): a resume there found
    # the run here by its session id alone and killed its commands.
    elsewhere = StatePaths(tmp_path / "copy")
    elsewhere.state_dir.mkdir(parents=True)
    env = {**os.environ, **commands_started(elsewhere, SID)}
    running = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    try:
        commands_started(paths, SID)

        assert reap_orphans(paths, SID) == []

        assert alive(running.pid)
    finally:
        running.kill()
        running.wait(timeout=10)


def test_a_process_started_before_the_state_was_named_is_still_stopped(
    paths: StatePaths, spawn
) -> None:
    commands_started(paths, SID)
    older = subprocess.Popen(
        ["sleep", "60"], env={**os.environ, SESSION_ENV: SID}, start_new_session=True
    )

    assert reap_orphans(paths, SID) == [older.pid]
    assert older.wait(timeout=10) == -9


def test_nothing_left_and_nothing_noted(paths: StatePaths) -> None:
    assert reap_orphans(paths, SID) == []


def test_a_session_that_never_started_a_command_is_not_looked_for(paths: StatePaths) -> None:
    """Without the folder a session's first command makes, no process can carry the
    session: resume does not ask the system (nor load psutil) for one."""
    marked = subprocess.Popen(
        ["sleep", "60"], env={**os.environ, SESSION_ENV: SID}, start_new_session=True
    )
    try:
        assert reap_orphans(paths, SID) == []
        assert marked.poll() is None
        commands_started(paths, SID)
        assert reap_orphans(paths, SID) == [marked.pid]
        assert marked.wait(timeout=10) == -9
    finally:
        if marked.poll() is None:
            marked.kill()
            marked.wait()


def test_a_python_session_resumes_without_loading_psutil(tmp_path: Path) -> None:
    script = f"""
import sys
import acode
s = acode.open_session("t", {str(tmp_path)!r})
s.step("one", lambda ctx: 1)
s.close()
r = acode.resume_session(s.id, {str(tmp_path)!r})
assert r.step("one", lambda ctx: 2) == 1
r.close()
print("psutil" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False", done.stderr
