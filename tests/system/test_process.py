from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acode.errors import StepFailedError, StorageError
from acode.system.process import CommandResult, run_command, terminate_group


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (PID 1 may never reap orphans here) is dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != b"Z"


def _wait_for_pid_file(path: Path, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if text.endswith("\n"):
            return int(text)
        time.sleep(0.01)
    raise AssertionError(f"{path} was never written")


@pytest.fixture
def sigint_raises_keyboard_interrupt() -> Iterator[None]:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_exit_codes(tmp_path: Path) -> None:
    assert run_command("true", cwd=tmp_path, timeout=10).exit_code == 0
    assert run_command("exit 3", cwd=tmp_path, timeout=10).exit_code == 3
    assert run_command("no-such-command-xyz", cwd=tmp_path, timeout=10).exit_code == 127


def test_death_by_signal_is_128_plus_n(tmp_path: Path) -> None:
    result = run_command("kill -KILL $$", cwd=tmp_path, timeout=10)
    assert result.exit_code == 128 + signal.SIGKILL
    assert not result.timed_out


def test_captures_stdout_stderr_cwd_and_env(tmp_path: Path) -> None:
    result = run_command(
        'pwd; echo "$GREETING"; echo oops >&2',
        cwd=tmp_path,
        timeout=10,
        env={"GREETING": "hello", "PATH": os.environ["PATH"]},
    )
    assert result.stdout == f"{tmp_path.resolve()}\nhello\n"
    assert result.stderr == "oops\n"
    assert not result.truncated
    assert result.duration_ms >= 0


def test_stdin_is_not_inherited(tmp_path: Path) -> None:
    result = run_command("cat; echo end", cwd=tmp_path, timeout=10)
    assert result.stdout == "end\n"


def test_invalid_utf8_is_replaced(tmp_path: Path) -> None:
    assert run_command(r"printf 'a\377b'", cwd=tmp_path, timeout=10).stdout == "a\ufffdb"


def test_keeps_last_bytes_when_truncated(tmp_path: Path) -> None:
    result = run_command(
        "head -c 300000 /dev/zero | tr '\\0' a; printf END",
        cwd=tmp_path,
        timeout=10,
        max_output=1000,
    )
    assert result.truncated
    assert len(result.stdout) == 1000
    assert result.stdout.endswith("aaaEND")
    assert result.stderr == ""


def test_truncation_never_starts_mid_character(tmp_path: Path) -> None:
    # 'é' is two bytes: a cut at an odd offset lands inside one.
    result = run_command(
        "for i in $(seq 100); do printf 'é'; done", cwd=tmp_path, timeout=10, max_output=5
    )
    assert result.truncated
    assert result.stdout == "éé"


def test_big_output_on_both_streams_does_not_deadlock(tmp_path: Path) -> None:
    result = run_command(
        "head -c 2000000 /dev/zero; head -c 2000000 /dev/zero >&2; echo done",
        cwd=tmp_path,
        timeout=20,
        max_output=10,
    )
    assert result.exit_code == 0
    assert result.stdout.endswith("done\n")
    assert result.truncated


def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "bg.pid"
    started = time.monotonic()
    result = run_command(f"sleep 30 & echo $! > {pid_file}; sleep 30", cwd=tmp_path, timeout=0.3)
    assert result.timed_out
    assert result.exit_code == 124
    assert time.monotonic() - started < 5
    assert not _alive(_wait_for_pid_file(pid_file))


def test_background_jobs_do_not_outlive_the_command(tmp_path: Path) -> None:
    pid_file = tmp_path / "bg.pid"
    started = time.monotonic()
    result = run_command(f"sleep 30 & echo $! > {pid_file}; echo ok", cwd=tmp_path, timeout=10)
    assert result.exit_code == 0
    assert result.stdout == "ok\n"
    assert not result.timed_out
    assert time.monotonic() - started < 5
    assert not _alive(_wait_for_pid_file(pid_file))


# None: Popen.wait; a time-out: the wait on the child's pidfd.
@pytest.mark.parametrize("timeout", [None, 60.0])
def test_keyboard_interrupt_kills_group_and_propagates(
    tmp_path: Path, sigint_raises_keyboard_interrupt: None, timeout: float | None
) -> None:
    pid_file = tmp_path / "bg.pid"
    main_id = threading.main_thread().ident
    assert main_id is not None

    def interrupt() -> None:
        _wait_for_pid_file(pid_file)
        signal.pthread_kill(main_id, signal.SIGINT)

    timer = threading.Thread(target=interrupt)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_command(f"sleep 30 & echo $! > {pid_file}; sleep 30", cwd=tmp_path, timeout=timeout)
    finally:
        timer.join()
    assert not _alive(_wait_for_pid_file(pid_file))


def test_without_pidfds_commands_are_waited_for_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on a system without pidfd_open (not Linux, or a kernel before 5.3).
    monkeypatch.delattr(os, "pidfd_open")
    assert run_command("exit 3", cwd=tmp_path, timeout=10).exit_code == 3
    result = run_command("sleep 30", cwd=tmp_path, timeout=0.3)
    assert result.timed_out
    assert result.exit_code == 124


def test_a_command_exiting_as_its_wait_begins_is_not_missed(tmp_path: Path) -> None:
    # Whether the command is already gone (a zombie) when its pidfd is opened, or exits
    # while it is polled, the exit is seen and its status kept.
    for _ in range(20):
        assert run_command("exit 7", cwd=tmp_path, timeout=10).exit_code == 7
        assert run_command("sleep 0.01; exit 5", cwd=tmp_path, timeout=10).exit_code == 5


def test_terminate_group_kills_what_ignores_sigterm(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    proc = subprocess.Popen(
        ["/bin/sh", "-c", f"trap '' TERM; sleep 30 & echo $! > {pid_file}; wait"],
        start_new_session=True,
    )
    child = _wait_for_pid_file(pid_file)
    started = time.monotonic()
    terminate_group(proc, grace=0.2)
    assert time.monotonic() - started < 3
    assert proc.returncode == -signal.SIGKILL
    assert not _alive(child)


def test_missing_cwd_is_a_step_failure(tmp_path: Path) -> None:
    with pytest.raises(StepFailedError, match="missing"):
        run_command("true", cwd=tmp_path / "missing", timeout=10)


def test_result_json_round_trip() -> None:
    result = CommandResult(
        exit_code=2, stdout="o", stderr="e", duration_ms=15, timed_out=False, truncated=True
    )
    assert CommandResult.from_json(result.to_json()) == result


@pytest.mark.parametrize(
    ("key", "value"), [("exit_code", True), ("stdout", None), ("truncated", 1)]
)
def test_result_from_damaged_json_is_refused(key: str, value: object) -> None:
    data = CommandResult(0, "", "", 1, False, False).to_json()
    data[key] = value
    with pytest.raises(StorageError, match=key):
        CommandResult.from_json(data)
