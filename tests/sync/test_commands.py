"""Sync through the real `acode` executable: a run with the remote down from the start,
`acode sync`, a push killed with SIGKILL, leases between two machines, the remote
listing, the status section, and what is imported when no remote is configured."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import acode as library
from acode.domain.config import AcodeConfig
from acode.sync.remote import connect_remote
from tests.cli.conftest import Background, Cli, plan_yaml, wait_for, wait_for_pid
from tests.sync.conftest import Mirror, assert_mirrored, local_events

PLAN = plan_yaml(
    "Mirrored plan",
    '{id: one, write: one.txt, content: "1\\n"}',
    "{id: two, run: echo two >> two.txt, paths: [two.txt]}",
    "{id: three, read: one.txt}",
)


@pytest.fixture
def acode(workspace: Path, cli_env: dict[str, str], background: Background, mirror: Mirror) -> Cli:
    """acode in ``workspace``, its remote the test's database (through the proxy)."""
    return Cli(workspace, {**cli_env, "ACODE_SYNC_DSN": mirror.dsn}, background)


def _log(workspace: Path) -> list[dict[str, object]]:
    path = workspace / ".agent" / "state" / "logs" / "acode.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _sync_lines(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Sync:"))
    return lines[start:]


def test_a_run_with_the_remote_down_then_acode_sync_drains_it(acode: Cli, mirror: Mirror) -> None:
    mirror.proxy.down()
    acode.write("plan.yml", PLAN)

    run = acode("run", "plan.yml")

    session = acode.only_session()
    short, port = session["short_id"], mirror.proxy.port
    events = len(local_events(acode.workspace, session["id"]))
    assert session["state"] == "COMPLETED"
    assert re.search(
        r"^Sync: DEGRADED - postgresql://postgres@127\.0\.0\.1:\d+/\w+ unavailable "
        rf"\(Connection refused \(127\.0\.0\.1:{port}\)\); \d+ events pending\. "
        "The session continues locally.$",
        run.err,
        re.M,
    ), run.describe()
    status = acode("status")
    lines = _sync_lines(status.out)
    assert lines[0] == f"Sync:    DEGRADED - {events} events pending"
    assert lines[1] == f"Remote:  postgresql://postgres@127.0.0.1:{port}/{mirror.dbname}"
    assert re.fullmatch(r"  Last sync attempt: \d+s ago", lines[2])
    assert lines[3:] == [
        "  Next retry: with the next `acode sync`, `run` or `resume`",
        f"  Reason: Connection refused (127.0.0.1:{port})",
        "",
        "Note: Session continues locally. Sync will resume when remote is available.",
    ]
    data = acode.status(short)["sync"]
    assert (data["status"], data["pending"], data["synced_seq"]) == ("degraded", events, 0)
    assert data["reason"] == f"Connection refused (127.0.0.1:{port})"
    assert data["last_attempt"]
    assert data["next_retry"]
    assert data["down_since"]

    mirror.proxy.up()
    pushed = acode("sync")

    assert pushed.out.splitlines() == [
        f"Pushed {events} events of 1 session to "
        f"postgresql://postgres@127.0.0.1:{port}/{mirror.dbname}.",
        "Sync: Up to date ✓",
    ]
    assert _sync_lines(acode("status").out)[0] == "Sync:    Up to date ✓"
    assert acode.status(short)["sync"]["status"] == "up_to_date"
    assert_mirrored(mirror, acode.workspace, session["id"])
    assert [r["event"] for r in _log(acode.workspace)] == ["sync_degraded", "sync_reconnected"]
    again = acode("sync", "--json").json()
    assert (again["status"], again["pushed"], again["pending"]) == ("up_to_date", 0, 0)


def test_acode_sync_wait_retries_until_the_remote_is_back(acode: Cli, mirror: Mirror) -> None:
    mirror.proxy.down()
    acode.write("plan.yml", PLAN)
    acode("run", "plan.yml")
    waiting = acode.start("sync", "--wait", "--timeout", "20", "--json")
    wait_for(
        "a failed attempt",
        lambda: (
            "sync_degraded" in [r["event"] for r in _log(acode.workspace)][1:]
            or acode.status(acode.only_session()["id"])["sync"]["failures"] >= 2
        ),
    )
    mirror.proxy.up()

    report = acode.finish(waiting, expect=0).json()

    events = len(local_events(acode.workspace, acode.only_session()["id"]))
    assert (report["status"], report["pushed"], report["pending"]) == ("up_to_date", events, 0)
    assert report["attempts"] >= 2
    assert_mirrored(mirror, acode.workspace, acode.only_session()["id"])


