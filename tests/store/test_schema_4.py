"""Schema 4: checkpoints in event rows, events and steps keyed by session and position.

A session recorded by an older acode (schema 3: WITHOUT ROWID tables, a two-slot
`checkpoints` table, version 1 summaries, idempotency keys in the events) upgrades and
resumes; the new checkpoint column is protected by its signature (a damaged one is
refused, never passed over for an older one), and replaying a session returns exactly
what the first run returned.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import acode
from acode.domain.events import EventType, canonical_json
from acode.domain.idempotency import generate
from acode.engine.journal import Journal, checkpoint_message, verify_history
from acode.errors import CheckpointError, ErrorCode
from acode.security.signing import load_signer
from acode.store.records import CheckpointRow
from acode.store.sqlite.migrations import available_migrations, schema_version
from acode.store.sqlite.store import SqliteStore
from acode.system.clock import SystemClock
from acode.system.workspace import StatePaths
from tests.store.older_schemas import older_database
from tests.store.recorded import paused_session

_NO_INPUT = "44136fa355b3678a1146ad16f7e8649e"  # sha256("{}")[:32], as schema 3 stored it
_STEP_EVENTS = {"step_started", "step_completed", "step_failed", "step_rolled_back"}


def _result(ctx: acode.StepContext) -> dict[str, Any]:
    return {"i": ctx.position, "key": ctx.idempotency_key}


def _paused(ws: Path, steps: int) -> str:
    return paused_session(ws, steps, _result, title="old")


def _raw(ws: Path) -> sqlite3.Connection:
    """The database as an attacker edits it: the append-only triggers dropped."""
    conn = sqlite3.connect(StatePaths(ws).db, isolation_level=None)
    conn.execute("DROP TRIGGER IF EXISTS events_are_append_only_update")
    conn.execute("DROP TRIGGER IF EXISTS events_are_append_only_delete")
    return conn


def _as_schema_3(ws: Path) -> None:
    """Rewrite the workspace's database as acode wrote it before schema 4: the same
    sessions, with the idempotency key and the input hash in every step event (so a
    new hash chain), step rows in the old table, and the last two checkpoints in the
    two-slot table with version 1 summaries, signed as that version signed them."""

    def older_step(session_id: str, payload: dict[str, Any]) -> None:
        payload["key"] = generate(session_id, payload["step"], payload["attempt"])
        payload.setdefault("input_hash", _NO_INPUT)

    signer = load_signer()
    with older_database(ws, 3, older_step) as old:
        taken: dict[int, list[CheckpointRow]] = {}
        for e in old.events:
            old.conn.execute(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
                (e.sid, e.seq, e.event_id, e.ts, e.type, e.payload, e.head),
            )
            if e.checkpointed:
                cps = taken.setdefault(e.sid, [])
                summary = canonical_json(e.summary.to_dict())
                unsigned = CheckpointRow(len(cps) + 1, e.seq, summary, e.head, "", e.ts)
                signature = signer.sign(checkpoint_message(e.session_id, e.title, unsigned))
                cps.append(unsigned._replace(signature=signature))
        for row in old.steps:
            old.conn.execute(
                "INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*row[:7], row[7] or _NO_INPUT, row[8]),
            )
        for sid, cps in taken.items():
            for cp in cps[-2:]:
                old.conn.execute(
                    "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        sid,
                        cp.id % 2,
                        cp.id,
                        cp.seq,
                        cp.summary,
                        cp.head,
                        cp.signature,
                        cp.created_at,
                    ),
                )


def test_a_session_recorded_by_schema_3_upgrades_resumes_and_verifies(workspace: Path) -> None:
    sid = _paused(workspace, 4)
    _as_schema_3(workspace)
    with acode.resume_session(sid, workspace=workspace) as r:  # migrates, then loads
        assert r.steps_completed == 4
        replayed = [r.step(f"s{i}", lambda ctx: pytest.fail("ran again")) for i in range(4)]
        assert replayed == [{"i": i, "key": f"acode:v1:{sid}:s{i}:1"} for i in range(4)]
        assert r.step("s4", _result) == {"i": 4, "key": f"acode:v1:{sid}:s4:1"}
    store = SqliteStore.open(StatePaths(workspace).db)
    assert schema_version(store.conn) == available_migrations()[-1].number
    row = store.session(sid)
    assert row.state == "COMPLETED"
    summary = verify_history(store, row, load_signer())
    assert summary.steps_completed == 5
    # The old checkpoints stay readable, after the new ones (the newest first): the two
    # newest, the one that wrote the summary they derive theirs from, then the old ones.
    checkpoints = store.checkpoints(row)
    assert [cp.summary[0] for cp in checkpoints] == ["[", "[", "[", "{", "{"]
    assert checkpoints[0].seq > checkpoints[1].seq > checkpoints[2].seq
    # A step of the old format and one of the new sit in one history.
    old, new = (e.payload for e in store.events_of_type(row, EventType.STEP_COMPLETED)[3:5])
    assert (old["key"], old["input_hash"]) == (f"acode:v1:{sid}:s3:1", _NO_INPUT)
    assert "key" not in new
    assert "input_hash" not in new
    store.close()


def test_an_upgraded_session_with_a_damaged_old_checkpoint_is_refused(workspace: Path) -> None:
    sid = _paused(workspace, 3)
    _as_schema_3(workspace)
    SqliteStore.open(StatePaths(workspace).db).close()  # the upgrade alone
    with _raw(workspace) as conn:
        conn.execute(
            "UPDATE checkpoints SET signature = 'damaged'"
            " WHERE id = (SELECT max(id) FROM checkpoints)"
        )
    # Chained again under the key only once every checkpoint verifies: not this one.
    with pytest.raises(CheckpointError, match="cannot be verified with this key") as info:
        acode.resume_session(sid, workspace=workspace)
    assert info.value.code is ErrorCode.CHECKPOINT_INVALID


def _load(ws: Path, sid: str) -> Journal:
    store = SqliteStore.open(StatePaths(ws).db)
    try:
        return Journal.load(store, store.session(sid), SystemClock(), load_signer())
    finally:
        store.close()


def _newest_checkpoint_seq(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT max(seq) FROM events WHERE signature NOTNULL").fetchone()[0])


@pytest.mark.parametrize(
    "edit",
    [
        # A summary written into the newest checkpoint, which left its own out, saying
        # more steps were done than were.
        'UPDATE events SET checkpoint = \'[2,"PAUSED",9,9,"s2"]\' WHERE seq = ?',
        "UPDATE events SET signature = substr(signature, 1, 15) || x'00' WHERE seq = ?",
        "UPDATE events SET signature = 'damaged' WHERE seq = ?",
        # The summary the newest checkpoints derive theirs from, damaged.
        "UPDATE events SET checkpoint = x'ff' || checkpoint WHERE seq ="
        " (SELECT max(seq) FROM events WHERE checkpoint NOTNULL AND seq <= ?)",
        # Another event's signed checkpoint, moved onto this one.
        "UPDATE events SET (checkpoint, signature) = (SELECT checkpoint, signature FROM events"
        " WHERE signature NOTNULL AND seq < ?1 ORDER BY seq DESC LIMIT 1) WHERE seq = ?1",
    ],
)
def test_an_edited_checkpoint_column_is_refused_not_passed_over(workspace: Path, edit: str) -> None:
    sid = _paused(workspace, 3)
    with _raw(workspace) as conn:
        newest = _newest_checkpoint_seq(conn)
        assert conn.execute(edit, (newest,)).rowcount == 1
    with pytest.raises(CheckpointError, match="newest checkpoint") as info:
        _load(workspace, sid)
    assert info.value.code is ErrorCode.CHECKPOINT_INVALID


def test_a_checkpoint_taken_out_leaves_the_previous_one_and_the_events_it_vouches_for(
    workspace: Path,
) -> None:
    """Without its signature an event is no checkpoint: the newest one before it is
    loaded, and the events after that, each checked on its chain, are the same."""
    sid = _paused(workspace, 3)
    with _raw(workspace) as conn:
        newest = _newest_checkpoint_seq(conn)
        conn.execute("UPDATE events SET signature = NULL WHERE seq = ?", (newest,))
    journal = _load(workspace, sid)
    assert journal.checkpoint_id < newest
    assert journal.summary is not None
    assert journal.summary.steps_completed == 3
    with acode.resume_session(sid, workspace=workspace) as r:
        for i in range(3):
            r.step(f"s{i}", lambda ctx: pytest.fail("ran again"))


def test_with_both_checkpoints_edited_the_session_is_refused(workspace: Path) -> None:
    sid = _paused(workspace, 3)
    with _raw(workspace) as conn:
        conn.execute(
            "UPDATE events SET checkpoint = replace(checkpoint, '[2,', '[2,\"x\",')"
            " WHERE checkpoint NOTNULL"
        )
    with pytest.raises(CheckpointError, match="not signed by the key") as info:
        acode.resume_session(sid, workspace=workspace)
    assert info.value.code is ErrorCode.CHECKPOINT_INVALID


def test_an_edited_title_invalidates_the_checkpoints_that_leave_it_out(workspace: Path) -> None:
    sid = _paused(workspace, 2)
    with _raw(workspace) as conn:
        conn.execute("UPDATE sessions SET title = 'renamed'")
    with pytest.raises(CheckpointError, match="not signed by the key"):
        acode.resume_session(sid, workspace=workspace)


def _counts(ws: Path) -> tuple[int, int, int]:
    with closing(sqlite3.connect(StatePaths(ws).db)) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM steps),"
            " (SELECT count(*) FROM checkpoints)"
        ).fetchone()
    return row[0], row[1], row[2]


def test_a_step_that_completes_in_one_commit_writes_one_row(workspace: Path) -> None:
    """Its completion event, which holds the checkpoint, is the step's whole record."""
    (workspace / "b.txt").write_text("b")
    s = acode.open_session("rows", workspace=workspace)
    s.step("a", _result)
    events, steps, _ = _counts(workspace)
    s.step("b", _result)
    s.read("c", "b.txt")
    assert _counts(workspace) == (events + 2, steps, 0)  # the old table is never written
    with closing(sqlite3.connect(StatePaths(workspace).db)) as conn:
        last = conn.execute(
            "SELECT type, checkpoint NOTNULL, length(signature) FROM events ORDER BY id DESC"
        ).fetchone()
    assert last == ("step_completed", 0, 16)  # a checkpoint whose summary is derived
    s.write("d", "d.txt", "d")  # a start record: a row, brought up to date on completion
    s.close()
    assert _counts(workspace)[1:] == (steps + 1, 0)
    store = SqliteStore.open(StatePaths(workspace).db)
    row = store.session(s.id)
    assert [(r.step_id, r.status.value) for r in store.step_rows(row.sid)] == [("d", "completed")]
    assert [r.step_id for r in store.steps(row.sid)] == ["a", "b", "c", "d"]
    assert verify_history(store, row, load_signer()).steps_completed == 4
    store.close()


