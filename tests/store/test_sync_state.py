"""The local sync bookkeeping: what is pending, marks that never go back, failures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import acode
from acode.store.records import SessionRow, SyncStateRow
from acode.store.sqlite.connection import connect
from acode.store.sqlite.store import SqliteStore


@pytest.fixture
def store(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SqliteStore]:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "sync-state-tests")
    with acode.open_session("ledger", workspace) as s:
        for i in range(4):
            s.step(f"s{i}", lambda ctx: ctx.position)
    store = SqliteStore.open(workspace / ".agent" / "state" / "acode.db")
    try:
        yield store
    finally:
        store.close()


def _row(store: SqliteStore) -> SessionRow:
    return store.sessions()[0]


def test_a_session_never_synced_has_every_event_pending(store: SqliteStore) -> None:
    row = _row(store)
    assert store.sync_state(row.sid) == SyncStateRow()
    last = store.last_seq(row.sid)
    assert [e.seq for e in store.events(row, 0, 100)] == list(range(1, last + 1))
    assert [e.seq for e in store.events(row, 2, 2)] == [3, 4]
    (backlog,) = store.sync_backlog()
    assert (backlog.session_id, backlog.last_seq, backlog.pending_for()) == (row.id, last, last)


def test_marks_move_forward_only_and_clear_the_failure(store: SqliteStore) -> None:
    row = _row(store)
    store.record_failure(row.sid, "Connection refused", now_us=10, next_retry_us=20)
    store.record_failure(row.sid, "Connection refused", now_us=30, next_retry_us=50)
    failing = store.sync_state(row.sid)
    assert (failing.failures, failing.down_since, failing.next_retry) == (2, 10, 50)
    assert failing.last_error == "Connection refused"

    store.mark_synced(row.sid, "remote-a", 5, now_us=60)
    store.mark_synced(row.sid, "remote-a", 3, now_us=70)  # a slower pusher, later
    state = store.sync_state(row.sid)
    assert (state.synced_seq, state.failures, state.last_error, state.down_since) == (
        5,
        0,
        None,
        None,
    )
    assert (state.last_attempt, state.last_success) == (70, 70)


def test_another_remote_starts_from_nothing(store: SqliteStore) -> None:
    row = _row(store)
    last = store.last_seq(row.sid)
    store.mark_synced(row.sid, "remote-a", last, now_us=1)
    state = store.sync_state(row.sid)
    assert (state.synced_for("remote-a"), state.synced_for("remote-b")) == (last, 0)
    (backlog,) = store.sync_backlog()
    assert (backlog.pending_for("remote-a"), backlog.pending_for("remote-b")) == (0, last)

    store.mark_synced(row.sid, "remote-b", 2, now_us=2)
    assert store.sync_state(row.sid).synced_seq == 2  # not max(last, 2): b holds only 2


def test_a_second_connection_reads_while_the_session_writes(
    workspace: Path, store: SqliteStore
) -> None:
    row = _row(store)
    db = workspace / ".agent" / "state" / "acode.db"
    reader = SqliteStore(connect(db, "normal"), db)
    try:
        store.conn.execute("BEGIN IMMEDIATE")  # the session holds the write lock
        assert len(reader.events(row, 0, 100)) == store.last_seq(row.sid)
        store.conn.execute("ROLLBACK")
    finally:
        reader.close()
