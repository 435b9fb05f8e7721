"""`Session.step` takes a shorter way for a new retryable python step with no input and
no observer (``StepExecutor._new_step``, ``Journal.write_completion``), and for such a
step called again at a recorded position (the replay lane of ``StepExecutor.python``).
Whichever way a step takes, the database must end up the same, byte for byte, and every
call return or raise the same: these tests run the same calls both ways, on the same
clock and the same random bytes, and compare every row and outcome. An observer sends
every step the general way (``StepExecutor.perform``)."""

from __future__ import annotations

import math
import random
import shutil
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import acode
from acode.engine.journal import SUMMARY_EVERY, verify_history
from acode.engine.lifecycle import start_session
from acode.engine.observer import StepNotice
from acode.engine.replay import REPLAY_WINDOW
from acode.engine.step_executor import StepExecutor
from acode.errors import (
    AcodeError,
    CheckpointError,
    NonDeterminismError,
    PauseRequested,
    StepFailedError,
    UsageError,
)
from acode.security.signing import load_signer
from acode.store.base import open_store
from acode.system.workspace import StatePaths


@dataclass
class _Ticks:
    """A clock that moves 7 µs at every reading, its random bytes from a seed: two runs
    on two of them read the same times and bytes if they make the same calls."""

    seed: int
    now: int = 1_795_000_000_000_000
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def now_us(self) -> int:
        self.now += 7
        return self.now

    def random_bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)


class _Told:
    """An observer: its presence sends every step through ``StepExecutor.perform``."""

    def __init__(self) -> None:
        self.notices: list[StepNotice] = []

    def on_step(self, notice: StepNotice) -> None:
        self.notices.append(notice)


def _rows(ws: Path) -> dict[str, list[tuple[Any, ...]]]:
    tables = ("sessions", "events", "steps", "step_ids", "messages", "files")
    with closing(sqlite3.connect(StatePaths(ws).db)) as conn:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in tables}


# What a step's function does: return one of these values, or raise.
_VALUES: dict[str, Callable[[acode.StepContext], Any]] = {
    "dict": lambda ctx: {"position": ctx.position, "checks": ["lint", "types"], "ok": True},
    "tuple": lambda ctx: {"pair": (ctx.position, "x"), "1": [()]},
    "text": lambda ctx: "é\u2028\x00" * (ctx.position % 3),
    "float": lambda ctx: [0.1, -0.0, 1e300, ctx.attempt],
    "none": lambda ctx: None,
    "key": lambda ctx: ctx.idempotency_key,
}


def _raises(exc: BaseException) -> Callable[[acode.StepContext], Any]:
    def fn(ctx: acode.StepContext) -> Any:
        raise exc

    return fn


_FAILURES: dict[str, Callable[[acode.StepContext], Any]] = {
    "error": _raises(KeyError("missing")),
    "failed": _raises(StepFailedError("it failed", hint="a hint")),
    "usage": _raises(UsageError("refused")),
    "nan": lambda ctx: {"x": math.nan},
    "set": lambda ctx: {1, 2},
    "keys": lambda ctx: {1: "an int key", "a": "beside a text key"},
}

# A call: (its id: a new one or an earlier one, what its function does, its task).
_CALLS = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(0, 500)),
        st.sampled_from(sorted(_VALUES) * 4 + sorted(_FAILURES)),
        st.sampled_from([None, None, None, "t1", "task two"]),
    ),
    max_size=3 * SUMMARY_EVERY,
)


def _run(
    ws: Path,
    seed: int,
    runs: list[list[tuple[int | None, str, str | None]]],
    *,
    told: bool,
) -> tuple[list[object], dict[str, list[tuple[Any, ...]]]]:
    """Each of ``runs`` in a process of its own, as it were: the first opens the session,
    the others resume it and call the recorded steps again first. What every call
    returned or raised, and the database's rows."""
    clock = _Ticks(seed)
    outcomes: list[object] = []
    used: list[tuple[str, str]] = []  # the recorded calls, in order, for a replay
    session_id = None
    for calls in runs:
        observer = _Told() if told else None
        if session_id is None:
            s = start_session("lane", workspace=ws, observer=observer, clock=clock)
            session_id = s.id
        else:
            s = acode.resume_session(session_id, workspace=ws, observer=observer, clock=clock)
            for step_id, what in used:
                outcomes.append(_call(s, step_id, what, None))
        try:
            for n, (pick, what, task) in enumerate(calls):
                step_id = (
                    f"s{len(used)}.{n}" if pick is None or not used else used[pick % len(used)][0]
                )
                outcome = _call(s, step_id, what, task)
                outcomes.append(outcome)
                if not isinstance(outcome, NonDeterminismError):
                    used.append((step_id, what))
        finally:
            s.close()
    return [_comparable(o) for o in outcomes], _rows(ws)


def _call(s: acode.Session, step_id: str, what: str, task: str | None) -> object:
    fn = _VALUES.get(what) or _FAILURES[what]
    try:
        return s.step(step_id, fn, task=task)
    except (AcodeError, KeyError) as exc:
        return exc


