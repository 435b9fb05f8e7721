"""acode killed while its engine works: nothing is recorded for that turn, the engine does
not outlive acode, and `acode work resume` starts a new engine session with the context
rebuilt (the killed turn's id is never used)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from acode.domain.config import EngineConfig
from acode.work.engines import start_turn
from tests.cli.conftest import Background, Cli, alive, read_pids, wait_for

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


# An engine that starts a helper in a session of its own (out of the engine's process
# group), which keeps the engine's stdout open; then it never answers.
SPAWNING_ENGINE = """\
import os, subprocess, sys, time
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                          start_new_session=True)
with open(os.environ["HELPER_PID"], "w") as f:
    f.write(f"{helper.pid}\\n")
time.sleep(60)
"""


def test_a_turn_that_times_out_kills_what_the_engine_started_outside_its_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, pid_file = tmp_path / "engine.py", tmp_path / "helper.pid"
    script.write_text(SPAWNING_ENGINE)
    monkeypatch.setenv("HELPER_PID", str(pid_file))
    settings = EngineConfig(command=f"{sys.executable} {script}", timeout_seconds=5)

    turn = start_turn(
        "command",
        settings,
        prompt="work",
        cwd=tmp_path,
        history_file=tmp_path / "history",
        new_session_id="s-1",
    )

    assert (turn.ok, turn.detail) == (
        False,
        "command timed out after 5 s; its process group was killed",
    )
    [helper] = read_pids(pid_file)  # it started in time: the test tests something
    try:
        wait_for("the engine's helper to be killed", lambda: not alive(helper))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(helper, signal.SIGKILL)
