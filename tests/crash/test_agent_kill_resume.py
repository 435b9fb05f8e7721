"""The agent loop killed with SIGKILL at seeded random moments and resumed until done.

The model is a scripted OpenAI-compatible server in its own process, logging every
request it receives, so the log outlives each killed acode. After every kill the test
notes which model calls acode had recorded as answered; none of them may ever reach the
server again. The workspace at the end must equal an uninterrupted run's, and no request
may carry an assistant tool call without its results.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from acode.agent.conversation import dangling_tool_calls
from acode.system.model_client import request_hash
from tests.agent.scenario import TASK, rules, start_repository
from tests.cli.conftest import ACODE, make_env
from tests.crash.harness import CASES, SEED
from tests.support.fake_openai import read_request_log

pytestmark = pytest.mark.crash

REPO = Path(__file__).resolve().parents[2]
# Each case costs a few seconds of model delays; a third of the plan-session cases.
AGENT_CASES = max(3, CASES // 3)
REPLY_DELAY = 0.15


@dataclass
class ModelServer:
    url: str
    log: Path
    proc: subprocess.Popen[str]


@pytest.fixture
def model_server(tmp_path: Path) -> Iterator[ModelServer]:
    script = tmp_path / "rules.json"
    script.write_text(json.dumps({"rules": rules(delay=REPLY_DELAY)}), encoding="utf-8")
    log = tmp_path / "requests.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.fake_openai",
            "--log",
            str(log),
            "--script",
            str(script),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline().split()[1])
    try:
        yield ModelServer(f"http://127.0.0.1:{port}/v1", log, proc)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _workspace(root: Path, server: ModelServer) -> Path:
    ws = root / "ws"
    ws.mkdir(parents=True)
    start_repository(ws)
    config = ws / ".agent" / "config.yml"
    config.parent.mkdir()
    config.write_text(f"model:\n  base_url: {server.url}\n  name: fake-model\n")
    return ws


def _files(ws: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(ws)): p.read_bytes()
        for p in sorted(ws.rglob("*"))
        if p.is_file() and p.relative_to(ws).parts[0] not in (".git", ".agent")
    }


def _start(ws: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [ACODE, *args, "--workspace", str(ws), "--json"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _acode_json(ws: Path, env: dict[str, str], *args: str) -> Any:
    done = subprocess.run(
        [ACODE, *args, "--workspace", str(ws), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _answered(ws: Path, env: dict[str, str]) -> set[str]:
    """The request hashes of the model calls recorded as answered, in every session."""
    hashes: set[str] = set()
    for session in _acode_json(ws, env, "session", "list", "--all"):
        for event in _acode_json(ws, env, "session", "history", session["id"]):
            payload = event["payload"]
            if event["type"] == "step_completed" and payload.get("kind") == "model":
                hashes.add(payload["result"]["request_hash"])
    return hashes


def _reference(tmp_path: Path, server: ModelServer, env: dict[str, str]) -> dict[str, bytes]:
    ws = _workspace(tmp_path / "reference", server)
    done = subprocess.run(
        [ACODE, "run", TASK, "--workspace", str(ws)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return _files(ws)


@pytest.mark.parametrize("case", range(AGENT_CASES), ids=lambda c: f"case-{c}")
def test_killed_anywhere_the_agent_resumes_to_the_same_workspace(
    case: int, tmp_path: Path, model_server: ModelServer
) -> None:
    env = make_env(tmp_path / "config")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    expected = _reference(tmp_path, model_server, env)
    reference_requests = len(read_request_log(model_server.log))
    model_server.log.write_text("")  # the case's own requests only
    ws = _workspace(tmp_path / "case", model_server)
    rng = random.Random(f"{SEED}-agent-{case}")
    kills = rng.randint(2, 3)
    # The whole conversation takes about six answers' delay plus acode's own work.
    span = REPLY_DELAY * reference_requests + 1.5
    checkpoints: list[tuple[int, set[str]]] = []
    started = False
    for _ in range(kills):
        args = ("resume", "--mode", "autopilot") if started else ("run", TASK)
        proc = _start(ws, env, *args)
        time.sleep(rng.uniform(0.05, span))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        started = started or bool(_acode_json(ws, env, "session", "list", "--all"))
        checkpoints.append((len(read_request_log(model_server.log)), _answered(ws, env)))
    for _ in range(3):  # a kill can land after the last step: nothing may be left to do
        if not started:
            proc = _start(ws, env, "run", TASK)
        else:
            proc = _start(ws, env, "resume", "--mode", "autopilot")
        _, err = proc.communicate(timeout=120)
        if proc.returncode == 0 or (started and proc.returncode in (14, 15)):
            break
        started = True
    else:
        raise AssertionError(f"the agent session never finished (seed {SEED}): {err}")

    context = f"seed {SEED}, case {case}, {kills} kills"
    assert _files(ws) == expected, context
    log = read_request_log(model_server.log)
    chats = [entry["body"] for entry in log if entry["path"].endswith("/chat/completions")]
    for body in chats:
        assert dangling_tool_calls(body["messages"]) == (), context
    for seen, answered in checkpoints:
        later = [e["body"] for e in log[seen:] if e["path"].endswith("/chat/completions")]
        resent = {request_hash(b) for b in later} & answered
        assert not resent, f"{context}: an answered model call was sent again"
    states = [s["state"] for s in _acode_json(ws, env, "session", "list", "--all")]
    assert states.count("COMPLETED") == 1, context
