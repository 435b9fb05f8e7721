"""What a person sees of a workspace whose sessions are in PostgreSQL (``store.url``):
`acode status` names the store (never as "local only") and, with hand-off, where the
work tree is; `acode doctor` weighs what the workspace holds in the database; the
commands that speak of a mirror say that the store needs none. Against the real server
of tests/conftest.py, in a database of the test's own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli.conftest import Background, Cli, plan_yaml, step_started
from tests.cli.test_handoff_resume import Machines, git, machines  # noqa: F401
from tests.support.postgres import PASSWORD_ROLE, PgServer


@pytest.fixture
def acode(
    workspace: Path,
    cli_env: dict[str, str],
    background: Background,
    pg_server: PgServer,
    dbname: str,
) -> Cli:
    """A workspace on PostgreSQL, logging in with a password (which nothing may show)."""
    import psycopg

    role, password = PASSWORD_ROLE
    with psycopg.connect(pg_server.direct_dsn(dbname), autocommit=True) as conn:
        if not pg_server.embedded:  # a given server: the role may have to be made first
            conn.execute(
                f"DO $$ BEGIN CREATE ROLE {role} LOGIN PASSWORD '{password}';"
                " EXCEPTION WHEN duplicate_object THEN NULL; END $$".encode()
            )
        conn.execute(f"GRANT CREATE ON DATABASE {dbname} TO {role}".encode())
    url = pg_server.store_url(dbname, user=role, password=password)
    return Cli(workspace, {**cli_env, "ACODE_STORE_URL": url}, background)


def _run(acode: Cli, *steps: str, expect: int = 0) -> str:
    acode.write("plan.yml", plan_yaml("On PostgreSQL", *steps))
    acode("run", "plan.yml", expect=expect)
    return str(acode.sessions()[0]["id"])


def test_status_names_the_postgresql_store_never_local_only(acode: Cli, dbname: str) -> None:
    session_id = _run(acode, "{id: a, write: a.txt, content: 'a'}")
    _, password = PASSWORD_ROLE
    for command in (("status",), ("session", "show", session_id)):
        shown = acode(*command)
        assert "local only" not in shown.out, shown.describe()
        assert "Store:   postgresql://acode_pw@" in shown.out, shown.describe()
        assert f"/{dbname}" in shown.out
        assert f"workspace {acode.workspace.resolve()}" in shown.flat_out
        assert "Sync:    none needed" in shown.out
        assert password not in shown.out + shown.err
    data = acode("status", "--json").json()
    assert data["sync"] == {"status": "in_store", "remote": None}
    store = data["store"]
    assert store["kind"] == "postgresql"
    assert store["location"].startswith("postgresql://acode_pw@")
    assert store["location"].split("?")[0].endswith(f"/{dbname}")
    assert "acode_workspace" not in store["location"]
    assert store["workspace"] == str(acode.workspace.resolve())
    assert password not in str(data)


def test_status_of_a_sqlite_workspace_names_its_file(
    workspace: Path, cli_env: dict[str, str], background: Background
) -> None:
    acode = Cli(workspace, cli_env, background)
    _run(acode, "{id: a, write: a.txt, content: 'a'}")
    assert "Sync:    local only (no remote configured)" in acode("status").out
    data = acode("status", "--json").json()
    assert data["sync"] == {"status": "local", "remote": None}
    db = workspace.resolve() / ".agent/state/acode.db"
    assert data["store"] == {
        "kind": "sqlite",
        "location": str(db),
        "workspace": str(db.parent.parent.parent),
    }


def test_status_in_another_clone_says_where_the_work_tree_is(machines: Machines) -> None:  # noqa: F811
    m = machines
    m.a.write(
        "plan.yml",
        plan_yaml(
            "Hand-off",
            '{id: w, write: src/a.py, content: "print(1)\\n"}',
            "{id: ok, approve: Go on?}",
            '{id: w2, write: src/b.py, content: "print(2)\\n"}',
        ),
    )
    m.a("run", "plan.yml", expect=20)  # waits for an approval: resumable, in either clone
    (session,) = m.a.sessions()
    short, ref = session["short_id"], f"refs/acode/sessions/{session['id']}"
    recorded = git(m.a.workspace, "rev-parse", ref).strip()

    here = m.a("status")
    assert "Hand-off: pushed ✓" in here.out, here.describe()
    assert m.a("status", "--json").json()["handoff"]["elsewhere"] is None

    there = m.b("status")
    assert "nothing recorded yet" not in there.out, there.describe()
    assert "Hand-off: recorded in another clone" in there.out
    assert f"Recorded: {recorded[:12]} (the history names it); here: none" in there.out
    assert f"acode resume {short}" in there.out
    handoff = m.b("status", "--json").json()["handoff"]
    assert (handoff["status"], handoff["elsewhere"]) == ("elsewhere", recorded)

    # Once the session came here, its work tree is this clone's own.
    m.b("approve", short)
    m.b("resume", short, "--mode", "autopilot")
    assert m.b.status(session["id"])["state"] == "COMPLETED"
    assert m.b("status", "--json").json()["handoff"]["status"] == "pushed"
    assert "Hand-off: pushed ✓" in m.b("status").out
    # The clone it left has only an older commit: it is told where the newer one is,
    # and an ended session is not offered to resume.
    gone = m.a("status")
    assert "Hand-off: recorded in another clone" in gone.out, gone.describe()
    assert f"here: {recorded[:12]}" in gone.out
    assert "acode resume" not in gone.out
    assert f"git fetch origin {ref}" in gone.out


def _check(acode: Cli, name: str, env: dict[str, str] | None = None) -> dict[str, str]:
    report = acode("doctor", "--json", expect=None, env=env).json()
    (check,) = [c for c in report["checks"] if c["name"] == name]
    return dict(check)


def test_doctor_weighs_the_sessions_in_postgresql_as_retention_does(acode: Cli) -> None:
    """retention.max_state_bytes weighs the progress files and what pruning every session
    would free in the database (docs/retention.md): the doctor weighs the same."""
    _run(acode, "{id: a, write: a.txt, content: 'a'}", "{id: b, run: 'true'}")
    acode.write("big.txt", os.urandom(15_000).hex())
    _run(acode, "{id: r, read: big.txt}")
    remote = _check(acode, "remote")
    assert remote["status"] == "skip"
    assert "PostgreSQL store" in remote["detail"], remote  # no mirror to configure
    size = _check(acode, "state size")
    assert size["status"] == "ok", size
    assert "this workspace's sessions hold" in size["detail"]
    assert "in postgresql://acode_pw@" in size["detail"]

    acode.write(".agent/config.yml", "retention:\n  max_state_bytes: 1000\n")
    weighed = acode("session", "prune", "--state", "completed", "--dry-run", "--json").json()
    over = _check(acode, "state size")
    assert over["status"] == "fail", over
    assert (
        f"hold {weighed['state_bytes']:,}, over retention.max_state_bytes (1,000)" in over["detail"]
    )
    assert weighed["state_bytes"] > 15_000  # the image read is in the database, not here
    assert over["fix"] == f"acode session prune --dry-run -w {acode.workspace}"
    acode.write(".agent/config.yml", f"retention:\n  max_state_bytes: {weighed['state_bytes']}\n")
    assert _check(acode, "state size")["status"] == "ok"


def test_doctor_with_a_store_that_does_not_answer_says_what_to_do(acode: Cli) -> None:
    _run(acode, "{id: a, write: a.txt, content: 'a'}")
    acode.write(".agent/config.yml", "retention:\n  max_state_bytes: 1000\n")
    dead = {**acode.env, "ACODE_STORE_URL": "postgresql://acode:hunter2@127.0.0.1:1/acode"}
    database = _check(acode, "database", env=dead)
    assert database["status"] == "fail"
    assert "ACODE_STORE_URL" in (database["fix"] or ""), database
    size = _check(acode, "state size", env=dead)
    assert size["status"] == "warn", size
    assert "not weighed against retention.max_state_bytes (1,000)" in size["detail"]
    assert "hunter2" not in str(size) + str(database)


def test_the_commands_of_the_mirror_say_the_store_needs_none(acode: Cli) -> None:
    _run(acode, "{id: a, write: a.txt, content: 'a'}")
    for command in (("sync",), ("sync", "--json"), ("session", "list", "--remote")):
        refused = acode(*command, expect=2)
        assert "ACODE-USAGE-001" in refused.err, refused.describe()
        # sync.remote cannot be set beside store.url: it is not what to do here.
        assert "set sync.remote" not in refused.flat_err
        assert "PostgreSQL store" in refused.flat_err
        assert "Traceback" not in refused.err
    assert "handoff.remote" in acode("sync", expect=2).flat_err
    assert "acode session list" in acode("session", "list", "--remote", expect=2).flat_err


def test_a_resume_preview_on_postgresql_is_not_local_only(acode: Cli) -> None:
    _run(acode, "{id: a, write: a.txt, content: 'a'}", "{id: ok, approve: Go on?}", expect=20)
    shown = acode("resume", "--dry-run")
    assert "Sync status: none needed: in the PostgreSQL store" in shown.out, shown.describe()
    assert "local only" not in shown.out
    assert acode("resume", "--dry-run", "--json").json()["sync_status"] == "in_store"


def test_doctor_fails_a_store_and_a_mirror_set_together_as_run_refuses_them(acode: Cli) -> None:
    acode.write(".agent/config.yml", "sync:\n  remote: postgresql://team@127.0.0.1:1/acode\n")
    acode.write("plan.yml", plan_yaml("Refused", "{id: a, write: a.txt, content: 'a'}"))
    refused = acode("run", "plan.yml", expect=2)
    assert "store.url and sync.remote are both set" in refused.flat_err
    config = _check(acode, "config")
    assert config["status"] == "fail", config
    assert "store.url and sync.remote are both set" in config["detail"]
    assert "unset sync.remote" in (config["fix"] or "")


def test_doctor_warns_of_a_password_written_in_the_config_file(acode: Cli) -> None:
    url = acode.env["ACODE_STORE_URL"]
    in_file = {k: v for k, v in acode.env.items() if k != "ACODE_STORE_URL"}
    acode.write(".agent/config.yml", f"store:\n  url: '{url}'\n")
    config = _check(acode, "config", env=in_file)
    assert config["status"] == "warn", config
    assert "store.url holds a password" in config["detail"]
    assert "ACODE_STORE_URL" in (config["fix"] or "")
    assert PASSWORD_ROLE[1] not in str(config)
    # Given by the environment, which wins, the file's value is not what is used.
    assert _check(acode, "config")["status"] == "ok"


def test_doctor_checks_the_hand_off_remote_and_the_shared_name(machines: Machines) -> None:  # noqa: F811
    m = machines
    handoff = _check(m.b, "handoff")
    assert handoff["status"] == "ok", handoff
    assert "origin" in handoff["detail"]
    assert "acme" in handoff["detail"]

    git(m.b.workspace, "remote", "rename", "origin", "upstream")
    missing = _check(m.b, "handoff")
    assert missing["status"] == "fail", missing
    assert "no git remote named origin" in missing["detail"]
    assert missing["fix"] == "git remote add origin URL   # the repository's URL"

    # Without a name, a clone in another directory sees none of this one's sessions.
    m.a.write(".agent/config.yml", "handoff:\n  remote: origin\n")
    unnamed = _check(m.a, "handoff")
    assert unnamed["status"] == "warn", unnamed
    assert "store.workspace" in unnamed["detail"]


def test_a_workspace_without_sessions_in_postgresql_is_told_where_it_looked(
    acode: Cli, tmp_path: Path
) -> None:
    _run(acode, "{id: a, write: a.txt, content: 'a'}")
    # Another directory on the same database (a clone without store.workspace).
    other = Cli(tmp_path / "clone", acode.env, Background())
    other.workspace.mkdir()
    where = f"workspace {other.workspace.resolve()} in postgresql://acode_pw@"
    listed = other("session", "list")
    assert where in listed.flat_out, listed.describe()
    assert "store.workspace" in listed.flat_out
    assert other("session", "list", "--json").json() == []
    status = other("status", expect=14)
    assert where in status.flat_err, status.describe()
    assert "store.workspace" in status.flat_err


def test_status_in_another_clone_names_the_lease_of_a_session_running_there(
    machines: Machines,  # noqa: F811
    tmp_path: Path,
) -> None:
    m = machines
    pids = m.a.watch_pids(str(tmp_path / "pids"))
    nap = f"echo $$ >> {pids}; sleep 30"
    m.a.write("plan.yml", plan_yaml("Running in A", f"{{id: nap, run: '{nap}', idempotent: true}}"))
    run = m.a.start("run", "plan.yml")
    step_started(m.a, run, pids)
    (session,) = m.b.sessions()
    shown = m.b("status")
    # B's lock file is free: the lease in the store says who runs it.
    assert f"Lock:    free here; the store's lease: pid {run.proc.pid} on host" in shown.out, (
        shown.describe()
    )
    lease = m.b("status", "--json").json()["lease"]
    assert (lease["pid"], lease["epoch"]) == (run.proc.pid, 1)
    assert f"Lock:    pid {run.proc.pid}" in m.a("status").out  # its own machine's lock
    run.proc.terminate()  # pauses the session, which gives its lease back
    m.a.finish(run, expect=130)
    assert m.b.status(session["id"])["lease"] is None
    assert "Lock:    free" in m.b("status").out
