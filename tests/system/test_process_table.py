"""What acode asks the system about processes (acode.system.process_table), against real
processes: groups, environments, zombies, open files, a process tree that left its group,
and a pid the kernel gave to another process (in a pid namespace of the test's own)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from acode.system.process_table import (
    carrying,
    child_groups,
    command_line,
    group_running,
    holders,
    kill,
    kill_tree,
    own_file_paths,
    process_table_id,
    start_mark,
)
from tests.cli.conftest import alive, wait_for

REPO = Path(__file__).resolve().parents[2]
MARK = "ACODE_TEST_MARK"

# Starts a grandchild in a session of its own (it leaves the group), prints its pid, and
# waits; the grandchild keeps stdout open, as an engine's language server would.
TREE = """
import subprocess, sys, time
inner = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
)
print(inner.pid, flush=True)
time.sleep(60)
"""

# In a pid namespace of its own: finds a process by its environment, lets it end, has the
# kernel give its pid to a new process, and kills what it found. Prints the new process's
# pid, whether it is the old one's, and whether it still runs.
REUSED_PID = f"""
import os, subprocess, time
from acode.system.process_table import carrying, kill
env = {{**os.environ, "{MARK}": "old"}}
old = subprocess.Popen(["sleep", "60"], env=env)
[found] = carrying("{MARK}", "old")
old.kill()
old.wait()
time.sleep(0.05)  # a later clock tick: their start times differ
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(old.pid - 1))
new = subprocess.Popen(["sleep", "60"], env=env)
kill([found])
time.sleep(0.2)
print(new.pid == found.pid, new.poll() is None, flush=True)
new.kill()
new.wait()
"""


@pytest.fixture
def started() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Starts processes (each in a session of its own) that are killed after the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(code: str, **env: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


SLEEP = "import time; print('up', flush=True); time.sleep(60)"


def _up(proc: subprocess.Popen[str]) -> subprocess.Popen[str]:
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "up"
    return proc


def test_processes_are_found_by_their_environment_and_group(started) -> None:
    mine = _up(started(SLEEP, **{MARK: "one"}))
    other = _up(started(SLEEP, **{MARK: "two"}))
    unmarked = _up(started(SLEEP))

    assert [p.pid for p in carrying(MARK, "one")] == [mine.pid]
    assert [p.pid for p in carrying(MARK, "one", group=mine.pid)] == [mine.pid]
    assert carrying(MARK, "one", group=other.pid) == []
    assert carrying(MARK, "three") == []
    assert unmarked.pid not in [p.pid for p in carrying(MARK, "")]


def test_a_zombie_neither_runs_nor_carries_anything(started) -> None:
    proc = _up(started(SLEEP, **{MARK: "z"}))
    os.kill(proc.pid, signal.SIGKILL)
    wait_for("the process to die", lambda: not alive(proc.pid))  # unreaped: a zombie

    os.killpg(proc.pid, 0)  # the group still exists for the kernel
    assert not group_running(proc.pid)
    assert carrying(MARK, "z") == []


def test_a_running_group_member_is_seen(started) -> None:
    proc = _up(started(SLEEP))
    assert group_running(proc.pid)
    assert not group_running(_gone_pid())


def test_kill_signals_what_still_runs_and_skips_what_ended(started) -> None:
    first = _up(started(SLEEP, **{MARK: "k"}))
    second = _up(started(SLEEP, **{MARK: "k"}))
    found = carrying(MARK, "k")
    second.kill()
    second.wait(timeout=10)

    kill(found)

    assert first.wait(timeout=10) == -9


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_pid_the_kernel_gave_to_another_process_is_not_killed() -> None:
    # A user and a pid namespace of the test's own, where it may choose the next pid.
    argv = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
    probe = subprocess.run([*argv, "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no user and pid namespaces here: {probe.stderr.decode().strip()}")
    result = subprocess.run(
        [*argv, sys.executable, "-c", REUSED_PID],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]  # the same pid, and it still runs


def test_kill_tree_reaches_a_descendant_that_left_the_group(started) -> None:
    leader = started(TREE)
    bystander = _up(started(SLEEP))
    assert leader.stdout is not None
    inner = int(leader.stdout.readline())
    assert os.getpgid(inner) != leader.pid

    kill_tree(leader.pid)

    assert leader.wait(timeout=10) == -9
    wait_for("the descendant to be killed", lambda: not alive(inner))
    assert bystander.poll() is None


def test_kill_tree_of_a_process_that_is_gone_does_nothing() -> None:
    kill_tree(_gone_pid())


def test_child_groups_are_those_of_this_process_children(started) -> None:
    proc = _up(started(SLEEP))
    assert proc.pid in child_groups()


def test_holders_are_found_by_the_file_they_hold(started, tmp_path: Path) -> None:
    held = tmp_path / "index.lock"
    held.write_text("")
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    (elsewhere / "index.lock").write_text("")  # the same name, another file
    code = f"f = open({str(held)!r}); print('up', flush=True); import time; time.sleep(60)"
    holder = _up(started(code))

    assert holders(os.stat(held), held.name) == [holder.pid]
    assert holders(os.stat(elsewhere / "index.lock"), "index.lock") == []


def test_command_line_of_a_process_and_of_none(started) -> None:
    proc = _up(started(SLEEP))
    assert command_line(proc.pid) == f"{sys.executable} -c {SLEEP}"
    assert command_line(_gone_pid()) == ""


def test_own_file_paths_are_the_regular_files_of_the_descriptors(tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "from acode.system.process_table import own_file_paths\n"
        "print(json.dumps(own_file_paths((1, 2))), file=sys.stderr)\n"
    )
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        subprocess.run([sys.executable, "-c", code], stdout=stdout, stderr=stderr, check=True)
    expected = {"1": os.path.realpath(out), "2": os.path.realpath(err)}
    assert json.loads(err.read_text()) == expected
    assert own_file_paths((1, 2)).keys() <= {1, 2}  # pipes, a terminal: not files


def test_the_start_of_a_process_is_after_it_was_spawned() -> None:
    code = "from acode.system.process_table import process_start_ns; print(process_start_ns())"
    before = time.time_ns()
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    after = time.time_ns()
    started = int(result.stdout)
    # Rounded up to the next clock tick (10 ms where the tick is a hundredth of a second).
    assert before <= started <= after + 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _gone_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_the_start_mark_of_a_process_is_its_own_and_stays() -> None:
    first = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.05)  # a later clock tick
        second = subprocess.Popen(["sleep", "60"])
        try:
            marks = [start_mark(first.pid), start_mark(second.pid)]
            assert None not in marks
            assert marks[0] != marks[1]
            assert [start_mark(first.pid), start_mark(second.pid)] == marks
        finally:
            second.kill()
            second.wait()
    finally:
        first.kill()
        first.wait()


def test_a_process_that_ended_has_no_start_mark_even_before_it_is_reaped() -> None:
    proc = subprocess.Popen(["sleep", "60"])
    assert start_mark(proc.pid) is not None
    proc.kill()
    wait_for("the zombie", lambda: not alive(proc.pid))
    assert start_mark(proc.pid) is None  # a zombie: not running
    proc.wait()
    assert start_mark(proc.pid) is None
    assert start_mark(_gone_pid()) is None


def test_processes_of_one_pid_namespace_share_the_process_table_id() -> None:
    code = "from acode.system.process_table import process_table_id; print(process_table_id())"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    mine = process_table_id()
    assert mine is not None
    assert result.stdout.strip() == mine
    assert mine.endswith(os.readlink("/proc/self/ns/pid"))


# In a pid namespace of its own: its id, and the start marks of a process and of the one the
# kernel gave its pid to once it ended.
REUSED_MARK = """
import subprocess, time
from acode.system.process_table import process_table_id, start_mark
old = subprocess.Popen(["sleep", "60"])
before = start_mark(old.pid)
old.kill()
old.wait()
time.sleep(0.05)  # a later clock tick: their start times differ
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(old.pid - 1))
new = subprocess.Popen(["sleep", "60"])
print(process_table_id(), new.pid == old.pid, start_mark(new.pid) != before, flush=True)
new.kill()
new.wait()
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_pid_given_to_another_process_has_another_start_mark_and_namespace_another_id() -> None:
    argv = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
    probe = subprocess.run([*argv, "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no user and pid namespaces here: {probe.stderr.decode().strip()}")
    result = subprocess.run(
        [*argv, sys.executable, "-c", REUSED_MARK],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    table, same_pid, other_mark = result.stdout.split()
    assert (same_pid, other_mark) == ("True", "True")
    assert table not in ("None", process_table_id())


def test_a_proc_of_another_pid_namespace_gives_no_process_table_id() -> None:
    # unshare --pid without --mount-proc: /proc still shows the outer namespace's pids, which
    # are not this process's.
    argv = ["unshare", "--user", "--map-root-user", "--pid", "--fork"]
    if shutil.which("unshare") is None or subprocess.run([*argv, "true"], check=False).returncode:
        pytest.skip("no user and pid namespaces here")
    code = "from acode.system.process_table import process_table_id; print(process_table_id())"
    result = subprocess.run(
        [*argv, sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "None"
