"""`acode resume` against a model server that is busy: it takes the connection but says
nothing within the availability check, as llama.cpp's server does while it finishes a
request a killed client left. The resume says so, waits in the server's queue, and the
session completes."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.cli.conftest import Cli, plan_yaml
from tests.support.busy_model import MODEL, BusyModelServer

WAITING = re.compile(r"Session (\S+) is waiting for approval")
BUSY_LINE = (
    f"  ✓ Model {MODEL} busy (its server is still answering an earlier request; acode waits)"
)


@pytest.fixture
def server() -> Iterator[BusyModelServer]:
    with BusyModelServer() as running:
        yield running


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_resume_that_finds_the_model_busy_says_so_and_goes_on(
    acode: Cli, server: BusyModelServer, as_json: bool
) -> None:
    acode.write(
        ".agent/config.yml",
        f"model:\n  base_url: {server.base_url}\n  name: {MODEL}\n"
        "resume:\n  validation_timeout_seconds: 0.5\n",  # the check gives up after 0.5 s
    )
    acode.write(
        "plan.yml", plan_yaml("Ask", "{id: ok, approve: Go on?}", "{id: ask, model: Say hi.}")
    )
    found = WAITING.search(acode("run", "plan.yml", expect=20).flat_err)
    assert found
    short = found.group(1)
    acode("approve", short)

    server.busy()
    running = acode.start("resume", short, *(["--json"] if as_json else []))
    server.done_once_asked(running.proc)
    result = acode.finish(running, expect=0)

    assert server.seen == ["GET /v1/models", "POST /v1/chat/completions"]
    if as_json:
        resuming, *_, final = result.json_lines()
        assert resuming["event"] == "resuming"
        assert resuming["environment"]["model"]["busy"] is True
        assert final["state"] == "COMPLETED"
    else:
        lines = result.out.splitlines()
        assert BUSY_LINE in lines, result.describe()
        assert lines[-1] == f"Session {short} completed: 2 steps done."
        assert lines.index(BUSY_LINE) < len(lines) - 1
