"""Schema 6: the step id ledger, which lets a session go on after its recorded steps
(`Session.skip_completed`) without reading its history, and still refuse a step id that
any recorded step used.

The ledger is written in batches with the summaries (every SUMMARY_EVERY events); the ids
of the newest events are read from them. A database of schema 5 upgrades with every id
in its ledger; the ledger and the events agree after any runs, resumes and skips; a
ledger edited by hand is caught by `verify_history`; and skipping costs the same number
of SQLite instructions after a short history as after a long one.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import acode
from acode.domain.reducer import STEP_EVENT_TYPES
from acode.engine.journal import SUMMARY_EVERY, verify_history
from acode.errors import CheckpointError, NonDeterminismError
from acode.security.signing import load_signer
from acode.store.base import Durability
from acode.store.sqlite import store as sqlite_store
from acode.store.sqlite.connection import connect
from acode.store.sqlite.migrations import available_migrations, schema_version
from acode.store.sqlite.store import SqliteStore
from acode.system.workspace import StatePaths
from tests.store.older_schemas import older_database
from tests.store.recorded import paused_session

_STEP_TYPES = ", ".join(repr(str(t)) for t in sorted(STEP_EVENT_TYPES))


def _result(ctx: acode.StepContext) -> dict[str, Any]:
    return {"i": ctx.position}


def _recorded(ws: Path, steps: int) -> str:
    return paused_session(ws, steps, _result, title="six")


@contextmanager
def _store(ws: Path) -> Iterator[SqliteStore]:
    store = SqliteStore.open(StatePaths(ws).db)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def _skipped(ws: Path, sid: str) -> Iterator[acode.Session]:
    """The session resumed after its recorded steps, closed unfinished at the end."""
    r = acode.resume_session(sid, workspace=ws)
    try:
        r.skip_completed()
        yield r
    finally:
        r.close()


def _named_ids(conn: sqlite3.Connection) -> set[str]:
    query = f"SELECT json_extract(payload, '$.step') FROM events WHERE type IN ({_STEP_TYPES})"
    return {r[0] for r in conn.execute(query)}


def _ledger(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT step_id FROM step_ids")}


def _as_schema_5(ws: Path) -> None:
    """Rewrite the database as schema 5 wrote it: no step id ledger, a plain hash chain,
    every checkpoint with its summary and a 16-byte tag."""
    signer = load_signer()
    with older_database(ws, 5, lambda session_id, payload: None) as old:
        old.write_events(signer)


def test_a_database_of_schema_5_upgrades_with_every_step_id_in_its_ledger(
    workspace: Path,
) -> None:
    sid = _recorded(workspace, SUMMARY_EVERY + 7)
    _as_schema_5(workspace)
    with _store(workspace) as store:
        assert schema_version(store.conn) == available_migrations()[-1].number
        assert (
            _ledger(store.conn)
            == _named_ids(store.conn)
            == {f"s{i}" for i in range(SUMMARY_EVERY + 7)}
        )
        assert verify_history(store, store.session(sid), load_signer()).steps_completed == 39
    with _skipped(workspace, sid) as r:
        assert r.steps_completed == SUMMARY_EVERY + 7
        with pytest.raises(NonDeterminismError, match="'s0' is used twice"):
            r.step("s0", _result)


def test_a_skipped_session_refuses_every_recorded_id_old_or_new(workspace: Path) -> None:
    total = 3 * SUMMARY_EVERY + 5
    sid = _recorded(workspace, total)
    with closing(sqlite3.connect(StatePaths(workspace).db)) as conn:
        ledger = _ledger(conn)
    # Both kinds are there: ids the ledger holds, and newer ones it does not hold yet.
    newest = f"s{total - 1}"
    assert "s0" in ledger
    assert newest not in ledger
    for reused in ("s0", f"s{SUMMARY_EVERY}", newest):
        with _skipped(workspace, sid) as r:
            with pytest.raises(NonDeterminismError, match=f"'{reused}' is used twice"):
                r.step(reused, lambda ctx: pytest.fail("ran again"))
    with _skipped(workspace, sid) as r:
        assert r.step("fresh", _result) == {"i": total}
        with pytest.raises(NonDeterminismError, match="'fresh' is used twice"):
            r.step("fresh", _result)


# One run of a session: steps, each with a fresh id or the id of an earlier step; the
# run resumes either by calling its recorded steps again or by skipping them.
_RUNS = st.lists(
    st.tuples(st.booleans(), st.lists(st.integers(0, 200), max_size=45)),
    min_size=1,
    max_size=4,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=_RUNS)
def test_the_ledger_and_the_events_agree_after_any_runs(
    tmp_path_factory: pytest.TempPathFactory, runs: list[tuple[bool, list[int]]]
) -> None:
    ws = tmp_path_factory.mktemp("ws")
    used: list[str] = []
    session_id = None
    for skip, picks in runs:
        if session_id is None:
            s = acode.open_session("six", workspace=ws)
            session_id = s.id
        else:
            s = acode.resume_session(session_id, workspace=ws)
            if skip:
                assert s.skip_completed() == len(used)
            else:
                for step_id in used:
                    s.step(step_id, lambda ctx: pytest.fail("ran again"))
        try:
            for pick in picks:
                step_id = used[pick % len(used)] if used and pick % 3 == 0 else f"n{len(used)}"
                if step_id in used:
                    with pytest.raises(NonDeterminismError, match="used twice"):
                        s.step(step_id, _result)
                else:
                    s.step(step_id, _result)
                    used.append(step_id)
        finally:
            s.close()
        with _store(ws) as store:
            row = store.session(session_id)
            ledger = _ledger(store.conn)
            newest = set(store.unledgered_step_ids(row))
            assert ledger <= set(used)
            assert ledger | newest == set(used)
            assert len(newest) <= SUMMARY_EVERY
            verify_history(store, row, load_signer())


def _tampered(ws: Path, *statements: str) -> str:
    sid = _recorded(ws, SUMMARY_EVERY + 3)
    with closing(sqlite3.connect(StatePaths(ws).db)) as conn:
        conn.execute("DROP TRIGGER step_ids_are_append_only_delete")
        for statement in statements:
            conn.execute(statement)
        conn.commit()
    return sid


@pytest.mark.parametrize(
    ("statement", "found"),
    [
        ("DELETE FROM step_ids WHERE step_id = 's4'", r"step id 's4' \(position 4\) is missing"),
        ("INSERT INTO step_ids VALUES (1, 'ghost')", "ledger holds 'ghost', which no event"),
    ],
)
def test_verify_catches_a_ledger_edited_by_hand(
    workspace: Path, statement: str, found: str
) -> None:
    sid = _tampered(workspace, statement)
    with _store(workspace) as store, pytest.raises(CheckpointError, match=found):
        verify_history(store, store.session(sid), load_signer())


@pytest.mark.parametrize(
    "statement",
    ["DELETE FROM step_ids", "UPDATE step_ids SET step_id = 'other' WHERE step_id = 's0'"],
)
def test_the_ledger_is_append_only(workspace: Path, statement: str) -> None:
    _recorded(workspace, 2)
    with (
        closing(sqlite3.connect(StatePaths(workspace).db)) as conn,
        pytest.raises(sqlite3.IntegrityError, match="step ids are append-only"),
    ):
        conn.execute(statement)


def _instructions_to_first_new_step(ws: Path, sid: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """SQLite virtual-machine instructions from resuming the session (opening its
    database included) to the start of its first new step, what the benchmark's recovery
    times: a measure of what is read from the history that, unlike a time, is the same
    on any machine."""
    counted = [0]
    seen: list[int] = []

    def count() -> int:
        counted[0] += 1
        return 0

    def counting(path: Path, durability: Durability = "full") -> sqlite3.Connection:
        conn = connect(path, durability)
        conn.set_progress_handler(count, 1)
        return conn

    def first(ctx: acode.StepContext) -> int:
        seen.append(counted[0])
        return 1

    with monkeypatch.context() as patched:
        patched.setattr(sqlite_store, "connect", counting)
        r = acode.resume_session(sid, workspace=ws)
        start = r.skip_completed()
        r.step("new", first)
        r.close()
    assert start > 0
    return seen[0]


def test_recovery_costs_the_same_after_a_short_and_a_long_history(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    costs = []
    for steps in (50, 2_000):
        ws = tmp_path_factory.mktemp(f"ws{steps}")
        costs.append(_instructions_to_first_new_step(ws, _recorded(ws, steps), monkeypatch))
    short, long = costs
    assert long <= short * 1.2, costs


_WRITTEN_BY_SCHEMA_5 = Path(__file__).parent / "fixtures" / "schema5-7b448e7.db"


def test_a_database_an_earlier_acode_wrote_upgrades_verifies_and_resumes(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes written by acode at commit 7b448e7 (schema 5): a paused session of 40 steps,
    signed with the key below. Whatever computes hashes, summaries or signatures faster
    must still accept them."""
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "fixture-secret-not-a-secret")
    db = StatePaths(workspace).db
    db.parent.mkdir(parents=True)
    shutil.copyfile(_WRITTEN_BY_SCHEMA_5, db)
    with _store(workspace) as store:
        (row,) = store.sessions()
        assert verify_history(store, row, load_signer()).steps_completed == 40
        assert _ledger(store.conn) == {f"s{i}" for i in range(40)}  # the upgrade's
    r = acode.resume_session(row.id, workspace=workspace)
    try:
        replayed = [r.step(f"s{i}", lambda ctx: pytest.fail("ran again")) for i in range(40)]
        assert replayed == [{"i": i, "note": "ü"} for i in range(40)]
        assert r.step("s40", _result) == {"i": 40}
    finally:
        r.close()
    with _skipped(workspace, row.id) as again:
        with pytest.raises(NonDeterminismError, match="'s3' is used twice"):
            again.step("s3", _result)
