"""A property: whatever interleaving of appends, pushes, cut connections (before or after
the remote commit) and kills (a pusher dropped between the remote commit and its local
mark), the local mark never claims what the remote lacks, and once the remote is
reachable again it ends with every event exactly once."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import acode
from acode.domain.config import AcodeConfig
from acode.errors import RemoteUnavailable
from acode.store.base import open_store
from acode.sync.notices import now_us
from acode.sync.pusher import next_batch, push_session
from acode.sync.remote import Remote, connect_remote
from tests.sync.conftest import Mirror, local_events

BATCH = 3
Op = tuple[str, int]

OPS = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 5)),
    st.tuples(st.just("push"), st.just(0)),
    st.tuples(st.just("cut-before-commit"), st.just(0)),
    st.tuples(st.just("cut-after-commit"), st.just(0)),
    st.tuples(st.just("kill-before-mark"), st.just(0)),
    st.tuples(st.just("drop-connection"), st.just(0)),
)


class Pusher:
    """One pushing process: its own SQLite connection, its remote connection while it
    works."""

    def __init__(self, mirror: Mirror, database: Path, session_id: str) -> None:
        self.mirror = mirror
        self.session_id = session_id
        self.store = open_store(database, "normal")
        self.remote: Remote | None = None

    def connected(self) -> Remote:
        if self.remote is None:
            self.remote = connect_remote(self.mirror.dsn)
        return self.remote

    def lost(self) -> None:
        if self.remote is not None:
            self.remote.close()
        self.remote = None

    def push(self) -> None:
        try:
            push_session(self.store, self.connected(), self.session_id, now_us, batch_size=BATCH)
        except RemoteUnavailable:
            self.lost()

    def kill_before_mark(self) -> None:
        try:
            remote = self.connected()
            row = self.store.session(self.session_id)
            batch = next_batch(self.store, row, remote.remote_id, BATCH)
            if batch is not None:
                remote.send(row, batch.events, batch.checkpoints)
        except RemoteUnavailable:
            pass
        self.lost()  # the process is gone: its successor starts afresh

    @property
    def synced(self) -> int:
        return self.store.sync_state(self.store.session(self.session_id).sid).synced_seq

    def close(self) -> None:
        self.lost()
        self.store.close()


def _check_mark(mirror: Mirror, workspace: Path, pusher: Pusher) -> None:
    remote = mirror.events(pusher.session_id)
    ids = [e[0] for e in remote]
    assert len(ids) == len(set(ids)), "an event is on the remote twice"
    local = {e[1]: e for e in local_events(workspace, pusher.session_id)}
    assert all(local[e[1]] == e for e in remote), "the remote holds an event the session lacks"
    held = {e[1] for e in remote}
    assert set(range(1, pusher.synced + 1)) <= held, "marked synced, yet missing remotely"


@pytest.fixture
def workspaces(tmp_path: Path) -> itertools.count[int]:
    return itertools.count()


@seed(20261125)
@settings(
    max_examples=20,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(OPS, min_size=1, max_size=10))
def test_any_interleaving_ends_with_every_event_once(
    ops: list[Op], mirror: Mirror, tmp_path: Path, secret: None, workspaces: itertools.count[int]
) -> None:
    workspace = tmp_path / f"ws{next(workspaces)}"
    workspace.mkdir()
    session = acode.open_session("property", workspace, AcodeConfig(durability="normal"))
    database = workspace / ".agent" / "state" / "acode.db"
    pusher = Pusher(mirror, database, session.id)
    steps = itertools.count()
    try:
        for op, n in ops:
            if op == "append":
                for _ in range(n):
                    i = next(steps)
                    session.step(f"s{i}", lambda ctx: ctx.position)
            elif op == "push":
                pusher.push()
            elif op in ("cut-before-commit", "cut-after-commit"):
                mirror.proxy.cut_at_commit(1, after=op == "cut-after-commit")
                pusher.push()
                mirror.proxy.clear_cut()
            elif op == "kill-before-mark":
                pusher.kill_before_mark()
                pusher.close()
                pusher = Pusher(mirror, database, session.id)
            else:
                mirror.proxy.set_mode("reset")
                mirror.proxy.set_mode("pass")
            _check_mark(mirror, workspace, pusher)
        session.complete()
        session.close()
        pusher.push()
        pusher.push()  # a cut may have ended the first one; the network is fine now
    finally:
        session.close()
        pusher.close()

    local = local_events(workspace, session.id)
    assert mirror.events(session.id) == local
