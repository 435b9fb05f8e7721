"""The reader of `acode run --json`'s output gone mid-run (a fleet worker killed, a pipe
into `head`): the session pauses, as on SIGTERM, rather than fail the step whose notice
could not be written; `acode resume` finishes it, each step once."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cli.conftest import ACODE, Cli, plan_yaml

__all__: list[str] = []


def test_a_run_whose_output_reader_is_gone_pauses_and_resumes(acode: Cli, tmp_path: Path) -> None:
    ws = acode.workspace
    subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
    closed = tmp_path / "closed"
    effects = tmp_path / "effects"
    wait = f"while [ ! -e {closed} ]; do sleep 0.05; done; echo s >> {effects}"
    (ws / "plan.yaml").write_text(
        plan_yaml(
            "Reader gone",
            "{id: w1, write: a.txt, content: one}",
            f"{{id: s, run: '{wait}'}}",
            "{id: w2, write: b.txt, content: two}",
        ),
        encoding="utf-8",
    )
    proc = subprocess.Popen(
        [ACODE, "run", "plan.yaml", "--json", "--mode", "autopilot"],
        cwd=ws,
        env=acode.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    for line in proc.stdout:
        if b'"step": "s"' in line:
            break
    proc.stdout.close()  # the reader gone while step s runs
    closed.touch()

    assert proc.wait(30) == 130, proc.stderr.read().decode()
    assert b"Traceback" not in proc.stderr.read()
    (session,) = acode("session", "list", "--json").json()
    assert session["state"] == "PAUSED", session
    assert acode("resume", session["id"]).code == 0
    assert (ws / "b.txt").read_text() == "two"
    assert effects.read_text().splitlines() == ["s"], "step s ran again"
