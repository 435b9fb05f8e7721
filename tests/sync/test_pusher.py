"""Pushing a session: every event reaches the remote exactly once, whichever side of
the remote commit a connection is cut, and the local mark moves only after it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import acode
from acode.errors import RemoteUnavailable
from acode.store.base import EventStore, open_store
from acode.sync.notices import now_us
from acode.sync.pusher import next_batch, push_session
from acode.sync.remote import Lease, Remote, connect_remote
from tests.support.postgres import scratch_database
from tests.sync.conftest import Mirror, assert_mirrored

STEPS = 28  # 31 events: session_created, state_changed, 28 steps, completion


@dataclass
class Local:
    workspace: Path
    session_id: str
    store: EventStore

    @property
    def synced(self) -> int:
        return self.store.sync_state(self.store.session(self.session_id).sid).synced_seq

    @property
    def last(self) -> int:
        return self.store.last_seq(self.store.session(self.session_id).sid)


@pytest.fixture
def local(workspace: Path, secret: None) -> Iterator[Local]:
    """A finished session recorded with no remote configured."""
    with acode.open_session("push me", workspace) as s:
        for i in range(STEPS):
            s.step(f"s{i}", lambda ctx: {"i": ctx.position})
        session_id = s.id
    store = open_store(workspace / ".agent" / "state" / "acode.db")
    try:
        yield Local(workspace, session_id, store)
    finally:
        store.close()


def _push(local: Local, remote: Remote, **options: object) -> int:
    return push_session(local.store, remote, local.session_id, now_us, **options).pushed  # type: ignore[arg-type]


def test_a_push_sends_every_event_in_order_then_nothing(local: Local, mirror: Mirror) -> None:
    remote = connect_remote(mirror.dsn)
    try:
        assert _push(local, remote, batch_size=7) == local.last
        assert local.synced == local.last
        assert _push(local, remote, batch_size=7) == 0
    finally:
        remote.close()
    assert_mirrored(mirror, local.workspace, local.session_id)
    (state,) = mirror.query("SELECT state FROM acode.sessions")
    assert state == ("COMPLETED",)
    assert mirror.query("SELECT max(seq) FROM acode.checkpoints") == [(local.last,)]


def test_a_batch_sent_again_after_a_kill_before_the_mark_lands_once(
    local: Local, mirror: Mirror
) -> None:
    remote = connect_remote(mirror.dsn)
    try:
        row = local.store.session(local.session_id)
        batch = next_batch(local.store, row, remote.remote_id, 10)
        assert batch is not None
        remote.send(row, batch.events, batch.checkpoints)  # committed; the process "dies"
        assert (local.synced, mirror.count(local.session_id)) == (0, 10)

        assert _push(local, remote, batch_size=10) == local.last  # sends the 10 again
    finally:
        remote.close()
    assert_mirrored(mirror, local.workspace, local.session_id)


@pytest.mark.parametrize("after", [False, True], ids=["before-commit", "after-commit"])
def test_a_connection_cut_at_a_commit_neither_loses_nor_duplicates(
    local: Local, mirror: Mirror, after: bool
) -> None:
    remote = connect_remote(mirror.dsn)
    fired = mirror.proxy.cut_at_commit(2, after=after)
    with pytest.raises(RemoteUnavailable) as cut:
        _push(local, remote, batch_size=10)
    remote.close()

    assert fired.is_set()
    assert "connection" in cut.value.reason.lower()
    assert local.synced == 10  # the first batch; the second was cut
    assert mirror.count(local.session_id) == (20 if after else 10)

    again = connect_remote(mirror.dsn)
    try:
        assert _push(local, again, batch_size=10) == local.last - 10
    finally:
        again.close()
    assert_mirrored(mirror, local.workspace, local.session_id)


def test_a_connection_lost_while_a_batch_waits_for_its_commit(local: Local, mirror: Mirror) -> None:
    remote = connect_remote(mirror.dsn)
    held = mirror.proxy.cut_at_commit(1, after=False, then="hold")
    failed: list[BaseException] = []

    def push() -> None:
        try:
            _push(local, remote)
        except BaseException as exc:
            failed.append(exc)

    pusher = threading.Thread(target=push)
    pusher.start()
    assert held.wait(10)
    mirror.proxy.set_mode("reset")  # the network drops the hanging connection
    pusher.join(10)
    remote.close()
    mirror.proxy.set_mode("pass")

    assert isinstance(failed[0], RemoteUnavailable)
    assert (local.synced, mirror.count(local.session_id)) == (0, 0)
    again = connect_remote(mirror.dsn)
    try:
        _push(local, again)
    finally:
        again.close()
    assert_mirrored(mirror, local.workspace, local.session_id)


def test_a_workspace_pointed_at_another_remote_pushes_everything_there(
    local: Local, mirror: Mirror
) -> None:
    first = connect_remote(mirror.dsn)
    _push(local, first)
    with scratch_database(mirror.pg) as other:
        second = connect_remote(mirror.pg.url_via(mirror.proxy.port, other))
        try:
            assert _push(local, second) == local.last
        finally:
            second.close()
    assert _push(local, first) == local.last  # the record says "the other one": all again
    first.close()
    assert_mirrored(mirror, local.workspace, local.session_id)


def test_secrets_reach_the_remote_redacted_and_flagged(
    workspace: Path, secret: None, mirror: Mirror
) -> None:
    token = "ghp_" + "a" * 36
    with acode.open_session("secrets", workspace, mirror.config()) as s:
        s.step("leak", lambda ctx: {"output": f"token {token}", "password": "hunter22"})
        s.step("plain", lambda ctx: {"output": "nothing to hide"})
        session_id = s.id

    rows = mirror.query(
        "SELECT type, payload, redacted FROM acode.events WHERE session_id = %s ORDER BY seq",
        (session_id,),
    )
    text = " ".join(p for _, p, _ in rows)
    assert token not in text
    assert "hunter22" not in text
    flagged = [(t, r) for t, p, r in rows if r]
    assert flagged == [("step_completed", True)]
    assert any("nothing to hide" in p for _, p, r in rows if not r)


def test_a_session_that_also_ran_elsewhere_is_reported_not_overwritten(
    local: Local, mirror: Mirror
) -> None:
    import uuid

    connect_remote(mirror.dsn).close()
    mirror.execute(
        "INSERT INTO acode.sessions (id, title, state, workspace, host, created_at, updated_at)"
        " VALUES (%s, 'elsewhere', 'EXECUTING', '/w', 'laptop', now(), now())",
        (local.session_id,),
    )
    mirror.execute(
        "INSERT INTO acode.events (event_id, session_id, seq, ts, type, payload, hash)"
        " VALUES (%s, %s, 1, 1, 'session_created', '{}', '\\x00')",
        (str(uuid.uuid4()), local.session_id),
    )
    remote = connect_remote(mirror.dsn)
    try:
        with pytest.raises(RemoteUnavailable, match="also ran somewhere else"):
            _push(local, remote)
    finally:
        remote.close()
    assert local.synced == 0
    assert mirror.count(local.session_id) == 1


def test_a_lease_names_its_holder_refuses_others_and_lapses(local: Local, mirror: Mirror) -> None:
    mine, theirs = Lease("token-a", "laptop", 4242), Lease("token-b", "desktop", 77)
    remote = connect_remote(mirror.dsn)
    try:
        assert (
            push_session(local.store, remote, local.session_id, now_us, lease=mine).holder is None
        )
        other = push_session(local.store, remote, local.session_id, now_us, lease=theirs).holder
        assert other is not None
        assert other.describe().startswith("pid 4242 on host laptop since ")

        mirror.execute("UPDATE acode.sessions SET lease_expires = now() - interval '1 s'")
        assert (
            push_session(local.store, remote, local.session_id, now_us, lease=theirs).holder is None
        )
        push_session(local.store, remote, local.session_id, now_us, release=theirs)
    finally:
        remote.close()
    assert mirror.query("SELECT lease_holder, lease_host, lease_pid FROM acode.sessions") == [
        (None, None, None)
    ]
