"""A fleet worker's throughput (bench.fleet_bench), run as the benchmark runs it: a real
`acode worker` against the suite's real PostgreSQL and the stand-in model server, with
one-step sessions; and its section, measured or not."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fleet_bench import FleetResults, Shape, measure_fleet, render_fleet
from tests.support.postgres import PgServer

pytestmark = pytest.mark.timeout(180)


def test_one_worker_runs_every_session_at_each_concurrency(
    tmp_path: Path, pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACODE_BENCH_PG_DSN", pg_server.admin_dsn)
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "test-secret")

    results = measure_fleet(tmp_path, lambda _: None, [Shape(1, {1: 1, 4: 2})])

    assert results.skipped is None
    runs = results.runs[1]
    assert [(c, r.sessions) for c, r in runs.items()] == [(1, 1), (4, 2)]
    assert all(r.seconds > 0.2 and r.cpu_s > 0 for r in runs.values())  # a model call each
    text = render_fleet(results)
    assert "| 4 | 2 |" in text
    assert "target (issue 22) 20x" in text


def test_without_a_server_the_section_says_why() -> None:
    text = render_fleet(FleetResults(skipped="OSError: no PostgreSQL"))
    assert text.startswith("## A fleet worker's throughput\n")
    assert "Not measured: OSError: no PostgreSQL." in text
