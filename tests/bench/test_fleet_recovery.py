"""The fleet-recovery benchmark (bench.fleet_recovery) run as `python -m bench` runs it,
one round: real workers, a real SIGKILL, the suite's real PostgreSQL, a bare repository
on disk. Nothing here judges a time: the benchmark does, on its own machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fleet_recovery import HEADING, INTERVALS, Recovery, measure_recovery, render_recovery
from tests.support.postgres import PgServer

pytestmark = pytest.mark.timeout(180)


def test_one_round_measures_the_claim_the_resume_and_the_first_new_step(
    tmp_path: Path, pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "test-secret")
    monkeypatch.setenv("ACODE_BENCH_PG_DSN", pg_server.admin_dsn)
    said: list[str] = []

    result = measure_recovery(tmp_path, 1, said.append, lease=2)

    assert result.skipped is None, result.skipped
    claimed, resumed, first = (result.seconds[key][0] for key in INTERVALS)
    # The claim comes after the lapse (the database's clock both times); the events after it.
    assert 0 <= claimed <= resumed <= first
    # One line a round; a second for the round of a lost machine, where pid namespaces
    # can be made.
    assert said[0].startswith("fleet-recovery round 1/1")
    if result.lost_skipped is None:
        assert [len(v) for v in result.lost.values()] == [1, 1]
        assert said[1].startswith("fleet-recovery machine lost, round 1/1")
    assert len(said) == (1 if result.lost_skipped else 2)
    section = render_recovery(result)
    assert section.startswith(HEADING)
    assert "| its first new step starts (`step_started`) |" in section


def test_a_section_not_measured_says_why() -> None:
    shown = render_recovery(Recovery(3, skipped="OperationalError: no server"))

    assert shown == f"{HEADING}\n\nNot measured: OperationalError: no server.\n"