def test_a_step_row_that_disagrees_with_the_events_is_refused_on_replay(workspace: Path) -> None:
    s = acode.open_session("rows", workspace=workspace)
    s.write("w", "w.txt", "w")
    s.pause("test")
    s.close()
    with _raw(workspace) as conn:
        assert conn.execute("UPDATE steps SET attempt = 2").rowcount == 1
    with pytest.raises(CheckpointError, match="steps table") as info:
        with acode.resume_session(s.id, workspace=workspace) as r:
            r.write("w", "w.txt", "w")
    assert info.value.code is ErrorCode.CHAIN_BROKEN


# -- replay equivalence ------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    results=st.lists(st.tuples(_json, st.none() | _json), min_size=1, max_size=12),
    data=st.data(),
)
def test_replay_returns_what_the_first_run_returned(
    tmp_path_factory: pytest.TempPathFactory, results: list[tuple[Any, Any]], data: st.DataObject
) -> None:
    """Whatever the results and inputs, and wherever the first run stopped, a resumed
    run returns every completed step's first result without running it, runs the
    others once, and ends in the state of a run never interrupted."""
    ws = tmp_path_factory.mktemp("replay")
    stop = data.draw(st.integers(0, len(results)), label="steps before the stop")
    calls: list[int] = []

    def run(s: acode.Session, upto: int) -> list[Any]:
        out = []
        for i, (value, arg) in enumerate(results[:upto]):

            def fn(ctx: acode.StepContext, i: int = i, value: Any = value) -> Any:
                calls.append(i)
                return value

            out.append(s.step(f"s{i}", fn, input=arg))
        return out

    s = acode.open_session("replay", workspace=ws)
    first = run(s, stop)
    s.close()  # as a crash leaves it: EXECUTING, resumable
    with acode.resume_session(s.id, workspace=ws) as r:
        again = run(r, len(results))
    assert again[:stop] == first
    assert again == [canonical_value(v) for v, _ in results]
    assert calls == list(range(len(results)))  # each step ran once, in order
    store = SqliteStore.open(StatePaths(ws).db)
    try:
        summary = verify_history(store, store.session(s.id), load_signer())
    finally:
        store.close()
    assert (summary.state.value, summary.steps_completed) == ("COMPLETED", len(results))


def canonical_value(value: Any) -> Any:
    """What a step's caller gets back: the JSON form of what the step returned."""
    import json

    return json.loads(canonical_json(value))
