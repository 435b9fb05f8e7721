"""`acode run "task"`, `acode resume` and `acode status` of agent sessions, run as a person
runs them."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.scenario import TASK, VALIDATE_PY, expected_login, rules, start_repository
from tests.cli.conftest import Background, Cli, wait_for
from tests.support.busy_model import MODEL as BUSY_MODEL
from tests.support.busy_model import BusyModelServer
from tests.support.fake_openai import FakeOpenAI


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def agent_cli(workspace: Path, cli_env: dict[str, str], background: Background) -> Cli:
    start_repository(workspace)
    return Cli(workspace, cli_env, background)


def _configure(acode: Cli, fake: FakeOpenAI, extra: str = "") -> None:
    acode.write(
        ".agent/config.yml",
        f"model:\n  base_url: {fake.base_url}\n  name: fake-model\n{extra}",
    )


def test_run_a_task_then_status_shows_tokens_and_cost(agent_cli: Cli, fake: FakeOpenAI) -> None:
    acode = agent_cli
    fake.converse(rules())
    _configure(acode, fake, "pricing:\n  fake-model: {input: 3, output: 15}\n")
    result = acode("run", TASK)
    assert "Plan (2 tasks):" in result.out
    assert "1. Write the validator" in result.out
    assert "completed" in result.out
    assert (acode.workspace / "src/validate.py").read_text() == VALIDATE_PY
    assert (acode.workspace / "src/login.py").read_text() == expected_login()
    [session] = acode.sessions()
    status = acode.status(session["id"])
    assert status["state"] == "COMPLETED"
    assert status["usage"]["calls"] == 6
    assert status["usage"]["cost_usd"] > 0
    text = acode("status").out
    assert "Model:   6 calls" in text
    assert "$" in text


def test_a_long_task_of_many_lines_is_a_task(agent_cli: Cli, fake: FakeOpenAI) -> None:
    fake.converse(rules())
    _configure(agent_cli, fake)
    long_task = TASK + "\n" + "Keep the public API unchanged. " * 20
    lines = agent_cli("run", long_task, "--json").json_lines()
    assert lines[0]["task"] == long_task
    assert lines[-1]["exit_code"] == 0


def test_json_output_carries_the_plan_and_the_end(agent_cli: Cli, fake: FakeOpenAI) -> None:
    fake.converse(rules())
    _configure(agent_cli, fake)
    lines = agent_cli("run", TASK, "--json").json_lines()
    assert lines[0]["event"] == "started"
    assert lines[0]["task"] == TASK
    assert any(line.get("event") == "plan" and len(line["tasks"]) == 2 for line in lines)
    assert lines[-1]["event"] == "session"
    assert lines[-1]["exit_code"] == 0


def test_a_missing_model_or_server_is_refused_before_anything_runs(
    agent_cli: Cli, fake: FakeOpenAI
) -> None:
    _configure(agent_cli, fake)
    missing = agent_cli("run", TASK, "--model", "qwen9", expect=17)
    assert "'qwen9' is not served" in missing.flat_err
    assert "ollama pull qwen9" in missing.flat_err
    down = agent_cli("run", TASK, "--base-url", "http://127.0.0.1:9/v1", expect=17)
    assert "cannot reach the model server" in down.flat_err
    assert "model.base_url" in down.flat_err
    assert not agent_cli.sessions()
    assert fake.chat_requests == []


def test_a_run_that_finds_the_model_busy_stops_and_says_to_wait(agent_cli: Cli) -> None:
    """A server that takes the connection and says nothing within the check is not
    known to work: nothing is started, and the hint says what to wait for."""
    with BusyModelServer() as server:
        agent_cli.write(
            ".agent/config.yml",
            f"model:\n  base_url: {server.base_url}\n  name: {BUSY_MODEL}\n"
            "resume:\n  validation_timeout_seconds: 0.5\nagent:\n  plan_attempts: 1\n",
        )
        server.busy()
        refused = agent_cli("run", TASK, expect=17)
    assert server.seen == ["GET /v1/models"]
    assert refused.flat_err.startswith(
        f"error ACODE-RESUME-004: cannot start: the model server at {server.base_url} "
        "accepted the connection but did not answer within 0.5 s"
    )
    wait = f"wait until it answers (`curl -s {server.base_url}/models`), then run the command again"
    assert wait in refused.flat_err
    assert not agent_cli.sessions()


def test_bad_arguments_name_what_to_fix(agent_cli: Cli, fake: FakeOpenAI) -> None:
    _configure(agent_cli, fake)
    assert "plan file not found: plan.yaml" in agent_cli("run", "plan.yaml", expect=2).flat_err
    assert "PLAN_OR_TASK is empty" in agent_cli("run", "  ", expect=2).flat_err
    agent_cli.write("p.yaml", "title: t\ntasks: []\n")
    flags = agent_cli("run", "p.yaml", "--model", "x", expect=2).flat_err
    assert "--model: only for a task" in flags
    bad = agent_cli("run", TASK, "--max-turns", "0", expect=2).flat_err
    assert "--max-turns: agent.max_turns: expected a positive whole number, got 0" in bad
    url = agent_cli("run", TASK, "--base-url", "localhost:1234", expect=2).flat_err
    assert "--base-url: model.base_url: expected an http:// or https:// URL" in url


def test_the_plan_waits_for_approval_without_a_terminal(agent_cli: Cli, fake: FakeOpenAI) -> None:
    fake.converse(rules())
    _configure(agent_cli, fake)
    waiting = agent_cli("run", TASK, "--approve-plan", expect=20)
    assert "acode approve" in waiting.flat_out + waiting.flat_err
    [session] = agent_cli.sessions()
    agent_cli("approve", session["id"])
    agent_cli("resume", session["id"])
    assert (agent_cli.workspace / "src/login.py").read_text() == expected_login()
    assert len(fake.chat_requests) == 6  # the plan was asked for once


def test_ctrl_c_pauses_and_resume_continues_the_conversation(
    agent_cli: Cli, fake: FakeOpenAI
) -> None:
    fake.converse(rules(delay=0.3))
    _configure(agent_cli, fake)
    running = agent_cli.start("run", TASK)
    wait_for("3 model requests", lambda: len(fake.chat_requests) >= 3, timeout=20)
    running.proc.send_signal(signal.SIGINT)
    paused = agent_cli.finish(running, expect=130)
    assert "acode resume" in paused.flat_out + paused.flat_err
    answered = len(fake.chat_requests)
    time.sleep(0.1)
    resumed = agent_cli("resume", timeout=60)
    assert "Task: " + TASK in resumed.out
    assert (agent_cli.workspace / "src/login.py").read_text() == expected_login()
    bodies = [r["body"] for r in fake.chat_requests]
    hashes = [str(b["messages"]) for b in bodies]
    # Only the request that Ctrl+C cut off may have been sent twice.
    assert len(hashes) - len(set(hashes)) <= 1
    assert len(set(hashes)) == 6
    assert answered <= len(bodies)


def test_resume_of_an_agent_session_needs_its_model(agent_cli: Cli, fake: FakeOpenAI) -> None:
    fake.converse(rules(delay=0.3))
    _configure(agent_cli, fake)
    running = agent_cli.start("run", TASK)
    wait_for("2 model requests", lambda: len(fake.chat_requests) >= 2, timeout=20)
    running.proc.send_signal(signal.SIGINT)
    agent_cli.finish(running, expect=130)
    fake.models = ["other-model"]
    refused = agent_cli("resume", expect=17)
    assert "fake-model" in refused.flat_out + refused.flat_err
