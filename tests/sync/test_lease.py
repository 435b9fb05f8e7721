"""The lease on the remote: it names its holder's machine, pid and start; a holder of this
machine that has ended (its pid free, or given to another process) is taken over at once
and by one taker only, when two race; every new holder raises the epoch."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import acode
from acode.store.base import EventStore, open_store
from acode.sync.notices import NoticeKind, SyncNotice, now_us
from acode.sync.pusher import push_session
from acode.sync.remote import Lease, LeaseOutcome, connect_remote
from acode.sync.worker import SyncWorker
from acode.system.process_table import process_table_id, start_mark
from tests.cli.conftest import wait_for
from tests.sync.conftest import Mirror

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Local:
    database: Path
    session_id: str
    store: EventStore


@pytest.fixture
def local(workspace: Path, secret: None) -> Iterator[Local]:
    """A session recorded with no remote configured."""
    with acode.open_session("leased", workspace) as s:
        s.step("one", lambda ctx: 1)
        session_id = s.id
    database = workspace / ".agent" / "state" / "acode.db"
    store = open_store(database)
    try:
        yield Local(database, session_id, store)
    finally:
        store.close()


def _here(pid: int, started: int | None) -> Lease:
    """A holder of this machine, as its own acode describes itself."""
    return Lease(f"holder-{pid}-{started}", socket.gethostname(), pid, process_table_id(), started)


def _me() -> Lease:
    return Lease.for_this_process(process_table_id(), start_mark(os.getpid()), start_mark)


def _take(mirror: Mirror, local: Local, lease: Lease) -> LeaseOutcome:
    remote = connect_remote(mirror.dsn)
    try:
        return push_session(local.store, remote, local.session_id, now_us, lease=lease).lease
    finally:
        remote.close()


def _release(mirror: Mirror, local: Local, lease: Lease) -> None:
    remote = connect_remote(mirror.dsn)
    try:
        push_session(local.store, remote, local.session_id, now_us, release=lease)
    finally:
        remote.close()


def _row(mirror: Mirror) -> tuple[Any, ...]:
    [row] = mirror.query(
        "SELECT lease_holder, lease_pid, lease_machine, lease_started, lease_epoch"
        " FROM acode.sessions"
    )
    return row


@pytest.fixture
def ended(mirror: Mirror, local: Local) -> Iterator[Lease]:
    """The lease held by a process of this machine that then ended (killed, not reaped:
    a zombie has stopped running too)."""
    proc = subprocess.Popen(["sleep", "60"])
    holder = _here(proc.pid, start_mark(proc.pid))
    assert _take(mirror, local, holder).epoch == 1
    proc.kill()
    wait_for("the holder to end", lambda: start_mark(proc.pid) is None)
    yield holder
    proc.wait()


def test_a_holder_of_this_machine_that_ended_is_taken_over_at_once(
    mirror: Mirror, local: Local, ended: Lease
) -> None:
    me = _me()

    outcome = _take(mirror, local, me)

    assert outcome.holder is None
    assert outcome.epoch == 2
    assert outcome.replaced is not None
    assert (outcome.replaced.pid, outcome.replaced.epoch) == (ended.pid, 1)
    assert _row(mirror) == (me.token, os.getpid(), process_table_id(), me.started, 2)


def test_a_live_holder_of_this_machine_keeps_the_lease(mirror: Mirror, local: Local) -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        holder = _here(proc.pid, start_mark(proc.pid))
        _take(mirror, local, holder)

        outcome = _take(mirror, local, _me())

        assert outcome.holder is not None
        assert (outcome.holder.pid, outcome.epoch, outcome.replaced) == (proc.pid, 0, None)
        assert _me().runs_here(outcome.holder) is True
        assert _row(mirror)[:2] == (holder.token, proc.pid)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("machine", ["another-boot/pid:[4026531836]", None])
def test_a_holder_of_another_machine_keeps_the_lease_until_it_lapses(
    mirror: Mirror, local: Local, machine: str | None
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    # Its pid is free here, and means nothing here.
    holder = Lease("elsewhere", "box", gone.pid, machine, 12345)
    _take(mirror, local, holder)
    me = _me()

    refused = _take(mirror, local, me)
    mirror.execute("UPDATE acode.sessions SET lease_expires = now() - interval '1 s'")
    lapsed = _take(mirror, local, me)

    assert refused.holder is not None
    assert me.here(refused.holder) is (False if machine else None)
    assert (lapsed.holder, lapsed.epoch, lapsed.replaced) == (None, 2, None)


def test_the_epoch_counts_holders_not_renewals(mirror: Mirror, local: Local) -> None:
    me, other = _me(), _me()

    epochs = [_take(mirror, local, me).epoch for _ in range(3)]
    _release(mirror, local, me)
    released = _row(mirror)
    epochs.append(_take(mirror, local, other).epoch)
    mirror.execute("UPDATE acode.sessions SET lease_expires = now() - interval '1 s'")
    epochs.append(_take(mirror, local, me).epoch)

    assert epochs == [1, 1, 1, 2, 3]
    assert released == (None, None, None, None, 1)  # the epoch outlives a release


# Takes the lease for itself once the test has made the remote wait, prints what came of
# it, and holds on (alive, so that the loser finds a live winner) until its stdin closes.
RACER = """
import json, os, sys, time
from pathlib import Path
from acode.store.base import open_store
from acode.sync.notices import NoticeKind, SyncNotice, now_us
from acode.sync.pusher import push_session
from acode.sync.remote import Lease, connect_remote
from acode.system.process_table import process_table_id, start_mark

