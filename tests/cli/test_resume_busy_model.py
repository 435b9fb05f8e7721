"""`acode resume` against a model server that takes the connection and says nothing: a
raw socket that accepts and never answers, and a busy one, as llama.cpp's server is
while it finishes a request a killed client left. Validation has one deadline
(resume.validation_timeout_seconds) with the model probe in it; a silent server is a
problem (exit 17, with what to do), never a pass, and a resume once the server answers
again goes on."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.cli.conftest import Cli, plan_yaml
from tests.support.busy_model import MODEL, BusyModelServer

WAITING = re.compile(r"Session (\S+) is waiting for approval")
SILENT = re.compile(
    r"the model server at (\S+) accepted the connection but did not answer within [\d.]+ s"
)


class _Silent:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed: the test is over
                return
            self.held.append(conn)


@pytest.fixture
def silent() -> Iterator[_Silent]:
    server = _Silent()
    server.thread.start()
    try:
        yield server
    finally:
        server.listener.close()
        for conn in server.held:
            conn.close()
        server.thread.join(5)


def _stopped_before_the_model(acode: Cli, base_url: str) -> str:
    """A session stopped at an approval, its model step still to run; the short id."""
    acode.write(".agent/config.yml", f"model:\n  base_url: {base_url}\n  name: {MODEL}\n")
    acode.write(
        "plan.yml", plan_yaml("Ask", "{id: ok, approve: Go on?}", "{id: ask, model: Say hi.}")
    )
    found = WAITING.search(acode("run", "plan.yml", expect=20).flat_err)
    assert found
    acode("approve", found.group(1))
    return found.group(1)


def test_a_silent_server_fails_the_model_check(acode: Cli, silent: _Silent) -> None:
    short = _stopped_before_the_model(acode, silent.base_url)
    before = acode.status(short)

    dry, as_json = acode.many([["resume", "--dry-run"], ["resume", "--dry-run", "--json"]])
    # One after the other: a resume holds the session's lock while it validates.
    refused, forced = (
        acode("resume", short, expect=17),
        acode("resume", short, "--force", expect=17),
    )

    model_line = next(line for line in dry.out.splitlines() if "Model " in line)
    assert model_line.startswith(f"  ✗ Model {MODEL} unavailable: ")
    assert SILENT.search(model_line)
    assert dry.out.splitlines()[-1] == "Environment not ready: the resume would stop (exit 17)."
    env = as_json.json()["environment"]
    assert env["model"]["busy"] is True
    assert SILENT.search(env["model"]["problem"])
    assert {"check": "model", "ok": False, "detail": env["model"]["problem"]} in env["checks"]
    assert env["ready"] is False
    assert env["budget_seconds"] == 2.0  # the default: NFR-002
    for stopped in (refused, forced):  # --force waives settings, never the model
        assert stopped.flat_err.startswith(
            f"error ACODE-RESUME-004: cannot resume session {short}: the model server at "
            f"{silent.base_url} accepted the connection but did not answer within "
        )
        assert f"(`curl -s {silent.base_url}/models`), then run: acode resume {short}" in (
            stopped.flat_err
        )
        assert "--force does not skip this check" in stopped.flat_err
    assert acode.status(short) == before  # nothing was written


def test_the_validation_budget_is_the_setting_of_the_resume(acode: Cli, silent: _Silent) -> None:
    """resume.validation_timeout_seconds as the workspace says now: changing it is no
    change of the session's configuration."""
    short = _stopped_before_the_model(acode, silent.base_url)
    acode.write(
        ".agent/config.yml",
        f"model:\n  base_url: {silent.base_url}\n  name: {MODEL}\n"
        "resume:\n  validation_timeout_seconds: 0.5\n",
    )

    env = acode("resume", short, "--dry-run", "--json").json()["environment"]

    assert env["budget_seconds"] == 0.5
    assert env["config_changes"] == []
    assert SILENT.search(env["model"]["problem"])


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_resume_waits_out_a_busy_server_only_by_being_run_again(
    acode: Cli, as_json: bool
) -> None:
    with BusyModelServer() as server:
        short = _stopped_before_the_model(acode, server.base_url)
        acode.write(
            ".agent/config.yml",
            f"model:\n  base_url: {server.base_url}\n  name: {MODEL}\n"
            "resume:\n  validation_timeout_seconds: 0.5\n",
        )
        server.busy()
        refused = acode("resume", short, expect=17)
        server.earlier_request_done()
        done = acode("resume", short, *(["--json"] if as_json else []))

    assert SILENT.search(refused.flat_err)
    # The availability check (of the preview, and again of the resume), then the request.
    *checks, asked = server.seen
    assert (set(checks), asked) == ({"GET /v1/models"}, "POST /v1/chat/completions")
    if as_json:
        resuming, *_, final = done.json_lines()
        assert resuming["event"] == "resuming"
        assert resuming["environment"]["model"] == {
            "base_url": server.base_url,
            "name": MODEL,
            "problem": None,
            "busy": False,
        }
        assert resuming["environment"]["ready"] is True
        assert final["state"] == "COMPLETED"
    else:
        lines = done.out.splitlines()
        assert f"  ✓ Model {MODEL} available" in lines
        assert "Environment ready. Resuming..." in lines
        assert lines[-1] == f"Session {short} completed: 2 steps done."
