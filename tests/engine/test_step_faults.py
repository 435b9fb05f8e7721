"""Every failure recorded: a fault at every point of every step kind's life, the caller
going on past it, then a resume that replays the whole program.

The program and its faults are in tests/support/step_faults.py. For each fault the
program runs once with the fault in place, catching every error as the agent loop does,
and the session is left unfinished, as a process that died after its last step would
leave it. A new session object then resumes it (with ``verify``: the whole history is
checked first) and runs the same program: every call must return or raise exactly what
it did the first time, and the session must end COMPLETED with a history that verifies.
tests/crash/test_step_faults.py kills real processes at random instants of the same
program instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from acode.domain.reducer import StepStatus
from acode.store.base import open_store
from acode.system.workspace import StatePaths
from tests.support.fake_openai import FakeOpenAI
from tests.support.step_faults import (
    FAULTS,
    Fault,
    Injector,
    Outcome,
    make_workspace,
    open_program,
    run_program,
    verified_state,
    write_config,
)

# A model server that refuses once: the environment's fault of the model steps.
MODEL_DOWN = {"status": 500, "body": "the model server is overloaded"}


@pytest.fixture(scope="module")
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def _program(ws: Path, fault: Fault, resume: str | None = None) -> tuple[str, list[Outcome], int]:
    """Run the program: the first time with the environment's faults too, left
    unfinished; resumed, to its end."""
    injector = Injector(fault, first_process=resume is None)
    try:
        session = open_program(ws, injector, resume)
        try:
            outcomes = run_program(session, injector, ws)
            if resume is not None:
                session.complete()
        finally:
            session.close()
        return session.id, outcomes, injector.fired
    finally:
        injector.close()


def _statuses(ws: Path, session_id: str) -> dict[str, str]:
    store = open_store(StatePaths(ws).db)
    try:
        row = store.session(session_id)
        return {r.step_id: r.status.value for r in store.steps(row.sid)}
    finally:
        store.close()


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_a_step_failing_anywhere_is_recorded_and_replays(
    fault: Fault, tmp_path: Path, model: FakeOpenAI
) -> None:
    ws = make_workspace(tmp_path / "ws")
    write_config(ws, model.base_url, durability="normal")  # no process dies here
    if fault.once and fault.step in ("m1", "c1"):
        # The server fails the step's request: m1's is the first, c1's the second.
        model.script([MODEL_DOWN] if fault.step == "m1" else ["echo: Say hello.", MODEL_DOWN])
    session_id, first, fired = _program(ws, fault)
    if not fired:
        pytest.fail(f"the fault {fault.name} was never reached: the program does not test it")
    assert [o[0] for o in first if o[1] == "error"] == [fault.step], first

    _, replayed, _ = _program(ws, fault, session_id)
    assert replayed == first, json.dumps([first, replayed], indent=1)
    assert verified_state(ws, session_id) == "COMPLETED"
    statuses = _statuses(ws, session_id)
    # A value read back from a recorded outcome fails after the step completed.
    expected = StepStatus.COMPLETED if fault.point == "value" else StepStatus.FAILED
    assert statuses[fault.step] == expected.value, statuses
    assert set(statuses.values()) <= {"completed", "failed"}, statuses
