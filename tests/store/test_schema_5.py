"""Schema 5: event ids as 16 bytes, 16-byte checkpoint tags, step fields at their
defaults left out, and checkpoints whose summary is derived.

A session recorded by schema 4 (text ids, a summary and a 32-byte signature in every
checkpoint, `kind` and `attempt` in every step event) upgrades and resumes; a database
holding an id acode never wrote is refused whole; a derived summary is trusted only
through its signature, and a damaged summary that others derive theirs from falls back
to an older checkpoint that wrote its own.
"""

from __future__ import annotations

import itertools
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import acode
from acode.domain.ids import uuid_bytes
from acode.engine.journal import SUMMARY_EVERY, Journal, checkpoint_message, verify_history
from acode.errors import StorageError
from acode.security.signing import load_signer
from acode.store.base import open_store
from acode.store.records import CheckpointRow
from acode.store.sqlite.migrations import schema_version
from acode.system.clock import SystemClock
from acode.system.workspace import StatePaths
from tests.store.older_schemas import older_database
from tests.store.recorded import paused_session

_STEP_EVENTS = {"step_started", "step_completed", "step_failed", "step_rolled_back"}


def _result(ctx: acode.StepContext) -> dict[str, Any]:
    return {"i": ctx.position}


def _paused(ws: Path, steps: int) -> str:
    return paused_session(ws, steps, _result, title="five")


def _as_schema_4(ws: Path, *, event_id: object = None) -> None:
    """Rewrite the database as schema 4 wrote it: text ids (the first one replaced by
    ``event_id`` when given), `kind` and `attempt` in every step event (so a new hash
    chain), and every checkpoint with its summary and a 32-byte signature."""
    signer = load_signer()
    with older_database(ws, 4, lambda session_id, payload: None) as old:
        for e in old.events:
            checkpoint, signature = None, None
            if e.checkpointed:
                checkpoint = e.summary.encode()
                unsigned = CheckpointRow(e.seq, e.seq, checkpoint, e.head, "", e.ts)
                signature = signer.sign(checkpoint_message(e.session_id, e.title, unsigned))
            old.conn.execute(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    e.sid * 2**32 + e.seq,
                    e.sid,
                    e.seq,
                    event_id if event_id is not None and e.seq == 1 else e.event_id,
                    e.ts,
                    e.type,
                    e.payload,
                    e.head,
                    checkpoint,
                    None if signature is None else bytes.fromhex(signature),
                ),
            )


def test_a_session_recorded_by_schema_4_upgrades_resumes_and_verifies(workspace: Path) -> None:
    sid = _paused(workspace, 3)
    _as_schema_4(workspace)
    with closing(sqlite3.connect(StatePaths(workspace).db)) as conn:
        texts = [r[0] for r in conn.execute("SELECT event_id FROM events ORDER BY id")]
    with acode.resume_session(sid, workspace=workspace) as r:  # migrates, then loads
        assert r.steps_completed == 3
        assert [r.step(f"s{i}", lambda ctx: pytest.fail("ran again")) for i in range(3)] == [
            {"i": i} for i in range(3)
        ]
        assert r.step("s3", _result) == {"i": 3}
    with closing(sqlite3.connect(StatePaths(workspace).db)) as conn:
        stored = [r[0] for r in conn.execute("SELECT event_id FROM events ORDER BY id")]
        signatures = [
            len(r[0]) for r in conn.execute("SELECT signature FROM events WHERE signature NOTNULL")
        ]
        hashes = {len(r[0]) for r in conn.execute("SELECT hash FROM events")}
    assert stored[: len(texts)] == [uuid_bytes(t) for t in texts]
    assert all(isinstance(s, bytes) and len(s) == 16 for s in stored)
    # Chained again under the key on loading (schema 7): every link and every checkpoint's
    # signature made anew, 16 bytes each, where the old ones were 32.
    assert set(signatures) == {16}
    assert hashes == {16}
    store = open_store(StatePaths(workspace).db)
    try:
        row = store.session(sid)
        assert [e.event_id for e in store.events(row)][: len(texts)] == texts
        assert verify_history(store, row, load_signer()).steps_completed == 4
    finally:
        store.close()


