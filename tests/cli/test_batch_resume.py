"""Batch resume as docs/progress-file.md answers it (003, "Should there be batch resume
capabilities?"): its shell loop, run as written, resumes paused sessions, the one updated
longest ago first, and stops at the first that does not complete, with that resume's
exit status."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from tests.cli.conftest import ACODE, Cli, wait_for

__all__: list[str] = []

DOCS = Path(__file__).resolve().parents[2] / "docs" / "progress-file.md"


def _documented_loop() -> str:
    blocks = re.findall(r"```sh\n(.*?)```", DOCS.read_text(), re.S)
    (loop,) = [b for b in blocks if "acode session list --resumable --json" in b]
    return "\n".join(line.strip() for line in loop.splitlines())


def _paused(acode: Cli, name: str, first_write: str, last_write: str) -> str:
    """A session of plan ``name`` paused (SIGTERM) in a step that waits for ../go."""
    acode.write(
        f"{name}.yml",
        f"title: Session {name}\n"
        "tasks:\n"
        "  - id: t\n"
        "    title: T\n"
        "    steps:\n"
        f'      - {{id: first, write: {first_write}, content: "{name}\\n"}}\n'
        f"      - {{id: wait, run: 'echo $$ >> {name}.pids; "
        "while [ ! -e ../go ]; do sleep 0.05; done', idempotent: true}\n"
        f'      - {{id: last, write: {last_write}, content: "{name} done\\n"}}\n',
    )
    pids = acode.watch_pids(f"{name}.pids")
    running = acode.start("run", f"{name}.yml", "--json")
    wait_for(f"session {name} to wait", pids.exists)
    os.kill(running.pid, signal.SIGTERM)
    started = acode.finish(running, expect=130).json_lines()[0]
    return str(started["id"])


def _run_loop(acode: Cli) -> subprocess.CompletedProcess[str]:
    (acode.workspace.parent / "go").touch()
    env = {**acode.env, "PATH": f"{Path(ACODE).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-c", _documented_loop()],
        cwd=acode.workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_loop_resumes_every_paused_session_oldest_first(acode: Cli) -> None:
    one = _paused(acode, "one", "one.txt", "one-done.txt")
    two = _paused(acode, "two", "two.txt", "two-done.txt")

    done = _run_loop(acode)

    assert done.returncode == 0, done.stderr
    assert done.stdout.index(f"Resuming session {one[:13]}") < done.stdout.index(
        f"Resuming session {two[:13]}"
    )
    assert {acode.status(sid)["state"] for sid in (one, two)} == {"COMPLETED"}
    assert (acode.workspace / "two-done.txt").read_text() == "two done\n"


def test_the_loop_stops_where_an_earlier_session_changed_a_later_ones_file(
    acode: Cli,
) -> None:
    one = _paused(acode, "one", "one.txt", "shared.txt")
    two = _paused(acode, "two", "shared.txt", "two-done.txt")

    stopped = _run_loop(acode)

    assert stopped.returncode == 17, stopped.stderr
    assert acode.status(one)["state"] == "COMPLETED"
    assert acode.status(two)["state"] == "PAUSED"
    assert "ACODE-RESUME-004" in stopped.stderr
    # A conflict: the other session wrote it after this one last saw it.
    assert f"shared.txt (Modified; written by session {one[:13]}, step " in stopped.stderr
    assert not (acode.workspace / "two-done.txt").exists()
