"""Leases through the real `acode` executable: a run killed with SIGKILL again and again is
resumed each time at once, its lease taken over from the dead process; a live holder of
this machine, and a holder on another machine, still make a resume wait, each said so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from acode.system.process_table import process_table_id, start_mark
from tests.cli.conftest import Background, Cli, plan_yaml, step_started, wait_for
from tests.sync.conftest import Mirror, assert_mirrored

KILLS = 4  # the run, then three resumes


def _nap(k: int) -> str:
    # Its pid is written only when it waits: the k-th pid in the file is the k-th nap's.
    command = f"test -f go{k} || {{ echo $$ >> nap.pids; exec sleep 30; }}"
    return f'{{id: nap{k}, run: "{command}", idempotent: true}}'


PLAN = plan_yaml(
    "Killed again and again",
    *(_nap(k) for k in range(1, KILLS + 1)),
    '{id: last, write: last.txt, content: "done\\n"}',
)


@pytest.fixture
def acode(workspace: Path, cli_env: dict[str, str], background: Background, mirror: Mirror) -> Cli:
    return Cli(workspace, {**cli_env, "ACODE_SYNC_DSN": mirror.dsn}, background)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process of this machine that is not acode."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _lease(mirror: Mirror) -> tuple[int | None, int]:
    """(pid, epoch) of the session's lease on the remote; (None, 0) before it is there."""
    if mirror.query("SELECT to_regclass('acode.sessions')") == [(None,)]:
        return None, 0  # acode has not connected yet
    rows = mirror.query("SELECT lease_pid, lease_epoch FROM acode.sessions")
    return rows[0] if rows else (None, 0)


def _taken_over(workspace: Path) -> list[dict[str, object]]:
    path = workspace / ".agent" / "state" / "logs" / "acode.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if r["event"] == "sync_lease_taken_over"]


def test_a_run_killed_again_and_again_is_resumed_each_time_at_once(
    acode: Cli, mirror: Mirror
) -> None:
    acode.write("plan.yml", PLAN)
    pids = acode.watch_pids("nap.pids")
    running = acode.start("run", "plan.yml")
    step_started(acode, running, pids)
    wait_for("the run's lease", lambda: _lease(mirror)[0] == running.pid, timeout=30)
    short = acode.only_session()["short_id"]
    killed: list[int] = []

    for k in range(1, KILLS):
        _, epoch = _lease(mirror)
        os.kill(running.pid, signal.SIGKILL)
        acode.finish(running, expect=-signal.SIGKILL)
        killed.append(running.pid)
        acode.write(f"go{k}", "")

        running = acode.start("resume", short)

        step_started(acode, running, pids, count=k + 1)  # not refused: the next step runs
        assert _lease(mirror) == (running.pid, epoch + 1)  # taken before the first step
    os.kill(running.pid, signal.SIGKILL)
    acode.finish(running, expect=-signal.SIGKILL)
    killed.append(running.pid)
    acode.write(f"go{KILLS}", "")

    done = acode("resume", short)

    assert f"Sync: took the lease over from pid {killed[-1]} on host " in done.err, done.describe()
    assert "a process of this machine that is no longer running." in done.err
    assert (acode.workspace / "last.txt").read_text() == "done\n"
    assert mirror.query("SELECT state, lease_holder, lease_epoch FROM acode.sessions") == [
        ("COMPLETED", None, KILLS + 1)
    ]
    records = _taken_over(acode.workspace)
    assert [str(r["holder"]).split(" on host ")[0] for r in records] == [
        f"pid {pid}" for pid in killed
    ]
    assert [r["epoch"] for r in records] == list(range(2, KILLS + 2))
    assert_mirrored(mirror, acode.workspace, acode.only_session()["id"])


NEEDS_APPROVAL = plan_yaml(
    "Held",
    '{id: first, write: first.txt, content: "1\\n"}',
    "{id: ok, approve: Go on?}",
    '{id: last, write: last.txt, content: "2\\n"}',
)


