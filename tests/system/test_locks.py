"""Session locks against real processes: holders in subprocesses, SIGKILL, inherited fds."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from acode.errors import ErrorCode, SessionLockedError, UsageError
from acode.system.locks import (
    LockOwner,
    SessionLock,
    acquire,
    force_unlock,
    holder,
    is_locked,
    lock_path,
    read_owner,
)
from acode.system.private_dirs import check_state_dir

REPO = Path(__file__).resolve().parents[2]
SID = "0193a5b2-7c1d-7e00-8000-000000000001"
NOW = "2026-11-25T10:00:00Z"

# Holds the lock until its stdin closes; each line read is answered with owns_path().
# "spawn" starts a child first, "fork" forks one that keeps the lock's descriptor; either
# prints the child's pid.
HOLDER = """
import os, subprocess, sys, time
from pathlib import Path
from acode.system.locks import acquire
lock = acquire(Path(sys.argv[1]), sys.argv[2], command="holder", now_iso="2026-11-25T09:00:00Z")
if sys.argv[3:] == ["spawn"]:
    print(subprocess.Popen(["sleep", "5"], close_fds=False).pid, flush=True)
if sys.argv[3:] == ["fork"]:
    child = os.fork()
    if child == 0:  # keeps the inherited lock descriptor, and nothing else to do
        time.sleep(60)
        os._exit(0)
    print(child, flush=True)
print("locked", flush=True)
for _ in sys.stdin:
    print(lock.owns_path(), flush=True)
"""

# Acquires, prints its pid and exits; a refusal exits with the error's exit code.
ACQUIRE_ONCE = """
import os, sys
from pathlib import Path
from acode.errors import SessionLockedError
from acode.system.locks import acquire
try:
    acquire(Path(sys.argv[1]), sys.argv[2], command="once", now_iso="2026-11-25T11:00:00Z")
except SessionLockedError as err:
    print(err, file=sys.stderr)
    sys.exit(err.exit_code)
print(os.getpid())
"""

# Enters the critical section (an O_EXCL marker file) under the lock, then unlinks its own
# lock file while still holding it, so that waiters keep meeting orphaned inodes.
CHURN = """
import os, sys, time
from pathlib import Path
from acode.errors import SessionLockedError
from acode.system.locks import acquire, force_unlock
locks, sid, marker = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
deadline = time.monotonic() + float(sys.argv[4])
entries = 0
while time.monotonic() < deadline:
    try:
        lock = acquire(locks, sid, command="churn", now_iso="2026-11-25T12:00:00Z")
    except SessionLockedError:
        continue
    with lock:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))  # raises if shared
        os.unlink(marker)
        entries += 1
        force_unlock(locks, sid)
