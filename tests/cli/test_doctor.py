"""`acode doctor` as a person runs it: a healthy workspace passes, and each fault of a
broken set-up is named with its fix, in the table and in JSON."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Cli, plan_yaml
from tests.cli.test_resume_busy_model import silent  # noqa: F401  (the fixture)


@pytest.fixture
def healthy(acode: Cli) -> Cli:
    """A git work tree with one completed session."""
    subprocess.run(["git", "init", "-q", str(acode.workspace)], check=True)
    acode.write("a.txt", "a\n")
    acode.write("plan.yml", plan_yaml("One", "{id: a, read: a.txt}"))
    acode("run", "plan.yml", "--json")
    return acode


def _checks(acode: Cli, *, expect: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    report = acode("doctor", "--json", expect=expect, env=env).json()
    assert report["ok"] is (expect == 0)
    return {c["name"]: c for c in report["checks"]}


def test_a_healthy_workspace_passes(healthy: Cli) -> None:
    checks = _checks(healthy, expect=0)
    for name in ("python", "sqlite", "key", "state dir", "locks dir", "database", "git"):
        assert checks[name]["status"] == "ok", checks[name]
    assert "schema version" in checks["database"]["detail"]
    assert checks["model"]["status"] == "skip"  # none configured
    assert checks["remote"]["status"] == "skip"
    assert int(checks["state size"]["detail"].split()[0].replace(",", "")) > 0
    table = healthy("doctor", env={**healthy.env, "COLUMNS": "80"}).out
    assert all(len(line.rstrip()) <= 80 for line in table.splitlines())
    assert table.splitlines()[0].split() == ["STATUS", "CHECK", "DETAIL"]


def test_an_empty_directory_has_no_sessions_yet_and_creates_nothing(acode: Cli) -> None:
    checks = _checks(acode, expect=0)
    assert checks["database"] == {
        "name": "database",
        "status": "ok",
        "detail": "no sessions yet",
        "fix": None,
    }
    assert checks["git"]["status"] == "warn"  # a warning does not fail
    assert checks["git"]["fix"] == f"git -C {acode.workspace} init"
    assert list(acode.workspace.iterdir()) == []


def test_a_key_file_readable_by_others_fails_with_chmod(healthy: Cli, tmp_path: Path) -> None:
    config = tmp_path / "config"
    key = config / "acode" / "checkpoint.key"
    key.parent.mkdir(parents=True)
    key.write_bytes(os.urandom(32))
    key.chmod(0o644)
    env = {k: v for k, v in healthy.env.items() if k != "ACODE_CHECKPOINT_SECRET"}
    env["XDG_CONFIG_HOME"] = str(config)
    checks = _checks(healthy, expect=1, env=env)
    assert checks["key"]["status"] == "fail"
    assert "mode 0644" in checks["key"]["detail"]
    subprocess.run(checks["key"]["fix"], shell=True, check=True)
    assert _checks(healthy, expect=0, env=env)["key"]["status"] == "ok"
    key.unlink()  # sessions here, and no key to verify them
    assert _checks(healthy, expect=1, env=env)["key"]["status"] == "fail"


def test_a_state_dir_writable_by_others_fails_with_its_fix(healthy: Cli) -> None:
    state = healthy.workspace / ".agent" / "state"
    state.chmod(0o777)
    checks = _checks(healthy, expect=1)
    assert checks["state dir"]["status"] == "fail"
    assert "writable by others (mode 0777)" in checks["state dir"]["detail"]
    assert f"chmod go-w {state}" in checks["state dir"]["fix"]
    out = healthy("doctor", expect=1, env={**healthy.env, "COLUMNS": "80"}).out
    assert "fail    state dir" in out


def test_a_corrupted_database_fails_and_is_left_as_it_was(healthy: Cli) -> None:
    db = healthy.workspace / ".agent" / "state" / "acode.db"
    for extra in ("-wal", "-shm"):
        Path(f"{db}{extra}").unlink(missing_ok=True)
    garbage = b"this is not a database" * 300
    db.write_bytes(garbage)
    checks = _checks(healthy, expect=1)
    assert checks["database"]["status"] == "fail"
    assert "cannot be read" in checks["database"]["detail"]
    assert checks["database"]["fix"].startswith(f"mv {db} {db}.broken")
    assert db.read_bytes() == garbage


def test_a_damaged_page_is_found_by_quick_check(healthy: Cli) -> None:
    db = healthy.workspace / ".agent" / "state" / "acode.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = 'events'"
        ).fetchone()[0]
    with db.open("r+b") as f:  # the events table's root page: its header overwritten
        f.seek((root - 1) * page)
        f.write(b"\xff" * 64)
    checks = _checks(healthy, expect=1)
    assert checks["database"]["status"] == "fail", checks["database"]


def test_a_schema_from_the_future_fails_with_the_upgrade_hint(healthy: Cli) -> None:
    db = healthy.workspace / ".agent" / "state" / "acode.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 9999")
    checks = _checks(healthy, expect=1)
    assert checks["database"]["status"] == "fail"
    assert "schema version 9999, newer than this acode's" in checks["database"]["detail"]
    assert checks["database"]["fix"] == "python3 -m pip install -U acode"


def test_a_model_server_that_never_answers_fails_in_bounded_time(
    healthy: Cli,
    silent: Any,  # noqa: F811
) -> None:
    healthy.write(
        ".agent/config.yml",
        f"model:\n  base_url: {silent.base_url}\n  name: m\n"
        "resume:\n  validation_timeout_seconds: 0.5\n",
    )
    checks = _checks(healthy, expect=1)
    assert checks["model"]["status"] == "fail"
    assert "accepted the connection but did not answer" in checks["model"]["detail"]
    assert f"curl -s {silent.base_url}/models" in checks["model"]["fix"]


def test_git_missing_from_path_is_a_warning(healthy: Cli, tmp_path: Path) -> None:
    bare = tmp_path / "bin"  # PATH without git
    bare.mkdir()
    checks = _checks(healthy, expect=0, env={**healthy.env, "PATH": str(bare)})
    assert checks["git"]["status"] == "warn"
    assert "git is not on PATH" in checks["git"]["detail"]


def test_an_engine_cli_is_found_with_its_version(healthy: Cli, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text("#!/bin/sh\necho '1.2.3 (Claude Code)'\n")
    fake.chmod(0o755)
    env = {**healthy.env, "PATH": f"{bin_dir}{os.pathsep}{healthy.env['PATH']}"}
    checks = _checks(healthy, expect=0, env=env)
    assert checks["engine claude"]["status"] == "ok"
    assert checks["engine claude"]["detail"] == f"1.2.3 (Claude Code) ({fake})"


def test_a_broken_config_fails_and_skips_what_needs_it(healthy: Cli) -> None:
    healthy.write(".agent/config.yml", "model: [unclosed\n")
    checks = _checks(healthy, expect=1)
    assert checks["config"]["status"] == "fail"
    assert checks["model"]["status"] == "skip"
