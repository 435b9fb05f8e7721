"""The step on PostgreSQL beside DBOS (bench.pg_side_by_side), run as the benchmark runs
it: real driver processes against the suite's real PostgreSQL, with tiny sizes. DBOS
lives in the bench extras: without it, its side is not run and the section says why."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from bench.peers.launch import Driver
from bench.pg_side_by_side import (
    ACODE,
    DBOS,
    PgSteps,
    PgStepSettings,
    _url,
    measure_pg_steps,
    render_pg_steps,
)
from tests.support.postgres import PgServer, scratch_database

pytestmark = pytest.mark.timeout(120)

_TINY = PgStepSettings(rounds=1, steps=40, warm_up=20, chunk=20)


def test_acode_steps_on_the_postgresql_store_in_turns_with_their_cpu(
    tmp_path: Path, pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "test-secret")
    with scratch_database(pg_server) as name:
        dsn = pg_server.direct_dsn(name)
        driver = Driver(ACODE, 40, tmp_path / "acode", 20, ["--url", _url(dsn)])
        try:
            seconds = [driver.turn(), driver.turn()]
            driver.finish()
        except BaseException:
            driver.kill()
            raise
        import psycopg

        with psycopg.connect(dsn) as conn:
            query = "SELECT count(*) FROM acode_store.events WHERE type = 'step_completed'"
            row = conn.execute(query).fetchone()
    assert row == (40,)  # in the server, not in a SQLite file of the workspace
    assert not (tmp_path / "acode" / ".agent" / "state" / "acode.db").exists()
    assert all(s > 0 for s in seconds)
    assert len(driver.cpu_seconds) == 2
    assert all(cpu > 0 for cpu in driver.cpu_seconds)


def test_the_url_given_to_both_engines_reaches_the_same_database(pg_server: PgServer) -> None:
    import psycopg

    with scratch_database(pg_server) as name:
        url = _url(pg_server.direct_dsn(name))
        assert url.startswith("postgresql://")
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT current_database()").fetchone()
    assert row == (name,)


@pytest.mark.skipif(importlib.util.find_spec("dbos") is None, reason="DBOS is in the bench extras")
def test_both_engines_run_side_by_side_and_the_section_reports_them(
    tmp_path: Path, pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "test-secret")
    monkeypatch.setenv("ACODE_BENCH_PG_DSN", pg_server.admin_dsn)
    lines: list[str] = []
    results = measure_pg_steps(_TINY, tmp_path, lines.append)
    assert results.skipped is None, results.skipped
    assert results.server_settings["synchronous_commit"] == "on"
    for key in (ACODE.key, DBOS.key):
        assert len(results.wall_us[key]) == 1
        assert results.wall_us[key][0] > 0
        assert results.cpu_us[key][0] > 0
        assert results.transactions[key][0] >= 1  # a durable step commits at least once
    assert len(results.ratios) == 1
    assert len(lines) == 1
    section = render_pg_steps(results)
    assert section.startswith("## A step on PostgreSQL, beside DBOS\n")
    assert "Target (issue 22)" in section


def test_the_ratio_is_the_median_of_the_rounds_and_the_target_is_judged_on_it() -> None:
    results = PgSteps(_TINY, server="a server", server_settings={"fsync": "on"})
    results.wall_us = {ACODE.key: [300.0, 310.0, 900.0], DBOS.key: [700.0, 650.0, 1000.0]}
    results.cpu_us = {ACODE.key: [100.0] * 3, DBOS.key: [400.0] * 3}
    results.transactions = {ACODE.key: [1.0] * 3, DBOS.key: [5.0] * 3}
    results.ratios = [2.5, 2.1, 1.1]
    section = render_pg_steps(results)
    assert "2.10x" in section
    assert "| 310 | 300 - 900 |" in section
    assert section.rstrip().endswith("met.")
    results.ratios = [1.9, 2.1, 1.1]
    assert "**missed**" in render_pg_steps(results)


def test_without_a_server_the_section_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens on this socket folder: the section says so instead of failing.
    monkeypatch.setenv("ACODE_BENCH_PG_DSN", f"host={tmp_path} dbname=postgres")
    results = measure_pg_steps(_TINY, tmp_path, lambda _: None)
    if importlib.util.find_spec("dbos") is None:
        assert results.skipped is not None
        assert "DBOS is not installed" in results.skipped
    else:
        assert results.skipped is not None
        assert "OperationalError" in results.skipped
    assert render_pg_steps(results).startswith("## A step on PostgreSQL, beside DBOS\n\nNot ")


def test_the_statement_count_reads_executes_and_simple_queries_not_parses() -> None:
    from bench.pg_statements import _LINE, _statement

    lines = [
        "@db@ LOG:  duration: 0.101 ms  parse <unnamed>: INSERT INTO t (a, b) VALUES ($1, $2)",
        "@db@ LOG:  duration: 0.020 ms  bind _pg3_0: INSERT INTO t (a, b) VALUES ($1, $2)",
        "@db@ LOG:  duration: 0.042 ms  execute _pg3_0: INSERT INTO t (a, b) VALUES ($1, $2)",
        "@db@ LOG:  duration: 0.010 ms  statement: BEGIN",
        "@db@ DETAIL:  Parameters: $1 = '1', $2 = '2'",
    ]
    found = [_statement(m.group(1)) for line in lines if (m := _LINE.search(line))]
    assert found == ["INSERT INTO t (a,", "BEGIN"]


def test_settings_of_partial_turns_are_refused() -> None:
    with pytest.raises(ValueError, match="multiples of chunk"):
        PgStepSettings(steps=150, chunk=100)
