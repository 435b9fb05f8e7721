"""A workspace whose sessions are stored in PostgreSQL (``store.url`` / ACODE_STORE_URL):
a plan session runs there end to end, `acode resume` continues it after a SIGKILL with
no completed step run again, and nothing of it goes to a SQLite file. Against the real
server of tests/conftest.py, in a database of the test's own."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from tests.cli.conftest import Background, Cli, plan_yaml, step_started
from tests.support.postgres import PgServer, scratch_database


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
    assert "schema version 3, 1 session of this workspace" in after["detail"]


def _run(acode: Cli, title: str, step: str, expect: int = 0) -> str:
    acode.write("plan.yml", plan_yaml(title, step))
    acode("run", "plan.yml", expect=expect)
    return str(acode.sessions()[0]["id"])


def test_prune_removes_an_ended_session_from_postgresql(
    acode: Cli, pg_server: PgServer, dbname: str
) -> None:
    done = _run(acode, "Greet", "{id: w, write: a.txt, content: hi}")
    waiting = _run(acode, "Needs ok", "{id: ok, approve: Go on?}", expect=20)
    shown = acode("session", "prune", "--state", "completed", "--dry-run")
    assert done[:13] in shown.out, shown.describe()
    assert waiting[:13] not in shown.out

    data = acode("session", "prune", "--state", "completed", "--yes", "--json").json()
    assert [r["id"] for r in data["removed"]] == [done]
    assert data["vacuum"] == {"converted": False, "error": None}
    assert [s["id"] for s in acode.sessions()] == [waiting]
    assert _events(pg_server, dbname, done) == []
    assert not (acode.workspace / ".agent" / "state" / "acode.db").exists()
    gone = acode("session", "show", done, expect=None)
    assert "ACODE-SESSION-003" in gone.err, gone.describe()
    assert "pruned" in gone.flat_err


def test_archive_prune_and_import_round_trip_on_postgresql(
    acode: Cli, workspace: Path, tmp_path: Path
) -> None:
    session_id = _run(acode, "Greet", "{id: w, write: a.txt, content: hi}")
    first, second = tmp_path / "first.acode.gz", tmp_path / "second.acode.gz"
    done = acode("session", "archive", session_id, "-o", str(first), "--json").json()
    assert done["id"] == session_id
    acode("session", "prune", "--state", "completed", "--yes")
    assert acode.sessions() == []

    imported = acode("session", "import", str(first), "--json").json()
    assert (imported["id"], imported["imported"]) == (session_id, True)
    assert imported["counts"] == done["counts"]
    again = acode("session", "import", str(first), "--json").json()
    assert again["imported"] is False  # the same session, already there
    acode("session", "archive", session_id, "-o", str(second))
    assert second.read_bytes() == first.read_bytes()
    assert acode("session", "show", session_id, "--json").json()["state"] == "COMPLETED"
    assert not (workspace / ".agent" / "state" / "acode.db").exists()


def test_an_archive_imported_into_another_postgresql_workspace_is_its_own(
    acode: Cli, tmp_path: Path, pg_server: PgServer
) -> None:
    session_id = _run(acode, "Greet", "{id: w, write: a.txt, content: hi}")
    archive = tmp_path / "a.acode.gz"
    acode("session", "archive", session_id, "-o", str(archive))
    # Another workspace on the same database: the database holds the session once.
    neighbour = Cli(tmp_path / "neighbour", acode.env, Background())
    neighbour.workspace.mkdir()
    refused = neighbour("session", "import", str(archive), expect=1)
    assert "recorded by another workspace" in refused.flat_err, refused.describe()
    assert neighbour.sessions() == []
    with scratch_database(pg_server) as other:
        env = {**acode.env, "ACODE_STORE_URL": pg_server.store_url(other)}
        clone = Cli(tmp_path / "clone", env, Background())
        clone.workspace.mkdir()
        assert clone("session", "import", str(archive), "--json").json()["imported"] is True
        # Recorded under the clone's path (it would not see it otherwise), and still the
        # archive's session: importing it again is done, not a conflict.
        assert [s["id"] for s in clone.sessions()] == [session_id]
        assert clone("session", "import", str(archive), "--json").json()["imported"] is False
