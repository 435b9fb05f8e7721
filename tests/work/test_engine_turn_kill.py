"""acode killed while its engine works: nothing is recorded for that turn, the engine does
not outlive acode, and `acode work resume` starts a new engine session with the context
rebuilt (the killed turn's id is never used)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from tests.cli.conftest import Background, Cli, alive, wait_for

ENGINE = """\
import os, sys, time
session_id, prompt = sys.argv[1], sys.argv[2]
with open(os.environ["ENGINE_LOG"], "a") as log:
    log.write(f"{os.getpid()} {session_id or '-'} {prompt.splitlines()[0]}\\n")
if os.path.exists(os.environ["ENGINE_SLOW"]):
    time.sleep(60)
print("done: " + prompt.splitlines()[0])
"""


def test_a_kill_during_the_engine_turn_records_nothing_and_resume_rebuilds(
    workspace: Path, cli_env: dict[str, str], background: Background, tmp_path: Path
) -> None:
    script = tmp_path / "engine.py"
    script.write_text(ENGINE)
    log, slow = tmp_path / "engine.log", tmp_path / "slow"
    slow.touch()
    env = {**cli_env, "ENGINE_LOG": str(log), "ENGINE_SLOW": str(slow)}
    acode = Cli(workspace, env, background)
    template = f"{sys.executable} {script} {{session_id}} {{prompt}}"
    acode.write(".agent/config.yml", f'engines:\n  command: {{command: "{template}"}}\n')
    acode("task", "add", "Implement feature X")
    running = acode.start("work", "task", "task-001", "--engine", "command")
    wait_for("the engine to start", lambda: log.exists() and log.read_text().strip() != "", 30)
    engine_pid = int(log.read_text().split()[0])
    os.kill(running.pid, signal.SIGKILL)
    running.proc.communicate(timeout=10)
    deadline = time.monotonic() + 10
    while alive(engine_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(engine_pid), "the engine outlived the acode that started it"

    [wsession] = acode("work", "list", "--json").json()
    assert wsession["engine_sessions"] == []  # the killed turn left nothing
    slow.unlink()
    resumed = acode("work", "resume", wsession["id"], "--json", timeout=60).json()
    assert [(t["how"], t["ok"]) for t in resumed["turns"]] == [("rebuilt", True)]
    assert "no longer available" in log.read_text().splitlines()[-1]
    ids = [line.split()[1] for line in log.read_text().splitlines()]
    assert resumed["turns"][0]["session_id"] not in ids[:1]  # never the killed turn's id
