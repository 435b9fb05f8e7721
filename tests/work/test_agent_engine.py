"""A work session whose engine is acode's own agent loop, over a scripted model server:
the engine records a breadcrumb with its cookie from inside its turn, and a resume of a
finished agent session falls back to a new one whose prompt rebuilds the context."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Background, Cli
from tests.support.fake_openai import FakeOpenAI

PLAN: dict[str, Any] = {"tasks": [{"title": "Look around", "steps": [{"title": "note it"}]}]}
RECORD = (
    'acode wsession breadcrumb add --cookie "$ACODE_WORK_COOKIE" '
    "--message 'component Y has validate()'"
)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        server.converse(
            [
                {
                    "tool": "submit_plan",
                    "replies": [{"tool_calls": [{"name": "submit_plan", "arguments": PLAN}]}],
                },
                {
                    "match": "Now do task t1:",
                    "replies": [
                        {"tool_calls": [{"name": "run_command", "arguments": {"command": RECORD}}]},
                        "Noted.",
                    ],
                },
            ]
        )
        yield server


@pytest.fixture
def work(workspace: Path, cli_env: dict[str, str], background: Background, fake: FakeOpenAI) -> Cli:
    acode = Cli(workspace, cli_env, background)
    acode.write(".agent/config.yml", f"model:\n  base_url: {fake.base_url}\n  name: fake-model\n")
    acode("task", "add", "Investigate component Y")
    return acode


def test_the_agent_engine_records_breadcrumbs_with_its_cookie(work: Cli, fake: FakeOpenAI) -> None:
    started = work("work", "task", "task-001", "--engine", "agent", "--json", timeout=60).json()
    [turn] = started["turns"]
    assert turn["how"] == "new"
    assert turn["ok"], turn
    agent_session = turn["session_id"]
    assert any(s["id"] == agent_session for s in work.sessions())
    shown = work("work", "show", started["cookie"], "--json").json()
    assert [b["message"] for b in shown["breadcrumbs"]] == ["component Y has validate()"]
    assert shown["breadcrumbs"][0]["id"] == "bc-001"
    assert shown["ai_session_id"] == agent_session
    prompt = fake.chat_requests[0]["body"]["messages"][1]["content"]
    assert started["cookie"] in prompt


def test_a_finished_agent_session_is_rebuilt_on_resume(work: Cli, fake: FakeOpenAI) -> None:
    started = work("work", "task", "task-001", "--engine", "agent", "--json", timeout=60).json()
    first = started["turns"][0]["session_id"]
    resumed = work("work", "resume", started["cookie"], timeout=60)
    assert "Attempting resume... FAILED" in resumed.out
    assert "context rebuilt" in resumed.out
    shown = work("work", "show", started["cookie"], "--json").json()
    hows = [e["how"] for e in shown["engine_sessions"]]
    assert hows == ["new", "rebuilt"]
    assert shown["ai_session_id"] not in (None, first)
    rebuilt = [
        r["body"]["messages"][1]["content"]
        for r in fake.chat_requests
        if "no longer available" in r["body"]["messages"][1]["content"]
    ]
    assert rebuilt
    assert "bc-001 [note] component Y has validate()" in rebuilt[0]
