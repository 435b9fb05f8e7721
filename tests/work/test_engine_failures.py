"""A work command refused for bad input writes nothing at all; one whose engine fails at
its first call keeps its work session, and the error names the `acode work resume` that
retries it. Driven through the real `acode` with the `command` engine: small real
programs, run as a person configures them."""

from __future__ import annotations

import hashlib
import re
import shlex
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Background, Cli, Result

# An engine that fails while its "server" is down (a file says so), and answers otherwise.
ENGINE = """\
import os, sys
if os.path.exists(os.environ["ENGINE_DOWN"]):
    print("cannot reach the model server at 127.0.0.1:9", file=sys.stderr)
    sys.exit(3)
print("done: " + sys.argv[1].splitlines()[0])
"""


@pytest.fixture
def work(workspace: Path, cli_env: dict[str, str], background: Background, tmp_path: Path) -> Cli:
    down = tmp_path / "engine-down"
    acode = Cli(workspace, {**cli_env, "ENGINE_DOWN": str(down)}, background)
    acode("task", "add", "Implement feature X")
    return acode


def _engine(tmp_path: Path) -> str:
    """The `engines.command.command` template of the engine above."""
    script = tmp_path / "engine.py"
    script.write_text(ENGINE, encoding="utf-8")
    return f"{sys.executable} {script} {{prompt}}"


def _use(acode: Cli, template: str | None) -> None:
    text = "" if template is None else f"engines:\n  command: {{command: '{template}'}}\n"
    acode.write(".agent/config.yml", text)


