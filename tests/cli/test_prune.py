"""`acode session prune` as a person runs it: at a terminal, from a script, with wrong
and hostile input; and what a pruned session's id answers afterwards."""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest

from acode.system.workspace import StatePaths
from tests.cli.conftest import ACODE, Cli, OpenTerminal, plan_yaml


def _run(acode: Cli, title: str, step: str, expect: int = 0) -> str:
    acode.write("plan.yml", plan_yaml(title, step))
    acode("run", "plan.yml", expect=expect)
    return str(acode.sessions()[0]["id"])


@pytest.fixture
def ended(acode: Cli) -> dict[str, str]:
    """A completed, a failed and a waiting (resumable) session."""
    return {
        "completed": _run(acode, "Greet", "{id: w, write: a.txt, content: hi}"),
        "failed": _run(acode, "Lint", '{id: lint, run: "false"}', expect=1),
        "waiting": _run(acode, "Needs ok", "{id: ok, approve: Go on?}", expect=20),
    }


def test_a_dry_run_lists_what_would_go_and_removes_nothing(
    acode: Cli, ended: dict[str, str]
) -> None:
    shown = acode("session", "prune", "--state", "completed", "--state", "failed", "--dry-run")
    assert "Would remove:" in shown.out
    assert ended["completed"][:13] in shown.out
    assert ended["failed"][:13] in shown.out
    assert ended["waiting"][:13] not in shown.out
    assert len(acode.sessions()) == 3
    data = acode("session", "prune", "--older-than", "1h", "--dry-run", "--json").json()
    assert data["removed"] == []
    assert data["dry_run"] is True


def test_json_reports_what_was_removed(acode: Cli, ended: dict[str, str]) -> None:
    data = acode("session", "prune", "--state", "FAILED", "--yes", "--json").json()
    (removed,) = data["removed"]
    assert removed["id"] == ended["failed"]
    assert removed["state"] == "failed"
    assert removed["events"] > 0
    assert data["totals"]["sessions"] == 1
    assert data["vacuum"] == {"converted": False, "error": None}
    assert {s["id"] for s in acode.sessions()} == {ended["completed"], ended["waiting"]}


def test_without_a_terminal_it_asks_for_yes(acode: Cli, ended: dict[str, str]) -> None:
    refused = acode("session", "prune", "--state", "completed", expect=2)
    assert "pass --yes" in refused.flat_err
    assert len(acode.sessions()) == 3


def test_at_a_terminal_it_asks_first(
    acode: Cli, ended: dict[str, str], terminal: OpenTerminal
) -> None:
    no = terminal("session", "prune", "--state", "completed")
    no.expect("Remove 1 session for good?")
    no.answer("n")
    assert "Nothing was removed" in no.finish(expect=0)
    assert len(acode.sessions()) == 3
    yes = terminal("session", "prune", "--state", "completed")
    yes.expect("Remove 1 session for good?")
    yes.answer("y")
    assert "Removed:" in yes.finish(expect=0)
    assert ended["completed"] not in {s["id"] for s in acode.sessions()}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--older-than", "30x"], "is not an age"),
        (["--older-than", "-5d"], "is not an age"),
        (["--older-than", "0d"], "is not an age"),
        (["--older-than", "99999999999d"], "is not an age"),
        (["--older-than", "30d\x1b[2J"], "is not an age"),
        (["--state", "paused"], "is not a state a prune removes"),
        (["--state", "../../etc"], "is not a state a prune removes"),
        ([], "no --older-than or --state was given"),
    ],
)
def test_wrong_input_is_a_usage_error(
    acode: Cli, ended: dict[str, str], args: list[str], said: str
) -> None:
    refused = acode("session", "prune", *args, "--dry-run", expect=2)
    assert said in refused.flat_err
    assert "Traceback" not in refused.err
    assert "\x1b[2J" not in refused.err
    assert len(acode.sessions()) == 3


