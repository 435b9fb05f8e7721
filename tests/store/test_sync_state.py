"""The local sync bookkeeping: what is pending, marks that never go back, failures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import acode
from acode.store.connection import connect
from acode.store.records import SessionRow
from acode.store.sqlite_store import SqliteStore, open_store
from acode.store.sync_state import SyncLedger, SyncStateRow


@pytest.fixture
def ledger(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SyncLedger]:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "sync-state-tests")
    with acode.open_session("ledger", workspace) as s:
        for i in range(4):
            s.step(f"s{i}", lambda ctx: ctx.position)
    store = open_store(workspace / ".agent" / "state" / "acode.db")
    try:
        yield SyncLedger(store)
    finally:
        store.close()


def _row(ledger: SyncLedger) -> SessionRow:
    return ledger.store.sessions()[0]


def test_a_session_never_synced_has_every_event_pending(ledger: SyncLedger) -> None:
    row = _row(ledger)
    assert ledger.state(row.sid) == SyncStateRow()
    last = ledger.last_seq(row.sid)
    assert [e.seq for e in ledger.pending(row, 0, 100)] == list(range(1, last + 1))
    assert [e.seq for e in ledger.pending(row, 2, 2)] == [3, 4]
    (backlog,) = ledger.backlog()
    assert (backlog.session_id, backlog.last_seq, backlog.pending_for()) == (row.id, last, last)


def test_marks_move_forward_only_and_clear_the_failure(ledger: SyncLedger) -> None:
    row = _row(ledger)
    ledger.record_failure(row.sid, "Connection refused", now_us=10, next_retry_us=20)
    ledger.record_failure(row.sid, "Connection refused", now_us=30, next_retry_us=50)
    failing = ledger.state(row.sid)
    assert (failing.failures, failing.down_since, failing.next_retry) == (2, 10, 50)
    assert failing.last_error == "Connection refused"

    ledger.mark_synced(row.sid, "remote-a", 5, now_us=60)
    ledger.mark_synced(row.sid, "remote-a", 3, now_us=70)  # a slower pusher, later
    state = ledger.state(row.sid)
    assert (state.synced_seq, state.failures, state.last_error, state.down_since) == (
        5,
        0,
        None,
        None,
    )
    assert (state.last_attempt, state.last_success) == (70, 70)


def test_another_remote_starts_from_nothing(ledger: SyncLedger) -> None:
    row = _row(ledger)
    last = ledger.last_seq(row.sid)
    ledger.mark_synced(row.sid, "remote-a", last, now_us=1)
    state = ledger.state(row.sid)
    assert (state.synced_for("remote-a"), state.synced_for("remote-b")) == (last, 0)
    (backlog,) = ledger.backlog()
    assert (backlog.pending_for("remote-a"), backlog.pending_for("remote-b")) == (0, last)

    ledger.mark_synced(row.sid, "remote-b", 2, now_us=2)
    assert ledger.state(row.sid).synced_seq == 2  # not max(last, 2): b holds only 2


def test_a_second_connection_reads_while_the_session_writes(
    workspace: Path, ledger: SyncLedger
) -> None:
    row = _row(ledger)
    db = workspace / ".agent" / "state" / "acode.db"
    reader = SyncLedger(SqliteStore(connect(db, "normal"), db))
    try:
        ledger.store.conn.execute("BEGIN IMMEDIATE")  # the session holds the write lock
        assert len(reader.pending(row, 0, 100)) == ledger.last_seq(row.sid)
        ledger.store.conn.execute("ROLLBACK")
    finally:
        reader.store.close()