print(entries)
"""


def _python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.fixture
def locks_dir(tmp_path: Path) -> Path:
    return tmp_path / "state" / "locks"


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=5)
        for stream in (proc.stdin, proc.stdout):
            if stream:
                stream.close()


@pytest.fixture
def start_holder(
    locks_dir: Path, processes: list[subprocess.Popen[str]]
) -> Callable[..., subprocess.Popen[str]]:
    def start(*extra: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            _python(HOLDER, str(locks_dir), SID, *extra),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        processes.append(proc)
        return proc

    return start


def _wait_until_free(locks_dir: Path) -> None:
    deadline = time.monotonic() + 10
    while is_locked(locks_dir, SID):
        assert time.monotonic() < deadline, "the lock was never freed"
        time.sleep(0.01)


def _wait_locked(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"


def _acquire_in_other_process(locks_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _python(ACQUIRE_ONCE, str(locks_dir), SID),
        capture_output=True,
        text=True,
        env=_env(),
        timeout=30,
        check=False,
    )


def _acquire(locks_dir: Path) -> SessionLock:
    return acquire(locks_dir, SID, command="acode resume", now_iso=NOW)


def test_lock_file_is_private_and_records_its_owner(locks_dir: Path) -> None:
    with _acquire(locks_dir) as lock:
        assert lock.path == locks_dir / f"{SID}.lock" == lock_path(locks_dir, SID)
        assert stat.S_IMODE(lock.path.stat().st_mode) == 0o600
        assert stat.S_IMODE(locks_dir.stat().st_mode) == 0o700
        recorded = json.loads(lock.path.read_bytes())
        assert recorded == {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": NOW,
            "command": "acode resume",
        }
        assert read_owner(locks_dir, SID) == lock.owner
        assert lock.owner == LockOwner(os.getpid(), socket.gethostname(), NOW, "acode resume")


def test_a_narrow_umask_still_yields_mode_0600(locks_dir: Path) -> None:
    old = os.umask(0o377)
    try:
        lock = _acquire(locks_dir)
    finally:
        os.umask(old)
    with lock:
        assert stat.S_IMODE(lock.path.stat().st_mode) == 0o600


def test_second_acquire_in_the_same_process_is_refused(locks_dir: Path) -> None:
    with _acquire(locks_dir), pytest.raises(SessionLockedError) as caught:
        _acquire(locks_dir)
    err = caught.value
    assert err.exit_code == 16
    assert err.code is ErrorCode.LOCKED
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in err.message
    assert err.hint is not None
    assert "wait for it to finish" in err.hint
    assert f"acode session unlock {SID}" in err.hint


def test_release_is_idempotent_and_keeps_the_file(locks_dir: Path) -> None:
    lock = _acquire(locks_dir)
    lock.release()
    lock.release()
    assert not lock.held
    assert lock.path.exists()
    with _acquire(locks_dir) as again:
        assert again.held
    assert not again.held


def test_holder_in_another_process_is_named(locks_dir: Path, start_holder) -> None:
    holder = start_holder()
    _wait_locked(holder)
    with pytest.raises(SessionLockedError) as caught:
        _acquire(locks_dir)
    assert f"pid {holder.pid} on host {socket.gethostname()}" in caught.value.message
    assert "(holder)" in caught.value.message
    assert is_locked(locks_dir, SID)


def test_holder_names_the_recorded_owner_while_it_holds_the_lock(
    locks_dir: Path, start_holder
) -> None:
    assert holder(locks_dir, SID) is None
    proc = start_holder()
    _wait_locked(proc)
    shown = holder(locks_dir, SID)
    assert shown is not None
    assert shown.startswith(f"pid {proc.pid} on host {socket.gethostname()} since")


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_child_that_kept_a_killed_holders_lock_is_not_acode(
    locks_dir: Path, start_holder
) -> None:
    # A holder whose child inherited the lock's descriptor (fork, no exec) and outlived it.
    proc = start_holder("fork")
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    try:
        _wait_locked(proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=5)
        with pytest.raises(SessionLockedError) as caught:
            _acquire(locks_dir)
        assert caught.value.code is ErrorCode.LOCK_HELD
        assert f"held by pid {child} ({sys.executable} -c import os" in caught.value.message
        assert f"not the acode that took it (pid {proc.pid} on host" in caught.value.message
        assert f"kill {child}" in (caught.value.hint or "")
        shown = holder(locks_dir, SID)
        assert shown is not None
        assert shown.startswith(f"pid {child} (")
        assert shown.endswith("), not the acode that took it")
    finally:
        os.kill(child, signal.SIGKILL)
    _wait_until_free(locks_dir)
    with _acquire(locks_dir):  # once the child is gone, the lock is free again
        pass


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a directory to another user")
def test_a_state_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chown(state, 65534, 65534)
    with pytest.raises(SessionLockedError) as caught:
        check_state_dir(state)
    assert caught.value.code is ErrorCode.LOCK_OWNER
    assert f"state directory {state} is owned by uid 65534" in caught.value.message


def test_sigkill_of_the_holder_frees_the_lock_at_once(locks_dir: Path, start_holder) -> None:
    holder = start_holder()
    _wait_locked(holder)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=5)
    owner = read_owner(locks_dir, SID)
    assert owner is not None
    assert owner.pid == holder.pid  # the stale record is still there...
    assert not is_locked(locks_dir, SID)
    with _acquire(locks_dir) as lock:  # ...and does not matter
        assert read_owner(locks_dir, SID) == lock.owner


def test_locked_before_the_owner_is_recorded(locks_dir: Path) -> None:
    locks_dir.mkdir(parents=True)
    path = lock_path(locks_dir, SID)
    with path.open("w") as raw:
        path.chmod(0o600)
        fcntl.flock(raw, fcntl.LOCK_EX)
        with pytest.raises(SessionLockedError) as caught:
            _acquire(locks_dir)
    assert "has not recorded itself yet" in caught.value.message


def test_preexisting_file_with_mode_0644_is_refused(locks_dir: Path) -> None:
    locks_dir.mkdir(parents=True)
    path = lock_path(locks_dir, SID)
    path.write_text("")
    path.chmod(0o644)
    with pytest.raises(SessionLockedError) as caught:
        _acquire(locks_dir)
    err = caught.value
    assert err.code is ErrorCode.LOCK_PERMISSIONS
    assert err.exit_code == 16
    assert str(path) in err.message
    assert "0644" in err.message
    assert err.hint is not None
    assert f"chmod 600 {path}" in err.hint
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


@pytest.mark.parametrize("target_exists", [True, False])
def test_symlink_is_refused(locks_dir: Path, tmp_path: Path, target_exists: bool) -> None:
    locks_dir.mkdir(parents=True)
    target = tmp_path / "elsewhere"
    if target_exists:
        target.write_text("precious")
        target.chmod(0o600)
    lock_path(locks_dir, SID).symlink_to(target)
    with pytest.raises(SessionLockedError) as caught:
        _acquire(locks_dir)
    assert caught.value.code is ErrorCode.LOCK_PERMISSIONS
    assert "symbolic link" in caught.value.message
    if target_exists:
        assert target.read_text() == "precious"
    else:
        assert not target.exists()


def test_directory_in_place_of_the_file_is_refused(locks_dir: Path) -> None:
    lock_path(locks_dir, SID).mkdir(parents=True)
    with pytest.raises(SessionLockedError) as caught:
        _acquire(locks_dir)
    assert caught.value.code is ErrorCode.LOCK_PERMISSIONS
    assert "not a regular file" in caught.value.message


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a file to another user")
def test_file_owned_by_another_user_is_refused(locks_dir: Path) -> None:
    locks_dir.mkdir(parents=True)
    path = lock_path(locks_dir, SID)
    path.write_text("")
    path.chmod(0o600)
    os.chown(path, 65534, 65534)
    with pytest.raises(SessionLockedError) as caught:
        _acquire(locks_dir)
    assert caught.value.code is ErrorCode.LOCK_OWNER
    assert "uid 65534" in caught.value.message


def _open_paths(pid: int, program: bytes) -> set[str]:
    """The files ``pid`` holds open once it runs ``program`` and sleeps: before its exec
    has ended (the kernel shows the new command line before it closes the close-on-exec
    descriptors), they are still there and vanish while they are listed."""
    deadline = time.monotonic() + 5
    while not (
        Path(f"/proc/{pid}/cmdline").read_bytes().startswith(program)
        and Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "S"
    ):
        assert time.monotonic() < deadline, f"process {pid} never slept in {program!r}"
        time.sleep(0.01)
    return {os.readlink(entry) for entry in Path(f"/proc/{pid}/fd").iterdir()}


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_child_started_while_holding_does_not_inherit_the_lock(
    locks_dir: Path, processes: list[subprocess.Popen[str]]
) -> None:
    with _acquire(locks_dir) as lock:
        # close_fds=False: only O_CLOEXEC stands between the child and our lock fd.
        sleeper = subprocess.Popen(["sleep", "5"], close_fds=False, text=True)
        processes.append(sleeper)
        assert str(lock.path) not in _open_paths(sleeper.pid, b"sleep")
    done = _acquire_in_other_process(locks_dir)
    assert done.returncode == 0, done.stderr
    assert sleeper.poll() is None


def test_child_outliving_a_killed_holder_does_not_keep_the_lock(
    locks_dir: Path, start_holder, processes: list[subprocess.Popen[str]]
) -> None:
    holder = start_holder("spawn")
    assert holder.stdout is not None
    sleeper_pid = int(holder.stdout.readline())
    _wait_locked(holder)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=5)
    try:
        os.kill(sleeper_pid, 0)  # still alive, still has whatever it inherited
        with _acquire(locks_dir) as lock:
            assert lock.owns_path()
    finally:
        os.kill(sleeper_pid, signal.SIGKILL)


def test_force_unlock_admits_a_new_holder_while_the_old_one_lives(
    locks_dir: Path, start_holder
) -> None:
    holder = start_holder()
    _wait_locked(holder)
    assert holder.stdin is not None
    assert holder.stdout is not None

    owner = force_unlock(locks_dir, SID)
    assert owner is not None
    assert owner.pid == holder.pid
    assert not lock_path(locks_dir, SID).exists()
    assert not is_locked(locks_dir, SID)

    with _acquire(locks_dir) as lock:
        assert lock.owns_path()
        assert read_owner(locks_dir, SID) == lock.owner
        holder.stdin.write("check\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "False"
        assert holder.poll() is None


def test_churn_of_force_unlocks_never_admits_two_holders(
    locks_dir: Path, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    # Without the inode check after flock, this fails within a few hundred entries.
    marker = tmp_path / "inside"
    for _ in range(4):
        processes.append(
            subprocess.Popen(
                _python(CHURN, str(locks_dir), SID, str(marker), "0.4"),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_env(),
            )
        )
    results = [proc.communicate(timeout=30) for proc in processes]
    for proc, (_, err) in zip(processes, results, strict=True):
        assert proc.returncode == 0, err
    assert sum(int(out) for out, _ in results) > 0
    assert not marker.exists()


def test_force_unlock_of_an_absent_lock_returns_none(locks_dir: Path) -> None:
    assert force_unlock(locks_dir, SID) is None


def test_force_unlock_within_one_process_orphans_the_old_lock(locks_dir: Path) -> None:
    old = _acquire(locks_dir)
    assert force_unlock(locks_dir, SID) == old.owner
    with old, _acquire(locks_dir) as new:
        assert new.owns_path()
        assert not old.owns_path()
        assert old.held


def test_is_locked_probes_without_disturbing_the_holder(locks_dir: Path) -> None:
    assert not is_locked(locks_dir, SID)
    with _acquire(locks_dir):
        assert is_locked(locks_dir, SID)
        assert is_locked(locks_dir, SID)
        with pytest.raises(SessionLockedError):
            _acquire(locks_dir)
    assert not is_locked(locks_dir, SID)
    with _acquire(locks_dir):
        pass


def test_a_lock_is_refused_to_another_process_only_while_held(
    locks_dir: Path,
) -> None:
    with _acquire(locks_dir):
        refused = _acquire_in_other_process(locks_dir)
    assert refused.returncode == 16
    assert f"pid {os.getpid()}" in refused.stderr
    assert _acquire_in_other_process(locks_dir).returncode == 0


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{not json",
        b"[1, 2]",
        b'{"pid": "1", "host": "h", "since": "s", "command": "c"}',
        b'{"pid": true, "host": "h", "since": "s", "command": "c"}',
        b'{"pid": 1, "host": "h"}',
    ],
)
def test_read_owner_returns_none_for_garbled_content(locks_dir: Path, content: bytes) -> None:
    locks_dir.mkdir(parents=True)
    lock_path(locks_dir, SID).write_bytes(content)
    assert read_owner(locks_dir, SID) is None


def test_read_owner_of_an_absent_lock_is_none(locks_dir: Path) -> None:
    assert read_owner(locks_dir, SID) is None


def test_describe_names_pid_host_time_and_command() -> None:
    owner = LockOwner(4242, "laptop", NOW, "acode resume")
    assert owner.describe() == "pid 4242 on host laptop since 2026-11-25T10:00:00Z (acode resume)"
    assert LockOwner.from_json(owner.to_json()) == owner


@pytest.mark.parametrize("bad", ["", "../escape", "a/b", ".hidden", "x" * 200])
def test_session_id_that_cannot_be_a_file_name_is_refused(locks_dir: Path, bad: str) -> None:
    with pytest.raises(UsageError):
        acquire(locks_dir, bad, command="c", now_iso=NOW)
    assert not locks_dir.exists()