def _comparable(outcome: object) -> object:
    if isinstance(outcome, BaseException):
        cause = outcome.__cause__
        return (type(outcome), str(outcome), type(cause), str(cause))
    return outcome


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(0, 2**32), runs=st.lists(_CALLS, min_size=1, max_size=3))
def test_both_ways_record_the_same_rows(
    tmp_path: Path, seed: int, runs: list[list[tuple[int | None, str, str | None]]]
) -> None:
    ws = tmp_path / "ws"
    results = []
    for told in (False, True):
        shutil.rmtree(ws, ignore_errors=True)
        ws.mkdir()
        results.append(_run(ws, seed, runs, told=told))
        with closing(open_store(StatePaths(ws).db, "normal")) as store:
            (row,) = store.sessions()
            verify_history(store, row, load_signer())
    (lane_outcomes, lane_rows), (general_outcomes, general_rows) = results
    assert lane_outcomes == general_outcomes
    assert lane_rows == general_rows


def test_a_long_session_takes_the_lane_and_verifies(workspace: Path) -> None:
    """Past several summaries and ledger writes, and resumed past its history."""
    total = 3 * SUMMARY_EVERY + 7
    s = acode.open_session("long", workspace=workspace)
    for i in range(total):
        assert s.step(f"s{i}", lambda ctx: {"i": ctx.position}) == {"i": i}
    s.pause("test")
    s.close()
    with acode.resume_session(s.id, workspace=workspace) as r:
        assert r.skip_completed() == total
        assert r.step("after", lambda ctx: [ctx.position]) == [total]
        with pytest.raises(NonDeterminismError, match="'s3' is used twice"):
            r.step("s3", lambda ctx: None)
    with closing(open_store(StatePaths(workspace).db, "normal")) as store:
        summary = verify_history(store, store.session(s.id), load_signer())
    assert summary.steps_completed == total + 1


def test_a_pause_inside_the_function_leaves_the_step_unrecorded(workspace: Path) -> None:
    s = acode.open_session("paused", workspace=workspace)
    s.step("first", lambda ctx: None)
    with pytest.raises(PauseRequested):
        s.step("second", _raises(PauseRequested()))
    s.close()
    calls: list[int] = []
    with acode.resume_session(s.id, workspace=workspace) as r:
        r.step("first", lambda ctx: pytest.fail("ran again"))
        r.step("second", lambda ctx: calls.append(ctx.position))
    assert calls == [1]


def test_only_the_steps_the_lane_cannot_take_go_the_general_way(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    general: list[str] = []
    perform = StepExecutor.perform

    def spied(self: StepExecutor, action: Any, step_id: str, *rest: Any) -> Any:
        general.append(step_id)
        return perform(self, action, step_id, *rest)

    monkeypatch.setattr(StepExecutor, "perform", spied)
    s = acode.open_session("spied", workspace=workspace)
    s.step("new", lambda ctx: 1)
    s.step("input", lambda ctx: 2, input={"x": 1})
    s.step("once", acode.python_step(retryable=False)(lambda ctx: 3))
    s.observer = _Told()
    s.step("observed", lambda ctx: 4)
    s.pause("test")
    s.close()
    with acode.resume_session(s.id, workspace=workspace) as r:
        for step_id, value in [("new", 1), ("input", 2), ("once", 3), ("observed", 4)]:
            given = {"x": 1} if step_id == "input" else None
            assert r.step(step_id, lambda ctx: pytest.fail("ran again"), input=given) == value
        assert r.step("after", lambda ctx: 5) == 5
    # Replayed, a completed step without input or observer returns its result the short
    # way too (the replay lane of StepExecutor.python); one with an input or a `steps` row does not.
    assert general == ["input", "once", "observed", "input", "once"]


# Where the step with a row falls: in the first window; with its start record the last
# event of the first window and its completion the first of the next; in a later window.
@pytest.mark.parametrize("before", [0, REPLAY_WINDOW - 3, REPLAY_WINDOW + 3])
def test_a_replayed_step_with_a_row_is_held_to_it(workspace: Path, before: int) -> None:
    """A completed step with a `steps` row goes the general way on replay, which holds
    the row to the step's events, wherever they fall among the replay's windows: the
    row as recorded replays, an edited one is refused."""
    config = workspace / ".agent" / "config.yml"
    config.parent.mkdir(parents=True)
    config.write_text("durability: normal\n", encoding="utf-8")  # quick to record
    s = acode.open_session("rows", workspace=workspace)
    for i in range(before):  # events 3 to before + 2, after the session's first two
        s.step(f"b{i}", lambda ctx: ctx.position)
    s.step("once", acode.python_step(retryable=False)(lambda ctx: "done"))
    for i in range(3):
        s.step(f"s{i}", lambda ctx: ctx.position)
    s.pause("test")
    s.close()

    def replay() -> None:
        with acode.resume_session(s.id, workspace=workspace) as r:
            for i in range(before):
                assert r.step(f"b{i}", lambda ctx: pytest.fail("ran again")) == i
            assert r.step("once", lambda ctx: pytest.fail("ran again")) == "done"
            for i in range(3):
                assert r.step(f"s{i}", lambda ctx: pytest.fail("ran again")) == before + 1 + i
            r.pause("test")

    replay()
    with closing(sqlite3.connect(StatePaths(workspace).db)) as conn, conn:
        assert conn.execute("UPDATE steps SET attempt = 7 WHERE step_id = 'once'").rowcount
    with pytest.raises(CheckpointError, match="'once' is completed in the steps table"):
        replay()