def test_a_bad_retention_setting_names_its_key(acode: Cli, ended: dict[str, str]) -> None:
    acode.write(".agent/config.yml", "retention:\n  completed_days: 0\n  max_state_bytes: 2GiB\n")
    refused = acode("session", "prune", "--dry-run", expect=2)
    assert "ACODE-CONFIG-001" in refused.flat_err
    assert "retention.completed_days" in refused.flat_err
    assert "retention.max_state_bytes" in refused.flat_err


def test_the_retention_settings_apply_without_flags(acode: Cli, ended: dict[str, str]) -> None:
    acode.write(".agent/config.yml", "retention:\n  max_state_bytes: 1\n")
    over = acode("session", "prune", "--yes", expect=1)  # only a resumable session is left
    assert "stays over retention.max_state_bytes" in over.flat_out
    assert [s["id"] for s in acode.sessions()] == [ended["waiting"]]
    doctor = acode("doctor", "--json", expect=1).json()
    (size,) = [c for c in doctor["checks"] if c["name"] == "state size"]
    assert size["status"] == "fail"
    assert "acode session prune" in size["fix"]


def test_a_pruned_session_says_so(acode: Cli, ended: dict[str, str]) -> None:
    gone = ended["completed"]
    acode("session", "prune", "--state", "completed", "--yes")
    for args, code in ((["resume", gone], 14), (["session", "show", gone[:13]], 1)):
        said = acode(*args, expect=code)
        assert "ACODE-SESSION-003" in said.flat_err, said.describe()
        assert f"session {gone[:13]} was pruned on" in said.flat_err
    dry = acode("resume", gone, "--dry-run", expect=14)
    assert "was pruned on" in dry.flat_err


def test_a_forged_prune_record_is_reported_as_tampering(acode: Cli, ended: dict[str, str]) -> None:
    gone = ended["completed"]
    acode("session", "prune", "--state", "completed", "--yes")
    with closing(sqlite3.connect(StatePaths(acode.workspace).db)) as conn:
        conn.execute("UPDATE pruned_sessions SET pruned_at = pruned_at - 1")
        conn.commit()
    refused = acode("session", "show", gone, expect=1)
    assert "ACODE-CKPT-002" in refused.flat_err
    assert "not signed with your key" in refused.flat_err


def test_the_state_size_check_passes_within_the_limit(acode: Cli, ended: dict[str, str]) -> None:
    acode.write(".agent/config.yml", "retention:\n  max_state_bytes: 1000000000\n")
    doctor = acode("doctor", "--json", expect=None).json()
    (size,) = [c for c in doctor["checks"] if c["name"] == "state size"]
    assert size["status"] == "ok"
    assert "within retention.max_state_bytes" in size["detail"]


def test_a_workspace_without_sessions(acode: Cli, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = acode("session", "prune", "--older-than", "30d", "-w", str(empty), expect=1)
    assert "no acode sessions" in refused.flat_err
    assert not (empty / ".agent").exists()


def test_a_vacuum_without_room_leaves_the_prune_standing(acode: Cli) -> None:
    """A database from before schema 8 is converted by a VACUUM at its first prune, which
    needs room for a copy of the database. Under a file size limit (EFBIG, as on a full
    disk) it fails: the sessions stay pruned and the output says why the space was not
    given back."""
    acode.write("big.txt", os.urandom(600_000).hex())
    acode.write("plan.yml", plan_yaml("Keeps", "{id: r, read: big.txt}", "{id: ok, approve: Go?}"))
    acode("run", "plan.yml", expect=20)  # resumable: it stays, and its image with it
    gone = _run(acode, "Greet", "{id: w, write: a.txt, content: hi}")
    db = StatePaths(acode.workspace).db
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("PRAGMA auto_vacuum = NONE")
        conn.execute("VACUUM")
    limit = int(db.stat().st_size * 0.8)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run(
        [ACODE, "session", "prune", "--state", "completed", "--yes", "--json"],
        cwd=acode.workspace,
        env=acode.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=limited,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [r["id"] for r in report["removed"]] == [gone]
    assert report["vacuum"]["converted"] is False
    assert report["vacuum"]["error"]
    assert gone not in {s["id"] for s in acode.sessions()}
    said = acode("session", "show", gone, expect=1)
    assert "ACODE-SESSION-003" in said.flat_err
