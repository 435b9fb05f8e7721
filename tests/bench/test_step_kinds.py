"""The benchmark of every step kind against its bare equivalent, run as the benchmark runs
it on a few steps: a real session, real files, real git, real commands. Nothing here
judges a time: the benchmark does, on its own machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.__main__ import _splice
from bench.step_kinds import KINDS, Kind, StepKinds, _Sides, run_step_kinds
from bench.step_kinds_report import HEADING, render_step_kinds

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "test-secret")


def _files(workspace: Path) -> dict[str, bytes]:
    """The workspace's files as a person sees them: not acode's state, nor git's."""
    return {
        str(path.relative_to(workspace)): path.read_bytes()
        for path in sorted(workspace.rglob("*"))
        if path.is_file() and path.relative_to(workspace).parts[0] not in (".agent", ".git")
    }


def _log(workspace: Path) -> list[str]:
    out = subprocess.run(
        ["git", "log", "--format=%s"], cwd=workspace, capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


@pytest.mark.parametrize("kind", KINDS, ids=[k.key for k in KINDS])
def test_both_sides_do_the_same_work(tmp_path: Path, kind: Kind) -> None:
    sides = _Sides(kind, tmp_path)
    try:
        for _ in range(2):
            for side in ("acode", "bare"):
                assert sides.steps(side, 3) > 0
        steps_completed = sides.session.steps_completed
    finally:
        sides.close()
    assert steps_completed == 6
    acode_ws, bare_ws = tmp_path / "acode", tmp_path / "bare"
    assert _files(acode_ws) == _files(bare_ws)
    if kind.key.startswith("run"):
        assert (acode_ws / "log.txt").read_text().split() == [str(i) for i in range(6)]
    if kind.key == "commit":
        assert (
            _log(acode_ws) == _log(bare_ws) == [f"step {i}" for i in reversed(range(6))] + ["start"]
        )


def test_edits_walk_each_file_one_value_at_a_time(tmp_path: Path) -> None:
    edit = next(k for k in KINDS if k.key == "edit")
    sides = _Sides(edit, tmp_path)
    try:
        sides.steps("acode", 45)  # every one of the 20 files edited twice, five of them thrice
    finally:
        sides.close()
    text = (tmp_path / "acode" / "f4.txt").read_text()
    assert text == "file 4\nvalue = v3\n"
    assert (tmp_path / "acode" / "f5.txt").read_text() == "file 5\nvalue = v2\n"


def test_every_kind_is_timed_in_every_round(tmp_path: Path) -> None:
    lines: list[str] = []
    kinds = [Kind(k.key, k.label, k.git, 1) for k in KINDS]
    results = run_step_kinds(2, tmp_path, lines.append, quick=True, kinds=kinds)
    for kind in kinds:
        assert results.steps[kind.key] == 4
        for side in ("acode", "bare"):
            values = results.per_step_us[(kind.key, side)]
            assert len(values) == 2
            assert all(v > 0 for v in values)
        assert len(results.ratios(kind.key)) == 2
        assert all(r > 0 for r in results.ratios(kind.key))
    assert all(us > 0 for us in results.fsync_us)
    assert list(tmp_path.iterdir()) == []  # every workspace removed
    assert sum("round" in line for line in lines) == 2
    section = render_step_kinds(results, kinds)
    assert section.startswith(HEADING + "\n")
    assert sum(line.startswith("| ") for line in section.splitlines()) == 1 + len(kinds)


def test_ratios_pair_the_sides_round_by_round() -> None:
    results = StepKinds(rounds=3, steps={"read": 10})
    results.per_step_us[("read", "acode")] = [300.0, 200.0, 150.0]
    results.per_step_us[("read", "bare")] = [100.0, 200.0, 100.0]
    results.round_ratios["read"] = [3.0, 1.0, 1.5]
    assert results.ratio("read") == 1.5
    read = [k for k in KINDS if k.key == "read"]
    assert "| 1.50 | 3.00, 1.00, 1.50 |" in render_step_kinds(results, read)
    assert "| met |" in render_step_kinds(results, read)


def test_one_section_measured_again_replaces_its_own() -> None:
    report = "# Benchmarks\n\n## A\n\nold a\n\n## Kinds\n\nold kinds\n\n## B\n\nb\n"
    assert _splice(report, "## Kinds\n\nnew kinds\n") == (
        "# Benchmarks\n\n## A\n\nold a\n\n## Kinds\n\nnew kinds\n\n## B\n\nb\n"
    )
    assert _splice("# Benchmarks\n\n## A\n\na\n", "## Kinds\n\nk\n") == (
        "# Benchmarks\n\n## A\n\na\n\n## Kinds\n\nk\n"
    )
    # The last section: replaced up to the end.
    assert _splice("# B\n\n## Kinds\n\nold\n", "## Kinds\n\nnew\n") == "# B\n\n## Kinds\n\nnew\n"