dsn, database, session_id, go = sys.argv[1:]
lease = Lease.for_this_process(process_table_id(), start_mark(os.getpid()), start_mark)
remote = connect_remote(dsn, statement_timeout=120)
store = open_store(Path(database), "normal")
print("ready", flush=True)
while not Path(go).exists():
    time.sleep(0.01)
outcome = push_session(store, remote, session_id, now_us, lease=lease).lease
print(json.dumps({
    "pid": os.getpid(),
    "epoch": outcome.epoch,
    "holder": outcome.holder.pid if outcome.holder else None,
    "replaced": outcome.replaced.pid if outcome.replaced else None,
}), flush=True)
sys.stdin.read()
"""


def test_of_two_processes_racing_for_a_dead_holders_lease_exactly_one_wins(
    mirror: Mirror, local: Local, ended: Lease, tmp_path: Path
) -> None:
    import psycopg

    go = tmp_path / "go"
    argv = [sys.executable, "-c", RACER, mirror.dsn, str(local.database), local.session_id]
    racers = [
        subprocess.Popen([*argv, str(go)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        for racer in racers:
            assert racer.stdout is not None
            assert racer.stdout.readline().strip() == "ready"
        # The session's row locked here: both racers are let go and queue behind the lock,
        # so that both have seen the dead holder before either can take its place.
        with psycopg.connect(mirror.pg.direct_dsn(mirror.dbname)) as conn:
            conn.execute("SELECT 1 FROM acode.sessions FOR UPDATE")
            go.touch()
            wait_for(
                "both racers to wait for the row",
                lambda: (
                    mirror.query(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                    == [(2,)]
                ),
                timeout=60,
            )
        results = []
        for racer in racers:
            assert racer.stdout is not None
            results.append(json.loads(racer.stdout.readline()))
    finally:
        for racer in racers:
            racer.communicate("", timeout=30)

    won = [r for r in results if r["holder"] is None]
    lost = [r for r in results if r["holder"] is not None]
    assert len(won) == 1, results
    assert len(lost) == 1, results
    assert (won[0]["replaced"], won[0]["epoch"]) == (ended.pid, 2)
    assert (lost[0]["holder"], lost[0]["replaced"], lost[0]["epoch"]) == (won[0]["pid"], None, 0)
    _, pid, machine, started, epoch = _row(mirror)
    assert (pid, machine, epoch) == (won[0]["pid"], process_table_id(), 2)
    assert started is not None


# In a pid namespace of its own: a holder takes the lease and is killed, the kernel gives
# its pid to a new process, and this process asks for the lease.
REUSED_PID = """
import json, os, subprocess, sys, time
from pathlib import Path
from acode.store.base import open_store
from acode.sync.notices import NoticeKind, SyncNotice, now_us
from acode.sync.pusher import push_session
from acode.sync.remote import Lease, connect_remote
from acode.system.process_table import process_table_id, start_mark

dsn, database, session_id = sys.argv[1:]
store = open_store(Path(database), "normal")
remote = connect_remote(dsn)
machine = process_table_id()

def take(lease):
    return push_session(store, remote, session_id, now_us, lease=lease).lease

old = subprocess.Popen(["sleep", "60"])
take(Lease("old-holder", "box", old.pid, machine, start_mark(old.pid)))
old.kill()
old.wait()
time.sleep(0.05)  # a later clock tick: their start times differ
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(old.pid - 1))
new = subprocess.Popen(["sleep", "60"])
outcome = take(Lease.for_this_process(machine, start_mark(os.getpid()), start_mark))
print(json.dumps({
    "reused": new.pid == old.pid,
    "running": new.poll() is None,
    "replaced": outcome.replaced.pid if outcome.replaced else None,
    "old": old.pid,
    "epoch": outcome.epoch,
    "machine": machine,
}))
new.kill()
new.wait()
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_holder_whose_pid_the_kernel_gave_to_another_process_is_taken_over(
    mirror: Mirror, local: Local
) -> None:
    # A user and a pid namespace of the test's own, where it may choose the next pid.
    argv = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
    probe = subprocess.run([*argv, "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no user and pid namespaces here: {probe.stderr.decode().strip()}")
    result = subprocess.run(
        [
            *argv,
            sys.executable,
            "-c",
            REUSED_PID,
            mirror.dsn,
            str(local.database),
            local.session_id,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)

    assert (found["reused"], found["running"]) == (True, True)  # the same pid, and it runs
    assert (found["replaced"], found["epoch"]) == (found["old"], 2)
    assert found["machine"] != process_table_id()  # another pid namespace: other processes


def test_a_running_sessions_worker_takes_over_a_holder_here_that_ended(
    mirror: Mirror, local: Local, ended: Lease
) -> None:
    # A session reopened without a resume (a work session's next command) asks for the
    # lease only through its worker.
    seen: list[SyncNotice] = []
    me = _me()
    worker = SyncWorker(
        store_url=local.database,
        dsn=mirror.dsn,
        session_id=local.session_id,
        lease=me,
        report=seen.append,
    )
    worker.start()
    try:
        wait_for("the worker's lease", lambda: _row(mirror)[0] == me.token, timeout=30)
    finally:
        assert worker.close(10)

    [notice] = seen
    assert notice.kind is NoticeKind.LEASE_TAKEN_OVER
    assert notice.holder is not None
    assert notice.holder.startswith(f"pid {ended.pid} on host {ended.host} since ")
    assert notice.epoch == 2
    assert _row(mirror) == (None, None, None, None, 2)  # given back as it closed