@pytest.mark.parametrize("bad", ["not-a-uuid", "01a215ed-85e4-712e-af23", 42])
def test_an_event_id_acode_never_wrote_stops_the_upgrade_and_changes_nothing(
    workspace: Path, bad: object
) -> None:
    _paused(workspace, 1)
    _as_schema_4(workspace, event_id=bad)
    db = StatePaths(workspace).db
    with closing(sqlite3.connect(db)) as conn:
        before = conn.execute("SELECT * FROM events ORDER BY id").fetchall()
    with pytest.raises(StorageError, match=r"cannot upgrade .* to schema version 5") as info:
        open_store(db)
    assert "event_id" in info.value.message
    assert "left as it was, at version 4" in (info.value.hint or "")
    with closing(sqlite3.connect(db)) as conn:
        assert schema_version(conn) == 4
        assert conn.execute("SELECT * FROM events ORDER BY id").fetchall() == before


def _checkpoint_seqs(ws: Path, where: str) -> list[int]:
    with closing(sqlite3.connect(StatePaths(ws).db)) as conn:
        return [r[0] for r in conn.execute(f"SELECT seq FROM events WHERE {where} ORDER BY id")]


def test_most_checkpoints_leave_their_summary_out(workspace: Path) -> None:
    sid = _paused(workspace, 3 * SUMMARY_EVERY + 5)
    written = _checkpoint_seqs(workspace, "checkpoint NOTNULL")
    signed = _checkpoint_seqs(workspace, "signature NOTNULL")
    # The session's first checkpoint, its journal's first, then one every SUMMARY_EVERY.
    assert written[:2] == signed[:2]
    assert [b - a for a, b in itertools.pairwise(written[1:])] == [SUMMARY_EVERY] * (
        len(written) - 2
    )
    assert len(written) == 2 + (signed[-1] - signed[1]) // SUMMARY_EVERY
    store = open_store(StatePaths(workspace).db)
    try:
        row = store.session(sid)
        newest = store.checkpoints(row)[0]
        assert newest.seq not in written  # derived, and its signature verifies it
        journal = Journal.load(store, row, SystemClock(), load_signer())
        assert journal.checkpoint_id == newest.seq
        assert journal.summary == verify_history(store, row, load_signer())
    finally:
        store.close()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(runs=st.lists(st.integers(0, 2 * SUMMARY_EVERY + 3), min_size=1, max_size=4))
def test_every_checkpoint_verifies_however_the_runs_fall(
    tmp_path_factory: pytest.TempPathFactory, runs: list[int]
) -> None:
    """Runs of any length, each a resume of the last: every checkpoint the store gives,
    derived or written, verifies and agrees with a fold of the whole history."""
    ws = tmp_path_factory.mktemp("derived")
    s = acode.open_session("derived", workspace=ws)
    done = 0
    for n in runs:
        for i in range(done, done + n):
            s.step(f"s{i}", _result)
        done += n
        s.close()
        s = acode.resume_session(s.id, workspace=ws)
        for i in range(done):
            s.step(f"s{i}", lambda ctx: pytest.fail("ran again"))
    s.close()
    signer = load_signer()
    store = open_store(StatePaths(ws).db)
    try:
        row = store.session(s.id)
        for cp in store.checkpoints(row):
            assert signer.verify(checkpoint_message(row.id, row.title, cp), cp.signature)
        summary = verify_history(store, row, signer)
        assert summary.steps_completed == done
        assert Journal.load(store, row, SystemClock(), signer).summary == summary
    finally:
        store.close()


def test_a_derived_summary_that_does_not_fold_fails_its_signature(workspace: Path) -> None:
    """An event between the written summary and a derived one that cannot be folded
    (an impossible move) makes the derivation give nothing, never an exception."""
    sid = _paused(workspace, 3)
    with closing(sqlite3.connect(StatePaths(workspace).db, isolation_level=None)) as conn:
        conn.execute("DROP TRIGGER events_are_append_only_update")
        conn.execute(
            "UPDATE events SET type = 'session_created' WHERE seq ="
            " (SELECT max(seq) FROM events WHERE type = 'step_completed')"
        )
    store = open_store(StatePaths(workspace).db)
    try:
        newest = store.checkpoints(store.session(sid))[0]
        assert newest.summary == ""
        assert not load_signer().verify(checkpoint_message(sid, "five", newest), newest.signature)
    finally:
        store.close()
