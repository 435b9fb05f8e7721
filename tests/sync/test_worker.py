"""The sync worker beside a running session: it mirrors the session while it runs,
never makes a step wait, reports degraded mode and the reconnect, and holds the
session's lease on the remote while it runs."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import acode
from acode.domain.config import AcodeConfig, SyncSettings
from acode.engine.observer import StepNotice
from acode.store.base import open_store
from acode.store.records import SyncStateRow
from acode.sync.notices import NoticeKind, SyncNotice
from acode.sync.remote import Lease
from acode.sync.service import sync_workspace
from acode.sync.worker import SyncWorker
from tests.sync.conftest import SECRET, Mirror, assert_mirrored, local_events


class Watcher:
    """An observer that keeps the sync notices a person would see."""

    def __init__(self) -> None:
        self.notices: list[SyncNotice] = []

    def on_step(self, notice: StepNotice) -> None:
        return None

    def on_sync(self, notice: SyncNotice) -> None:
        self.notices.append(notice)

    def kinds(self) -> list[NoticeKind]:
        return [n.kind for n in self.notices]


def _eventually(what: str, probe: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _state(workspace: Path, session_id: str) -> SyncStateRow:
    store = open_store(workspace / ".agent" / "state" / "acode.db")
    try:
        return store.sync_state(store.session(session_id).sid)
    finally:
        store.close()


def test_a_running_session_is_mirrored_while_it_runs_and_holds_the_lease(
    workspace: Path, secret: None, mirror: Mirror
) -> None:
    with acode.open_session("mirrored", workspace, mirror.config()) as s:
        for i in range(5):
            s.step(f"s{i}", lambda ctx: ctx.position)
        expected = len(local_events(workspace, s.id))
        _eventually("the worker's push", lambda: mirror.count(s.id) == expected)
        lease = mirror.query(
            "SELECT lease_host, lease_pid, lease_expires > now() FROM acode.sessions"
        )
        assert lease == [(socket.gethostname(), os.getpid(), True)]
        session_id = s.id

    assert_mirrored(mirror, workspace, session_id)
    assert mirror.query("SELECT state, lease_holder FROM acode.sessions") == [("COMPLETED", None)]
    assert _state(workspace, session_id).synced_seq == expected + 1


def test_a_step_never_waits_for_a_remote_that_does_not_answer(
    workspace: Path, secret: None, mirror: Mirror
) -> None:
    mirror.proxy.set_mode("blackhole")  # connections open, nothing ever answers
    started = time.monotonic()
    session = acode.open_session("offline", workspace, mirror.config())
    opened = time.monotonic()
    for i in range(10):
        session.step(f"s{i}", lambda ctx: ctx.position)
    stepped = time.monotonic()
    session.complete()
    session.close()
    closed = time.monotonic()

    assert opened - started < 1.0
    assert stepped - opened < 1.0  # ten durable steps, none waiting on the network
    assert closed - stepped < 2.8  # the grace period, not the remote's silence
    mirror.proxy.set_mode("pass")
    report = sync_workspace(workspace / ".agent" / "state" / "acode.db", mirror.dsn)
    assert report.reason is None
    assert_mirrored(mirror, workspace, session.id)


def test_degraded_mode_then_the_reconnect_is_noticed_logged_and_drained(
    workspace: Path, secret: None, mirror: Mirror
) -> None:
    mirror.proxy.down()  # connection refused
    watcher = Watcher()
    with acode.open_session("flaky", workspace, mirror.config(), observer=watcher) as s:
        s.step("a", lambda ctx: 1)
        _eventually("degraded mode", lambda: NoticeKind.DEGRADED in watcher.kinds())
        degraded = watcher.notices[0]
        assert degraded.reason == f"Connection refused (127.0.0.1:{mirror.proxy.port})"
        assert degraded.pending >= 2  # at least what open_session wrote
        state = _state(workspace, s.id)
        assert state.failures >= 1
        assert state.next_retry
        assert state.down_since

        cpu = time.process_time()
        for i in range(3):  # the session goes on, locally, and wakes a worker backing off
            s.step(f"b{i}", lambda ctx: ctx.position)
        time.sleep(0.3)
        assert time.process_time() - cpu < 0.2  # which waits: it does not spin
        assert _state(workspace, s.id).failures == state.failures  # nor try again early
        mirror.proxy.up()
        _eventually("the reconnect", lambda: NoticeKind.RECONNECTED in watcher.kinds(), 5)
        session_id = s.id

    back = watcher.notices[watcher.kinds().index(NoticeKind.RECONNECTED)]
    assert back.pushed >= 6
    assert back.away_seconds is not None
    assert back.away_seconds >= 0.9
    assert watcher.kinds().count(NoticeKind.DEGRADED) == 1
    log = workspace / ".agent" / "state" / "logs" / "acode.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    kinds = [r["event"] for r in records]
    assert kinds == ["sync_degraded", "sync_reconnected"]
    assert records[1]["pushed"] == back.pushed
    assert records[1]["away_seconds"] >= 0.9
    assert_mirrored(mirror, workspace, session_id)
    assert _state(workspace, session_id).failures == 0


def test_the_worker_renews_the_lease_and_reports_another_holder_once(
    workspace: Path, secret: None, mirror: Mirror
) -> None:
    with acode.open_session("leased", workspace) as s:
        s.step("a", lambda ctx: 1)
        session_id = s.id
    database = workspace / ".agent" / "state" / "acode.db"
    sync_workspace(database, mirror.dsn)
    seen: list[SyncNotice] = []

    def run_worker(lease: Lease) -> SyncWorker:
        worker = SyncWorker(
            store_url=database,
            dsn=mirror.dsn,
            session_id=session_id,
            lease=lease,
            report=seen.append,
            renew_every=0.2,
        )
        worker.start()
        return worker

    first = run_worker(Lease("holder-1", "laptop", 1111))
    _eventually(
        "the lease", lambda: mirror.query("SELECT lease_pid FROM acode.sessions") == [(1111,)]
    )
    (expires,) = mirror.query("SELECT lease_expires FROM acode.sessions")[0]
    _eventually(
        "a renewal",
        lambda: mirror.query("SELECT lease_expires FROM acode.sessions")[0][0] > expires,
    )
    second = run_worker(Lease("holder-2", "desktop", 2222))
    _eventually("the conflict", lambda: bool(seen))
    time.sleep(0.5)  # several renewals: still one notice
    assert second.close(5)
    assert first.close(5)

    assert [n.kind for n in seen] == [NoticeKind.LEASE_CONFLICT]
    assert seen[0].holder is not None
    assert seen[0].holder.startswith("pid 1111 on host laptop")
    assert mirror.query("SELECT lease_holder FROM acode.sessions") == [(None,)]


def test_without_a_remote_no_sync_code_is_imported(workspace: Path) -> None:
    code = (
        "import sys, acode\n"
        f"with acode.open_session('local', {str(workspace)!r}) as s:\n"
        "    s.step('a', lambda ctx: 1)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('acode.sync', 'psycopg'))))\n"
    )
    env = {**os.environ, "ACODE_CHECKPOINT_SECRET": SECRET}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_remote_is_not_part_of_a_sessions_recorded_configuration(
    workspace: Path, secret: None, mirror: Mirror
) -> None:
    dsn = mirror.pg.url_via(mirror.proxy.port, mirror.dbname, user="postgres", password="pw-1234")
    first = acode.open_session("moves", workspace, AcodeConfig(sync=SyncSettings(remote=dsn)))
    first.step("a", lambda ctx: 1)
    first.close()  # interrupted: resumable
    db = workspace / ".agent" / "state" / "acode.db"
    with sqlite3.connect(db) as raw:
        (recorded,) = raw.execute("SELECT config FROM sessions").fetchone()
    raw.close()
    assert "pw-1234" not in recorded
    assert json.loads(recorded)["sync"] == {"remote": None}

    # Resumed with no remote (or another one): not a configuration change.
    with acode.resume_session(first.id, workspace, AcodeConfig()) as again:
        assert again.step("a", lambda ctx: 2) == 1
        again.step("b", lambda ctx: 2)
    assert again.state.value == "COMPLETED"
