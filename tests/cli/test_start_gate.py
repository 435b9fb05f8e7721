"""The start gate of a session a fleet worker starts (acode.fleet.session_env.START_GATE):
after its `started` record the session runs nothing until a line arrives on its
standard input, which the worker writes once the session's id is on the queue's item.
A worker killed before that closes the pipe unwritten: the session pauses before its
first step, so the next claim's new session does nothing twice."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import ACODE, Cli, plan_yaml

__all__: list[str] = []


def _start(acode: Cli, effects: Path) -> subprocess.Popen[bytes]:
    ws = acode.workspace
    subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
    (ws / "plan.yaml").write_text(
        plan_yaml(
            "Gated",
            f"{{id: r, run: 'echo r >> {effects}'}}",
            "{id: w, write: a.txt, content: one}",
        ),
        encoding="utf-8",
    )
    return subprocess.Popen(
        [ACODE, "run", "plan.yaml", "--json", "--mode", "autopilot"],
        cwd=ws,
        env={**acode.env, "ACODE_START_GATE": "1"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize("answer", [b"go\n", b""])
def test_a_gated_session_runs_once_let_go_and_pauses_before_its_first_step_if_not(
    acode: Cli, tmp_path: Path, answer: bytes
) -> None:
    effects = tmp_path / "effects"
    proc = _start(acode, effects)
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    started = json.loads(proc.stdout.readline())
    assert started["event"] == "started"
    assert not effects.exists()  # held at the gate
    (session,) = acode("session", "list", "--json").json()
    assert session["id"] == started["id"]

    proc.stdin.write(answer)
    proc.stdin.close()  # unwritten: the worker that started it is gone
    proc.stdout.read()
    code = proc.wait(60)
    assert b"Traceback" not in proc.stderr.read()

    state = acode.status(started["id"])["state"]
    if answer:
        assert (code, state) == (0, "COMPLETED")
    else:
        assert (code, state) == (130, "PAUSED")
        assert not effects.exists()  # nothing ran
        acode("resume", started["id"])
    assert effects.read_text().splitlines() == ["r"]
