"""Threat 1 (session hijacking through the lock file), tried as an attacker who can write
the workspace: a lock file hard-linked to a file of the victim's, a locks directory (or
acode's state directory itself) that is a symlink or writable by others, and a lock held
by a program that is not the acode that took it. Each is refused before anything is
written, with its ACODE-LOCK-* code and a hint that fixes it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import Background, Cli, plan_yaml

PLAN = plan_yaml(
    "Locked",
    '{id: w, write: a.txt, content: "x"}',
    "{id: ok, approve: Go on?}",
    "{id: after, write: b.txt, content: written by the resume}",
)

# Takes the lock file's flock and holds it: a program that is not acode.
FOREIGN_HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def acode(workspace: Path, cli_env: dict[str, str], background: Background) -> Cli:
    return Cli(workspace, cli_env, background)


@pytest.fixture
def paused(acode: Cli) -> str:
    """A session waiting for an approval (resumable), its lock free; its full id."""
    acode.write("plan.yml", PLAN)
    acode("run", "plan.yml", expect=20)
    session = acode.only_session()
    assert session["state"] == "AWAITING_APPROVAL"
    acode("approve", session["short_id"])
    return str(session["id"])


def _state(acode: Cli) -> Path:
    return acode.workspace / ".agent" / "state"


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(root.rglob("*"))
    }


def _refused(acode: Cli, session_id: str, code: str) -> str:
    result = acode("resume", session_id, expect=16)
    assert code in result.err, result.describe()
    assert not (acode.workspace / "b.txt").exists()  # nothing of the session ran
    return result.flat_err


def test_a_lock_file_hard_linked_to_a_victim_file_is_not_written(
    acode: Cli, paused: str, tmp_path: Path
) -> None:
    victim = tmp_path / "id_ed25519"
    victim.write_text("-----BEGIN OPENSSH PRIVATE KEY----- precious\n")
    victim.chmod(0o600)
    lock = _state(acode) / "locks" / f"{paused}.lock"
    lock.unlink()
    os.link(victim, lock)

    err = _refused(acode, paused, "ACODE-LOCK-001")

    assert victim.read_text() == "-----BEGIN OPENSSH PRIVATE KEY----- precious\n"
    assert f"lock file {lock} has 2 links" in err
    assert f"rm {shlex.quote(str(lock))}" in err
    lock.unlink()  # the fix the hint gives: the victim keeps its other name
    acode("resume", paused)
    assert (acode.workspace / "b.txt").read_text() == "written by the resume"


def test_a_locks_directory_linked_elsewhere_is_not_followed(
    acode: Cli, paused: str, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    locks = _state(acode) / "locks"
    shutil.rmtree(locks)
    locks.symlink_to(elsewhere)

    err = _refused(acode, paused, "ACODE-LOCK-001")

    assert list(elsewhere.iterdir()) == []
    assert f"directory {locks} is a symbolic link" in err
    assert f"rm {shlex.quote(str(locks))}" in err


def test_a_state_directory_linked_elsewhere_is_not_followed(
    acode: Cli, paused: str, tmp_path: Path
) -> None:
    # The attacker's copy of the state, database included: nothing may be read or
    # written there, and no session of it may run in this workspace.
    elsewhere = tmp_path / "elsewhere"
    state = _state(acode)
    shutil.move(state, elsewhere)
    state.symlink_to(elsewhere)
    before = _tree(elsewhere)

    err = _refused(acode, paused, "ACODE-LOCK-001")

    assert _tree(elsewhere) == before
    assert f"directory {state} is a symbolic link" in err


@pytest.mark.parametrize(
    ("which", "mode"),
    [("locks", 0o777), ("locks", 0o770), ("state", 0o777), ("state", 0o1777)],
    ids=["locks-world", "locks-group", "state-world", "state-sticky"],
)
def test_a_directory_others_can_write_is_refused(
    acode: Cli, paused: str, which: str, mode: int
) -> None:
    directory = _state(acode) / "locks" if which == "locks" else _state(acode)
    directory.chmod(mode)
    lock = _state(acode) / "locks" / f"{paused}.lock"
    before = lock.read_bytes()

    err = _refused(acode, paused, "ACODE-LOCK-001")

    assert lock.read_bytes() == before
    assert f"directory {directory} is writable by others (mode {mode:04o})" in err
    hint = f"chmod go-w {shlex.quote(str(directory))}"
    assert hint in err
    subprocess.run(shlex.split(hint), check=True)  # the hint fixes it
    acode("resume", paused)


@pytest.fixture
def foreign_holder(acode: Cli, paused: str) -> Iterator[subprocess.Popen[str]]:
    lock = _state(acode) / "locks" / f"{paused}.lock"
    proc = subprocess.Popen(
        [sys.executable, "-c", FOREIGN_HOLDER, str(lock)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


def test_a_lock_held_by_a_program_that_is_not_acode_is_reported(
    acode: Cli, paused: str, foreign_holder: subprocess.Popen[str]
) -> None:
    lock = _state(acode) / "locks" / f"{paused}.lock"
    recorded = json.loads(lock.read_bytes())  # the acode that ran, and exited

    err = _refused(acode, paused, "ACODE-LOCK-003")
    shown = acode.status(paused)["lock"]

    assert f"held by pid {foreign_holder.pid} ({sys.executable} -c" in err
    assert f"not the acode that took it (pid {recorded['pid']}" in err
    assert f"kill {foreign_holder.pid}" in err
    assert json.loads(lock.read_bytes()) == recorded
    assert shown.startswith(f"pid {foreign_holder.pid} ({sys.executable} -c import fcntl")
    assert shown.endswith("...), not the acode that took it")  # one line, cut short
    foreign_holder.kill()
    foreign_holder.wait(timeout=10)
    acode("resume", paused)


def test_a_record_naming_a_pid_now_used_by_another_program_is_stale(
    acode: Cli, paused: str
) -> None:
    # pid reuse: the recorded pid now belongs to a running program that holds nothing.
    # The lock is free; nothing shows a holder, and resume takes it.
    lock = _state(acode) / "locks" / f"{paused}.lock"
    other = subprocess.Popen(["sleep", "60"])
    try:
        record = json.loads(lock.read_bytes())
        lock.write_text(json.dumps({**record, "pid": other.pid}))
        assert acode.status(paused)["lock"] is None
        acode("resume", paused)
    finally:
        other.kill()
        other.wait(timeout=10)
    assert (acode.workspace / "b.txt").read_text() == "written by the resume"
