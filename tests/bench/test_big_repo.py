"""The benchmark's big-repository part (bench.big_repo), run as the benchmark runs it on a
small repository: the real CLI, a real SIGKILL, real git. Nothing here judges a time:
the benchmark does, on its own machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.big_repo import BARE, STEP, build_repository, run_big_repo
from bench.big_repo_report import render_big_repo

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "test-secret")


def test_the_repository_holds_every_file_committed(tmp_path: Path) -> None:
    build_repository(tmp_path / "repo", 250)

    listed = subprocess.run(
        ["git", "ls-files"], cwd=tmp_path / "repo", capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(listed) == 250
    assert listed[0] == "pkg0000/m000.py"
    assert listed[-1] == "pkg0002/m049.py"


def test_every_part_is_measured_in_every_round_and_rendered(tmp_path: Path) -> None:
    lines: list[str] = []

    results = run_big_repo(150, 2, 3, tmp_path, lines.append)

    per_step = (STEP, BARE)  # 2 of the 3 steps of a round
    assert all(len(v) == 2 for what, v in results.seconds.items() if what not in per_step)
    assert len(results.seconds[STEP]) == len(results.seconds[BARE]) == len(results.printed) == 4
    assert all(value > 0 for values in results.seconds.values() for value in values)
    assert results.same_tree is True
    assert not (tmp_path / "repo-150").exists()
    assert sum("round" in line for line in lines) == 2
    text = render_big_repo([results])
    assert text.startswith("## A big repository (issue 19)\n")
    assert "| 150 files | ms | min - max | x `git status` |" in text
    same = "| the snapshot's tree is the one git writes from a copy of the index, 150 files |"
    assert f"{same} yes | met |" in text
