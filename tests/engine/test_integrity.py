"""Tampering with the database is detected: edited, inserted or removed events, forged
checkpoints, and a damaged latest checkpoint (refused, never passed over for an older
one). The attacks someone who can write the database can make: tests/security/."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import acode
from acode.engine.journal import Journal, verify_history
from acode.errors import CheckpointError, ErrorCode
from acode.security.signing import load_signer
from acode.store.sqlite.store import SqliteStore
from acode.system.clock import SystemClock
from acode.system.workspace import StatePaths


def _paused_session(ws: Path, steps: int = 3) -> str:
    s = acode.open_session("t", workspace=ws)
    for i in range(steps):
        s.step(f"s{i}", lambda ctx: {"i": ctx.position})
    s.pause("test")
    s.close()
    return s.id


def _raw(ws: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(StatePaths(ws).db, isolation_level=None)
    conn.execute("DROP TRIGGER IF EXISTS events_are_append_only_update")
    conn.execute("DROP TRIGGER IF EXISTS events_are_append_only_delete")
    return conn


def test_an_untouched_session_verifies(workspace: Path) -> None:
    sid = _paused_session(workspace)
    store = SqliteStore.open(StatePaths(workspace).db)
    summary = verify_history(store, store.session(sid), load_signer())
    journal = Journal.load(store, store.session(sid), SystemClock(), load_signer())
    assert summary == journal.summary
    store.close()


def test_an_edited_event_after_the_checkpoint_is_refused(workspace: Path) -> None:
    sid = _paused_session(workspace)
    with _raw(workspace) as conn:
        last = conn.execute("SELECT max(seq) FROM events").fetchone()[0]
        conn.execute(
            "UPDATE events SET payload = replace(payload, 'test', 'edit') WHERE seq = ?", (last,)
        )
        # Append a forged event after the checkpoint too.
        conn.execute(
            "INSERT INTO events (id, sid, seq, event_id, ts, type, payload, hash)"
            " SELECT id + 1, sid, seq + 1, event_id, ts, type, payload, hash FROM events"
            " WHERE seq = ?",
            (last,),
        )
    with pytest.raises(CheckpointError) as info:
        acode.resume_session(sid, workspace=workspace)
    assert info.value.code in (ErrorCode.CHAIN_BROKEN, ErrorCode.CHECKPOINT_INVALID)


def test_an_edited_old_event_is_found_by_full_verification(workspace: Path) -> None:
    sid = _paused_session(workspace)
    with _raw(workspace) as conn:
        seq = conn.execute("SELECT min(seq) FROM events WHERE type = 'step_completed'").fetchone()[
            0
        ]
        conn.execute(
            "UPDATE events SET payload = replace(payload, '\"i\":0', '\"i\":9') WHERE seq = ?",
            (seq,),
        )
        assert conn.total_changes == 1
    store = SqliteStore.open(StatePaths(workspace).db)
    with pytest.raises(CheckpointError, match=f"event {seq} ") as info:
        verify_history(store, store.session(sid), load_signer())
    assert info.value.code is ErrorCode.CHAIN_BROKEN
    store.close()


def test_a_forged_checkpoint_signature_is_refused(workspace: Path) -> None:
    sid = _paused_session(workspace)
    with _raw(workspace) as conn:
        conn.execute("UPDATE events SET signature = randomblob(32) WHERE signature IS NOT NULL")
    with pytest.raises(CheckpointError, match="not signed by the key") as info:
        acode.resume_session(sid, workspace=workspace)
    assert info.value.code is ErrorCode.CHECKPOINT_INVALID


def test_a_damaged_latest_checkpoint_is_tampering_not_a_reason_to_go_back(
    workspace: Path,
) -> None:
    sid = _paused_session(workspace)
    with _raw(workspace) as conn:
        conn.execute(
            "UPDATE events SET signature = 'damaged'"
            " WHERE seq = (SELECT max(seq) FROM events WHERE signature IS NOT NULL)"
        )
    with pytest.raises(CheckpointError, match="newest checkpoint") as info:
        acode.resume_session(sid, workspace=workspace)
    assert info.value.code is ErrorCode.CHECKPOINT_INVALID


def test_a_key_other_than_the_users_cannot_verify(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = _paused_session(workspace)
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "someone-else-entirely")
    with pytest.raises(CheckpointError, match="recorded with another key") as info:
        acode.resume_session(sid, workspace=workspace)
    assert info.value.code is ErrorCode.KEY_CHANGED


def test_the_key_file_is_private(workspace: Path) -> None:
    from acode.security.signing import key_path

    _paused_session(workspace)
    assert key_path().stat().st_mode & 0o777 == 0o600
    key_path().chmod(0o644)
    with pytest.raises(CheckpointError, match="readable by others"):
        load_signer()


def test_full_verification_replays_every_kind_of_history(workspace: Path) -> None:
    from acode.errors import ApprovalPending
    from acode.operations.decide import decide_approval

    s = acode.open_session("t", workspace=workspace)
    s.write("w", "a.txt", "one\n")
    s.edit("e", "a.txt", "one", "two")
    s.read("r", "a.txt")
    s.run("x", "echo hi > out.txt", paths=["out.txt"])
    with pytest.raises(ApprovalPending):
        s.approve("ok", "Go?")
    s.close()
    decide_approval(s.id, workspace)
    with acode.resume_session(s.id, workspace=workspace) as r:
        for call in (
            lambda: r.write("w", "a.txt", "one\n"),
            lambda: r.edit("e", "a.txt", "one", "two"),
            lambda: r.read("r", "a.txt"),
            lambda: r.run("x", "echo hi > out.txt", paths=["out.txt"]),
        ):
            call()
        assert r.approve("ok", "Go?")
    store = SqliteStore.open(StatePaths(workspace).db)
    row = store.session(s.id)
    summary = verify_history(store, row, load_signer())
    assert summary.state.value == "COMPLETED"
    store.conn.execute("UPDATE steps SET status = 'completed' WHERE step_id = 'x' AND 0")
    store.conn.execute("UPDATE steps SET attempt = 7 WHERE step_id = 'e'")
    with pytest.raises(CheckpointError, match="step 'e'"):
        verify_history(store, row, load_signer())
    store.close()


def test_resume_verify_refuses_a_history_that_does_not_replay(workspace: Path) -> None:
    s = acode.open_session("t", workspace=workspace)
    s.write("w", "a.txt", "one\n")  # a start record, so a row in the steps table
    s.pause("test")
    s.close()
    sid = s.id
    with _raw(workspace) as conn:
        assert conn.execute("UPDATE steps SET status = 'failed' WHERE step_id = 'w'").rowcount
    # The unfinished steps' rows are held to their events before anything is used.
    with pytest.raises(CheckpointError, match="steps table's row of step 'w'"):
        acode.resume_session(sid, workspace=workspace)
    with pytest.raises(CheckpointError, match="the steps table says step 'w' is failed"):
        acode.resume_session(sid, workspace=workspace, verify=True)