def _everything(workspace: Path) -> dict[str, Any]:
    """What a command could have written: every row of the record, every file but the
    database's own, with its content."""
    db = workspace / ".agent/state/acode.db"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("sessions", "events", "steps")
        }
    conn.close()
    files = {
        str(path.relative_to(workspace)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(workspace.rglob("*"))
        if path.is_file() and ".agent/state" not in str(path.relative_to(workspace))
    }
    return {"rows": rows, "files": files}


def _pasted(result: Result) -> list[str]:
    """The command the hint ends with, as a person pastes it (without `acode`)."""
    found = re.search(r"hint: .*?\b(acode work .*)$", result.flat_err)
    assert found, result.describe()
    return shlex.split(found.group(1))[1:]


def _turns(data: Any) -> list[tuple[str, bool]]:
    return [(t["how"], t["ok"]) for t in data["turns"]]


BAD_TEMPLATES = {
    "no command configured": None,
    "a command line a shell cannot read": 'my-agent --ask "{prompt}',
}


@pytest.mark.parametrize("template", BAD_TEMPLATES.values(), ids=list(BAD_TEMPLATES))
def test_work_task_with_a_misconfigured_engine_writes_nothing(
    work: Cli, template: str | None
) -> None:
    _use(work, template)
    before = _everything(work.workspace)

    refused = work("work", "task", "task-001", "--engine", "command", expect=2)

    assert _everything(work.workspace) == before
    assert not (work.workspace / "docs/acode/work_sessions").exists()
    assert work("work", "list", "--json").json() == []
    assert refused.flat_err.startswith("error ACODE-CONFIG-001: engines.command.command")
    assert "nothing was written" in refused.flat_err
    assert _pasted(refused) == ["work", "task", "task-001", "--engine", "command"]


@pytest.mark.parametrize("template", BAD_TEMPLATES.values(), ids=list(BAD_TEMPLATES))
def test_spawn_and_resume_with_a_misconfigured_engine_write_nothing(
    work: Cli, template: str | None
) -> None:
    # Hands-off mode runs no engine: the parent is recorded without one configured.
    work("settings", "set", "ai_stacking_mode", "handsoff")
    parent = work("work", "task", "task-001", "--engine", "command", "--json").json()["cookie"]
    work("settings", "set", "ai_stacking_mode", "managed")
    _use(work, template)
    before = _everything(work.workspace)

    spawn = work("work", "spawn", "--from-task", "task-001", "--title", "Look at Y", expect=2)
    resume = work("work", "resume", parent, expect=2)

    assert _everything(work.workspace) == before  # no task-002, no turn, no document change
    for refused in (spawn, resume):
        assert refused.flat_err.startswith("error ACODE-CONFIG-001: engines.command.command")
        assert "nothing was written" in refused.flat_err
    assert _pasted(spawn) == ["work", "spawn", "--from-task", "task-001", "--title", "Look at Y"]
    assert _pasted(resume) == ["work", "resume", parent]


def test_an_unknown_engine_writes_nothing_and_points_at_the_help(work: Cli) -> None:
    before = _everything(work.workspace)

    refused = work("work", "task", "task-001", "--engine", "gpt", expect=2)

    assert refused.flat_err.startswith("error ACODE-USAGE-001: --engine gpt: unknown engine")
    assert _pasted(refused) == ["work", "task", "--help"]
    work(*_pasted(refused))  # the hint works as given
    assert _everything(work.workspace) == before


def test_an_engine_that_fails_its_first_call_keeps_a_session_that_resume_retries(
    work: Cli, tmp_path: Path
) -> None:
    _use(work, _engine(tmp_path))
    down = Path(work.env["ENGINE_DOWN"])
    down.touch()

    failed = work("work", "task", "task-001", "--engine", "command", "--json", expect=1)

    started = failed.json()
    cookie = started["cookie"]
    assert _turns(started) == [("new", False)]
    assert failed.flat_err.startswith(
        "error ACODE-STEP-001: the engine failed: command failed (exit 3): "
    )
    assert "cannot reach the model server" in failed.flat_err
    assert f"work session {cookie} is kept" in failed.flat_err
    assert _pasted(failed) == ["work", "resume", cookie]
    [kept] = work("work", "list", "--json").json()
    assert (kept["id"], kept["status"], kept["engine_sessions"]) == (cookie, "active", [])
    assert (work.workspace / f"docs/acode/work_sessions/{cookie}.json").exists()

    down.unlink()  # the engine's server is back
    retried = work(*_pasted(failed), "--json").json()

    assert _turns(retried) == [("rebuilt", True)]
    assert retried["turns"][0]["text"].startswith("done: You are continuing work on task task-001")
    shown = work("work", "show", cookie, "--json").json()
    assert [e["how"] for e in shown["engine_sessions"]] == ["rebuilt"]


def test_an_engine_that_fails_again_on_resume_says_so_the_same_way(
    work: Cli, tmp_path: Path
) -> None:
    _use(work, _engine(tmp_path))
    Path(work.env["ENGINE_DOWN"]).touch()
    cookie = work("work", "task", "task-001", "--engine", "command", "--json", expect=1).json()[
        "cookie"
    ]

    again = work("work", "resume", cookie, expect=1)

    assert "error ACODE-STEP-001: the engine failed: command failed (exit 3)" in again.flat_err
    assert _pasted(again) == ["work", "resume", cookie]


def test_an_engine_that_cannot_be_started_keeps_a_session_that_resume_retries(
    work: Cli, tmp_path: Path
) -> None:
    # Executable, but no program: exec refuses it (no #! line), as it does a script
    # written on Windows or a binary built for another machine.
    broken = tmp_path / "engine-bin"
    broken.write_text("print('never runs')\n", encoding="utf-8")
    broken.chmod(0o755)
    _use(work, f"{broken} {{prompt}}")

    failed = work("work", "task", "task-001", "--engine", "command", "--json", expect=1)

    cookie = failed.json()["cookie"]
    assert "could not be started" in failed.flat_err
    assert "Exec format error" in failed.flat_err
    assert f"work session {cookie} is kept" in failed.flat_err
    assert _pasted(failed) == ["work", "resume", cookie]
    _use(work, _engine(tmp_path))
    assert _turns(work(*_pasted(failed), "--json").json()) == [("rebuilt", True)]


def test_an_engine_not_installed_keeps_a_session_that_resume_retries(
    work: Cli, tmp_path: Path
) -> None:
    _use(work, "no-such-agent-here --ask {prompt}")

    failed = work("work", "task", "task-001", "--engine", "command", expect=17)

    assert failed.flat_err.startswith("error ACODE-RESUME-004: engine 'command': the command")
    [kept] = work("work", "list", "--json").json()
    assert f"work session {kept['id']} is kept" in failed.flat_err
    assert "set engines.command.command in .agent/config.yml to its path" in failed.flat_err
    assert _pasted(failed) == ["work", "resume", kept["id"]]
    _use(work, _engine(tmp_path))
    assert _turns(work(*_pasted(failed), "--json").json()) == [("rebuilt", True)]


def test_the_engines_are_named_once_and_taken_alike_everywhere() -> None:
    """``acode.domain.config`` names the engines: the configuration file takes an
    ``engines.<name>`` entry for each CLI among them, the work layer runs each, and
    "agent" (acode's own loop) is neither."""
    from acode.domain.config import ENGINE_CLIS, ENGINE_NAMES, EngineConfig, parse_config
    from acode.errors import ConfigError, UsageError
    from acode.work.engines import check_settings

    assert "agent" in ENGINE_NAMES
    configured = parse_config({"engines": {n: {"command": "x"} for n in ENGINE_CLIS}}, "f")
    assert sorted(configured.engines) == sorted(ENGINE_CLIS)
    for name in ENGINE_CLIS:
        check_settings(name, configured.engines[name])
    with pytest.raises(UsageError):
        check_settings("agent", EngineConfig("x"))
    with pytest.raises(ConfigError, match=r"engines\.agent: unknown key"):
        parse_config({"engines": {"agent": {"command": "x"}}}, "f")