@pytest.mark.parametrize("after", [False, True], ids=["before-commit", "after-commit"])
def test_a_push_killed_mid_way_is_finished_by_the_next_process(
    acode: Cli, mirror: Mirror, secret: None, after: bool
) -> None:
    config = AcodeConfig(durability="normal")
    with library.open_session("long", acode.workspace, config) as s:
        for i in range(1100):  # 1,103 events: three batches of at most 500
            s.step(f"s{i}", lambda ctx: ctx.position)
        session_id = s.id
    connect_remote(mirror.dsn).close()  # the schema exists: no migration COMMIT to count
    held = mirror.proxy.cut_at_commit(2, after=after, then="hold")

    pushing = acode.start("sync")
    assert held.wait(20)
    wait_for("the remote's view", lambda: mirror.count(session_id) == (1000 if after else 500))
    os.kill(pushing.pid, signal.SIGKILL)
    acode.finish(pushing, expect=-signal.SIGKILL)

    done = acode("sync", "--json").json()

    assert (done["pushed"], done["pending"]) == (603, 0)  # the second batch again, then the rest
    assert_mirrored(mirror, acode.workspace, session_id)


NEEDS_APPROVAL = plan_yaml(
    "Two machines",
    '{id: first, write: first.txt, content: "1\\n"}',
    "{id: ok, approve: Go on?}",
    '{id: last, write: last.txt, content: "2\\n"}',
)


def test_resume_is_refused_while_the_remote_names_another_holder(
    acode: Cli, mirror: Mirror
) -> None:
    acode.write("plan.yml", NEEDS_APPROVAL)
    acode("run", "plan.yml", expect=20)
    session = acode.only_session()
    short = session["short_id"]
    acode("approve", short)
    assert mirror.query("SELECT lease_holder FROM acode.sessions") == [(None,)]
    mirror.execute(
        "UPDATE acode.sessions SET lease_holder = 'their-token', lease_host = 'elsewhere',"
        " lease_pid = 4242, lease_since = now(), lease_expires = now() + interval '30 s'"
    )
    before = acode("session", "history", short, "--json").json()

    refused = acode("resume", short, expect=16)

    assert refused.flat_err.startswith(
        f"error ACODE-RESUME-003: session {short} is running elsewhere: the remote names "
        "pid 4242 on host elsewhere since "
    ), refused.describe()
    assert "its lease lapses 30 s after its last renewal" in refused.flat_err
    assert acode("session", "history", short, "--json").json() == before
    assert not (acode.workspace / "last.txt").exists()

    mirror.execute("UPDATE acode.sessions SET lease_expires = now() - interval '1 s'")
    acode("resume", short)

    assert (acode.workspace / "last.txt").read_text() == "2\n"
    assert mirror.query("SELECT state, lease_holder FROM acode.sessions") == [("COMPLETED", None)]
    assert_mirrored(mirror, acode.workspace, session["id"])


def test_session_list_remote_shows_where_each_session_is(acode: Cli, mirror: Mirror) -> None:
    acode.write("plan.yml", PLAN)
    mirror.proxy.down()
    acode("run", "plan.yml")  # recorded here only
    mirror.proxy.up()
    connect_remote(mirror.dsn).close()
    other = "01a00000-0000-7000-8000-000000000001"
    mirror.execute(
        "INSERT INTO acode.sessions (id, title, state, workspace, host, created_at, updated_at,"
        " lease_holder, lease_host, lease_pid, lease_since, lease_expires) VALUES (%s,"
        " 'On the laptop', 'EXECUTING', '/home/kim/app', 'laptop', now() - interval '1 h',"
        " now() - interval '1 h', 't', 'laptop', 4242, now(), now() + interval '30 s')",
        (other,),
    )

    listing = acode("session", "list", "--remote", "--json").json()

    mine = acode.only_session()
    assert [(r["id"], r["where"]) for r in listing] == [(mine["id"], "both"), (other, "remote")]
    assert listing[1]["lease"]["host"] == "laptop"
    assert listing[1]["lease"]["pid"] == 4242
    assert listing[0]["lease"] is None
    assert_mirrored(mirror, acode.workspace, mine["id"])  # pushed before listing
    table = acode("session", "list", "--remote").out.splitlines()
    assert table[0].startswith("Sessions on postgresql://postgres@127.0.0.1:")
    assert re.match(r"ID\s+STATE\s+UPDATED\s+WHERE\s+HOST\s+HELD BY\s+TITLE", table[1])
    assert re.search(r"COMPLETED\s+\S+ ago\s+here \+ remote\s+\S+\s+-\s+Mirrored plan", table[2])
    assert re.search(r"EXECUTING\s+1h ago\s+remote only\s+laptop\s+pid 4242 on laptop", table[3])


