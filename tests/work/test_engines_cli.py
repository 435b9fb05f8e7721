"""Outcomes A and C of the work-session runbook (docs/requirements.md) through the
`acode` command, with each REAL engine CLI (Claude Code, Codex, Aider) talking to a test
server of its own protocol on 127.0.0.1: the server's log shows what each engine really
sent."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Background, Cli
from tests.support.engine_servers import EngineServer, conversation
from tests.support.engines import engine_env, require_engine, without_foreign

REAL = ("claude", "codex", "aider")


@pytest.fixture
def server() -> Iterator[EngineServer]:
    with EngineServer() as running:
        yield running


def _work(name: str, tmp_path: Path, workspace: Path, cli_env: dict[str, str],
          background: Background, server: EngineServer) -> Cli:  # fmt: skip
    path = require_engine(name)
    env = {**without_foreign(cli_env), **engine_env(name, server.base_url, tmp_path / "home")}
    acode = Cli(workspace, env, background)
    acode.write(
        ".agent/config.yml",
        f"engines:\n  {name}: {{command: {path}, timeout_seconds: 120}}\nwork_engine: {name}\n",
    )
    acode("task", "add", "Implement feature X")
    return acode


def _texts(server: EngineServer) -> list[str]:
    """Everything said in the newest model request."""
    return [m.text for m in conversation(server.model_requests()[-1])]


def _forget(name: str, home: Path, workspace: Path, wsession: str) -> None:
    """What an expired engine session looks like: the engine's own record of it is gone."""
    if name == "claude":
        shutil.rmtree(home / ".claude" / "projects")
    elif name == "codex":
        shutil.rmtree(home / ".codex" / "sessions")
    else:
        (workspace / ".agent/state/work" / wsession / "aider.chat.history.md").unlink()


def _turns(result: Any) -> list[tuple[str, bool]]:
    return [(t["how"], t["ok"]) for t in result["turns"]]


@pytest.mark.parametrize("name", REAL)
def test_outcome_a_resume_hits_the_same_engine_session(
    name: str, tmp_path: Path, workspace: Path, cli_env: dict[str, str],
    background: Background, server: EngineServer,
) -> None:  # fmt: skip
    acode = _work(name, tmp_path, workspace, cli_env, background, server)
    started = acode("work", "task", "task-001", "--json", timeout=180).json()
    cookie = started["cookie"]
    assert _turns(started) == [("new", True)]
    engine_id = started["turns"][0]["session_id"]
    assert (engine_id is None) == (name == "aider")
    assert any(cookie in text for text in _texts(server))  # the prompt carried the cookie

    sub = acode(
        "work", "spawn", "--from-task", "task-001", "--title", "Investigate component Y",
        "--json", timeout=180,
    ).json()  # fmt: skip
    assert _turns(sub) == [("new", True)]
    if name != "aider":
        assert sub["turns"][0]["session_id"] != engine_id  # its own engine session
    acode("task", "done", "task-002", "--summary", "Y has validate, sanitize, transform")

    resumed = acode("work", "resume", cookie, "--json", timeout=180).json()
    assert _turns(resumed) == [("resumed", True)]
    assert resumed["turns"][0]["session_id"] == engine_id
    said = _texts(server)
    assert any("You are starting work on task task-001" in t for t in said)  # earlier turn
    assert any("Y has validate, sanitize, transform" in t for t in said)  # subtask summary
    shown = acode("work", "show", cookie, "--json").json()
    assert [e["how"] for e in shown["engine_sessions"]] == ["new", "resumed"]


@pytest.mark.parametrize("name", REAL)
def test_outcome_c_a_forgotten_engine_session_is_rebuilt(
    name: str, tmp_path: Path, workspace: Path, cli_env: dict[str, str],
    background: Background, server: EngineServer,
) -> None:  # fmt: skip
    acode = _work(name, tmp_path, workspace, cli_env, background, server)
    started = acode("work", "task", "task-001", "--json", timeout=180).json()
    cookie = started["cookie"]
    first = started["turns"][0]["session_id"]
    acode("wsession", "breadcrumb", "add", "--cookie", cookie, "--message", "X needs Y first")
    _forget(name, tmp_path / "home", workspace, cookie)

    resumed = acode("work", "resume", cookie, timeout=180)
    assert "Attempting resume... FAILED" in resumed.out
    assert "context rebuilt from the record" in resumed.out
    said = _texts(server)
    assert any("no longer available" in t and "X needs Y first" in t for t in said)
    shown = acode("work", "show", cookie, "--json").json()
    assert [e["how"] for e in shown["engine_sessions"]] == ["new", "rebuilt"]
    assert shown["id"] == cookie  # the cookie is unchanged
    if name != "aider":
        assert shown["ai_session_id"] not in (None, first)
    again = acode("work", "resume", cookie, "--json", timeout=180).json()
    assert _turns(again) == [("resumed", True)]  # the rebuilt session is the one resumed now