def _hold(mirror: Mirror, *, pid: int, machine: str | None, started: int | None) -> None:
    """Record a holder of the session's lease, as its own acode would have."""
    mirror.execute(
        "UPDATE acode.sessions SET lease_holder = 'their-token', lease_host = 'box',"
        " lease_pid = %s, lease_machine = %s, lease_started = %s, lease_epoch = 7,"
        " lease_since = now(), lease_expires = now() + interval '30 s'",
        (pid, machine, started),
    )


def _approved(acode: Cli) -> str:
    acode.write("plan.yml", NEEDS_APPROVAL)
    acode("run", "plan.yml", expect=20)
    short = acode.only_session()["short_id"]
    acode("approve", short)
    return str(short)


def test_a_live_holder_of_this_machine_is_waited_for_and_named(
    acode: Cli, mirror: Mirror, sleeper: subprocess.Popen[bytes]
) -> None:
    short = _approved(acode)
    _hold(mirror, pid=sleeper.pid, machine=process_table_id(), started=start_mark(sleeper.pid))
    before = acode("session", "history", short, "--json").json()

    refused = acode("resume", short, expect=16)

    assert refused.flat_err.startswith(
        f"error ACODE-RESUME-003: session {short} is running in another process of this "
        f"machine: the remote names pid {sleeper.pid} on host box since "
    ), refused.describe()
    assert f"stop it (kill {sleeper.pid}); then run `acode resume {short}` again" in (
        refused.flat_err
    )
    assert acode("session", "history", short, "--json").json() == before
    assert _lease(mirror) == (sleeper.pid, 7)

    sleeper.kill()
    sleeper.wait()
    resumed = acode("resume", short)

    assert f"Sync: took the lease over from pid {sleeper.pid} on host box since " in resumed.err
    assert (acode.workspace / "last.txt").read_text() == "2\n"
    assert mirror.query("SELECT lease_holder, lease_epoch FROM acode.sessions") == [(None, 8)]


def test_a_pid_now_of_another_process_is_a_holder_that_ended(
    acode: Cli, mirror: Mirror, sleeper: subprocess.Popen[bytes]
) -> None:
    short = _approved(acode)
    started = start_mark(sleeper.pid)
    assert started is not None
    # The holder had this pid, but started before the process that has it now.
    _hold(mirror, pid=sleeper.pid, machine=process_table_id(), started=started - 1)

    acode("resume", short)

    assert (acode.workspace / "last.txt").read_text() == "2\n"
    assert sleeper.poll() is None  # the process that has the pid now is left alone
    assert mirror.query("SELECT lease_holder, lease_epoch FROM acode.sessions") == [(None, 8)]


@pytest.mark.parametrize(
    ("machine", "started", "where"),
    [
        ("another-boot/pid:[4026531836]", 1, "on another machine"),
        (None, 1, "elsewhere"),  # an acode that did not record its machine
        ("here", None, "elsewhere"),  # one of this machine that did not record its start
    ],
)
def test_a_holder_that_cannot_be_checked_here_is_waited_for_until_its_lease_lapses(
    acode: Cli, mirror: Mirror, machine: str | None, started: int | None, where: str
) -> None:
    short = _approved(acode)
    gone = subprocess.Popen(["true"])
    gone.wait()
    # That its pid is free here tells nothing: it is another machine's, or of no machine
    # or start that acode can check.
    machine = process_table_id() if machine == "here" else machine
    _hold(mirror, pid=gone.pid, machine=machine, started=started)

    refused = acode("resume", short, expect=16)

    assert refused.flat_err.startswith(
        f"error ACODE-RESUME-003: session {short} is running {where}: the remote names "
        f"pid {gone.pid} on host box since "
    ), refused.describe()
    assert "its lease lapses 30 s after its last renewal" in refused.flat_err
    assert "(kill " not in refused.flat_err
    assert not (acode.workspace / "last.txt").exists()

    mirror.execute("UPDATE acode.sessions SET lease_expires = now() - interval '1 s'")
    resumed = acode("resume", short)

    assert "took the lease over" not in resumed.err  # it lapsed: nothing to take over
    assert (acode.workspace / "last.txt").read_text() == "2\n"
    assert mirror.query("SELECT lease_holder, lease_epoch FROM acode.sessions") == [(None, 8)]
