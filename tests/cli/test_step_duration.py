"""The duration a step line prints is the whole time the step cost, its ghost snapshot
included: a `run` step in a big repository spends seconds in git before its command
starts, and a person must never read `(0.0s)` for it.

git is made slow on purpose (a wrapper on PATH that sleeps before each call): the step
cannot take less than one such call, whatever the machine's speed, so the printed time
has a lower bound that holds on any machine."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.cli.conftest import Cli, plan_yaml

__all__: list[str] = []

_NAP = 0.3  # seconds each git call sleeps before it runs


def _slow_git(acode: Cli, tmp_path: Path) -> dict[str, str]:
    """The environment of acode with a git that naps before every call."""
    real = shutil.which("git")
    assert real is not None
    bin_dir = tmp_path / "slow-bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(f'#!/bin/sh\nsleep {_NAP}\nexec {real} "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    return {**acode.env, "PATH": f"{bin_dir}:{acode.env['PATH']}"}


def _repository(acode: Cli) -> None:
    acode.write("a.txt", "alpha\n")
    acode.write("plan.yml", plan_yaml("Snapshot", "{id: log, run: echo ran >> log.txt}", task="t"))
    for args in (("init", "-q"), ("add", "a.txt"), ("commit", "-qm", "start")):
        subprocess.run(["git", *args], cwd=acode.workspace, env=acode.env, check=True)


def test_a_run_steps_printed_duration_includes_its_snapshot(acode: Cli, tmp_path: Path) -> None:
    _repository(acode)
    env = _slow_git(acode, tmp_path)

    result = acode("run", "plan.yml", env=env, timeout=60)

    line = next(line for line in result.out.splitlines() if "log: run:" in line)
    shown = re.search(r"\((\d+\.\d)s\)", line)
    assert shown is not None, line
    # The snapshot calls git at least once inside the step: at least one nap.
    assert float(shown.group(1)) >= _NAP - 0.05, line
    assert (acode.workspace / "log.txt").read_text() == "ran\n"


def test_the_json_duration_includes_the_snapshot_too(acode: Cli, tmp_path: Path) -> None:
    _repository(acode)
    env = _slow_git(acode, tmp_path)

    records = acode("run", "plan.yml", "--json", env=env, timeout=60).json_lines()

    (done,) = [r for r in records if r.get("phase") == "done"]
    assert done["step"] == "log"
    assert done["duration_ms"] >= _NAP * 1000


def test_the_time_resume_reports_for_the_steps_done_includes_the_snapshot(
    acode: Cli, tmp_path: Path
) -> None:
    """`Time: N completed steps took ...` adds up what the history recorded: a run
    step's own time begins before its snapshot, not at its start record."""
    _repository(acode)
    acode.write(
        "plan.yml",
        plan_yaml("Snapshot", "{id: log, run: echo ran >> log.txt}", "{id: ok, approve: Go?}"),
    )
    acode("run", "plan.yml", env=_slow_git(acode, tmp_path), expect=20, timeout=60)

    preview = acode("resume", "--dry-run", "--json").json()

    work = preview["work_time"]
    assert work["completed_steps"] == 1
    assert work["completed_seconds"] >= _NAP