def test_commands_that_need_a_remote_say_how_to_configure_one(
    workspace: Path, cli_env: dict[str, str], background: Background
) -> None:
    local = Cli(workspace, cli_env, background)
    for command in (["sync"], ["session", "list", "--remote"]):
        refused = local(*command, expect=2)
        assert refused.flat_err.startswith("error ACODE-USAGE-001: no remote is configured for ")
        assert "ACODE_SYNC_DSN" in refused.flat_err


def _imported_by_status(workspace: Path, env: dict[str, str]) -> list[str]:
    probe = (
        "import atexit, sys\n"
        "atexit.register(lambda: print(sorted(m for m in sys.modules"
        " if m.startswith(('psycopg', 'acode.sync'))), file=sys.stderr))\n"
        "from acode.cli.app import main\n"
        f"sys.argv = ['acode', 'status', '-w', {str(workspace)!r}]\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    return list(eval(done.stderr.splitlines()[-1]))  # a printed list of module names


def test_status_imports_no_driver_and_without_a_remote_no_sync_code(
    acode: Cli, cli_env: dict[str, str]
) -> None:
    acode.write("plan.yml", PLAN)
    acode("run", "plan.yml", env=cli_env)  # no remote
    assert _imported_by_status(acode.workspace, cli_env) == []

    with_remote = _imported_by_status(acode.workspace, acode.env)
    assert with_remote
    assert not [m for m in with_remote if m.startswith("psycopg")]


def test_scenario_07_sync_pending(acode: Cli, mirror: Mirror) -> None:
    """Spec 001 scenario 7: network down, run, pause, resume: degraded mode is shown and
    everything works locally; later the remote gets every event once."""
    command = "echo $$ >> nap.pids; test -f go || exec sleep 30"
    acode.write(
        "plan.yml",
        plan_yaml(
            "Offline",
            '{id: first, write: first.txt, content: "1\\n"}',
            f'{{id: nap, run: "{command}"}}',
            '{id: last, write: last.txt, content: "3\\n"}',
        ),
    )
    pids = acode.watch_pids("nap.pids")
    # 1. Disconnect network
    mirror.proxy.down()
    # 2. Run session  3. Pause
    run = acode.start("run", "plan.yml")
    wait_for_pid(pids)
    os.kill(run.pid, signal.SIGTERM)
    acode.finish(run, expect=130)
    short = acode.only_session()["short_id"]
    # 4. Resume  5. Verify: degraded mode shown
    preview = acode("resume", short, "--dry-run")
    assert re.search(r"^  Sync status: DEGRADED - \d+ events pending$", preview.out, re.M)
    acode.write("go", "")
    resumed = acode("resume", short)
    assert "Sync: DEGRADED - " in resumed.err
    assert "The session continues locally." in resumed.err
    # 6. Verify: works locally
    assert (acode.workspace / "last.txt").read_text() == "3\n"
    assert acode.status(short)["state"] == "COMPLETED"
    record = next(r for r in _log(acode.workspace) if r["event"] == "session_resume")
    assert record["sync_status"] == "degraded"

    mirror.proxy.up()
    acode("sync")
    assert_mirrored(mirror, acode.workspace, acode.only_session()["id"])


def test_a_session_recorded_before_the_remote_was_set_is_pending_not_degraded(
    acode: Cli, mirror: Mirror, cli_env: dict[str, str]
) -> None:
    acode.write("plan.yml", PLAN)
    acode("run", "plan.yml", env=cli_env)  # no remote yet
    events = len(local_events(acode.workspace, acode.only_session()["id"]))

    lines = _sync_lines(acode("status").out)

    assert lines == [
        f"Sync:    {events} events pending",
        f"Remote:  postgresql://postgres@127.0.0.1:{mirror.proxy.port}/{mirror.dbname}",
        "  Push them now with: acode sync",
    ]
    assert acode.status(acode.only_session()["id"])["sync"]["status"] == "pending"


def test_work_sessions_and_tasks_are_mirrored_like_every_session(
    acode: Cli, mirror: Mirror
) -> None:
    acode("settings", "set", "ai_stacking_mode", "handsoff")
    acode("task", "add", "Implement feature X")
    cookie = acode("work", "task", "task-001", "--json").json()["cookie"]
    acode("wsession", "breadcrumb", "add", "--cookie", cookie, "--message", "found it")
    acode("work", "close", cookie)
    acode("sync", "--wait")
    sessions = {s["title"]: s["id"] for s in acode("session", "list", "--all", "--json").json()}
    assert set(sessions) == {"acode tasks", "task-001: Implement feature X"}
    for session_id in sessions.values():
        assert_mirrored(mirror, acode.workspace, session_id)
