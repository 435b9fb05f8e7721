"""A workspace whose sessions are stored in PostgreSQL (``store.url`` / ACODE_STORE_URL):
a plan session runs there end to end, `acode resume` continues it after a SIGKILL with
no completed step run again, and nothing of it goes to a SQLite file. Against the real
server of tests/conftest.py, in a database of the test's own."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import Background, Cli, plan_yaml, step_started
from tests.support.postgres import PgServer, scratch_database


@pytest.fixture
def dbname(pg_server: PgServer) -> Iterator[str]:
    with scratch_database(pg_server) as name:
        yield name


@pytest.fixture
def acode(
    workspace: Path,
    cli_env: dict[str, str],
    background: Background,
    pg_server: PgServer,
    dbname: str,
) -> Cli:
    env = {**cli_env, "ACODE_STORE_URL": pg_server.store_url(dbname)}
    return Cli(workspace, env, background)


def _events(pg: PgServer, dbname: str, session_id: str) -> list[tuple[int, str]]:
    import psycopg

    with psycopg.connect(pg.direct_dsn(dbname), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT e.seq, e.type FROM acode_store.events e JOIN acode_store.sessions s"
            " ON s.sid = e.sid WHERE s.id = %s ORDER BY e.seq",
            (session_id,),
        ).fetchall()
    return [(int(seq), str(type_)) for seq, type_ in rows]


def test_a_session_killed_on_postgresql_resumes_without_running_a_step_again(
    acode: Cli, pg_server: PgServer, dbname: str, tmp_path: Path
) -> None:
    # Outside the workspace: what each step did, once per time it ran.
    effects, child_env = tmp_path / "effects.log", tmp_path / "child.env"
    pids = acode.watch_pids("pids")
    nap = f"test -e napped || {{ touch napped; echo $$ >> {pids}; sleep 30; }}"
    acode.write(
        "plan.yml",
        plan_yaml(
            "On PostgreSQL",
            "{id: first, write: a.txt, content: 'a'}",
            f"{{id: one, run: 'echo one >> {effects}; env > {child_env}'}}",
            f"{{id: nap, run: '{nap}', idempotent: true}}",
            f"{{id: four, run: 'echo four >> {effects}'}}",
            "{id: last, write: b.txt, content: 'b'}",
        ),
    )
    run = acode.start("run", "plan.yml")
    step_started(acode, run, pids)
    os.killpg(run.proc.pid, signal.SIGKILL)
    acode.finish(run, expect=-signal.SIGKILL)

    (interrupted,) = acode.sessions()
    assert interrupted["state"] == "EXECUTING"
    recorded = _events(pg_server, dbname, interrupted["id"])
    assert recorded, "the session recorded nothing in PostgreSQL"

    acode("resume", "--mode", "autopilot")
    done = acode.status(interrupted["id"])
    assert done["state"] == "COMPLETED"
    assert effects.read_text().split() == ["one", "four"]
    assert (acode.workspace / "b.txt").read_text() == "b"
    after = _events(pg_server, dbname, interrupted["id"])
    assert after[: len(recorded)] == recorded  # appended to, never rewritten
    assert [seq for seq, _ in after] == list(range(1, len(after) + 1))
    assert not (acode.workspace / ".agent/state/acode.db").exists()
    # A child of the session never sees where the store is (its URL may hold a password).
    assert "ACODE_STORE_URL" not in child_env.read_text()
    assert dbname not in child_env.read_text()


def test_a_session_whose_connections_the_server_ended_pauses_and_resumes(
    acode: Cli, pg_server: PgServer, dbname: str, tmp_path: Path
) -> None:
    import psycopg

    effects = tmp_path / "effects.log"
    pids = acode.watch_pids("pids")
    nap = f"test -e napped || {{ touch napped; echo $$ >> {pids}; sleep 2; }}"
    acode.write(
        "plan.yml",
        plan_yaml(
            "Through a restart",
            f"{{id: one, run: 'echo one >> {effects}'}}",
            f"{{id: nap, run: '{nap}', idempotent: true}}",
            f"{{id: two, run: 'echo two >> {effects}'}}",
        ),
    )
    run = acode.start("run", "plan.yml")
    step_started(acode, run, pids)
    # What a restart of the server does to its clients: every connection ended.
    with psycopg.connect(pg_server.direct_dsn("postgres"), autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (dbname,),
        )
    stopped = acode.finish(run, expect=1)
    assert "ACODE-DB-005" in stopped.err, stopped.describe()
    assert "acode resume" in stopped.flat_err
    assert "Traceback" not in stopped.err
    assert "discarding" not in stopped.err  # the pool's own warnings stay out of sight
    (paused,) = acode.sessions()
    assert paused["state"] == "PAUSED"
    acode("resume", "--mode", "autopilot")
    assert acode.status(paused["id"])["state"] == "COMPLETED"
    assert effects.read_text().split() == ["one", "two"]


def test_a_store_that_does_not_answer_is_a_clear_error(
    workspace: Path, cli_env: dict[str, str], background: Background
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql://acode:hunter2@127.0.0.1:{port}/acode"
    acode = Cli(workspace, {**cli_env, "ACODE_STORE_URL": url}, background)
    acode.write("plan.yml", plan_yaml("Nowhere", "{id: a, write: a.txt, content: 'a'}"))
    for command in (("session", "list"), ("run", "plan.yml"), ("resume",)):
        refused = acode(*command, expect=1)
        assert "ACODE-DB-005" in refused.err, refused.describe()
        assert f"postgresql://acode@127.0.0.1:{port}/acode" in refused.flat_err
        assert "Traceback" not in refused.err
        assert "hunter2" not in refused.out + refused.err
    assert not (workspace / "a.txt").exists()


def test_doctor_checks_the_postgresql_store_without_changing_it(
    acode: Cli, pg_server: PgServer, dbname: str
) -> None:
    import psycopg

    def database() -> dict[str, str]:
        report = acode("doctor", "--json", expect=None).json()
        (check,) = [c for c in report["checks"] if c["name"] == "database"]
        return dict(check)

    before = database()
    assert before["status"] == "ok", before
    assert before["detail"].endswith(": no sessions yet")
    with psycopg.connect(pg_server.direct_dsn(dbname)) as conn:
        found = conn.execute("SELECT to_regnamespace('acode_store')").fetchone()
    assert found == (None,)  # looking created nothing
    acode.write("plan.yml", plan_yaml("Checked", "{id: a, write: a.txt, content: 'a'}"))
    acode("run", "plan.yml")
    after = database()
    assert after["status"] == "ok", after
    assert "schema version 1, 1 session of this workspace" in after["detail"]
