"""The benchmark's drivers, run as the benchmark runs them: real processes, real SQLite,
a real SIGKILL. Only the engines of acode's own environment (acode, bare SQLite, plain
Python): DBOS and LangGraph live in .venv-bench."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.compare import StepResults, run_steps
from bench.peers import PEERS, Peer, available, fits
from bench.recovery import RecoveryResults, run_recovery

pytestmark = pytest.mark.timeout(60)


def _peer(key: str) -> Peer:
    return next(p for p in PEERS if p.key == key)


def _only(monkeypatch: pytest.MonkeyPatch, module: str, *keys: str) -> None:
    monkeypatch.setattr(module + ".PEERS", tuple(_peer(k) for k in keys))


def test_acode_skipping_its_completed_steps_recovers_but_is_not_timed_per_step() -> None:
    skip = _peer("acode-skip")
    assert skip.recovers
    assert not skip.steps


def test_engines_without_packages_of_their_own_are_always_available() -> None:
    assert available(_peer("acode-full"))
    assert available(_peer("plain"))
    assert fits(_peer("lg-accumulate"), 1_000, full=False)
    assert not fits(_peer("lg-accumulate"), 10_000, full=False)
    assert fits(_peer("lg-accumulate"), 10_000, full=True)


def test_steps_are_timed_in_turns_and_the_database_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _only(monkeypatch, "bench.compare", "bare-full", "bare-normal", "plain")
    lines: list[str] = []
    results = run_steps([120], 1, 50, tmp_path, lines.append, full=False)
    for key in ("bare-full", "bare-normal", "plain"):
        assert len(results.per_step_us[(120, key)]) == 1
        assert results.per_step_us[(120, key)][0] > 0
    bytes_per_step = results.bytes_per_step(120, "bare-full")
    assert bytes_per_step is not None
    assert 150 < bytes_per_step < 2_000
    assert results.bytes_per_step(120, "plain") is None  # nothing on disk
    assert len(lines) == 2  # one per group: those that fsync take turns apart


def test_ratios_pair_the_engines_round_by_round() -> None:
    results = StepResults(peers=(_peer("acode-full"), _peer("bare-full")))
    results.per_step_us[(10, "acode-full")] = [150.0, 300.0, 120.0]
    results.per_step_us[(10, "bare-full")] = [100.0, 150.0, 100.0]
    assert results.ratios(10, "acode-full", base="bare-full") == [1.5, 2.0, 1.2]
    # The median of the rounds' ratios, not the ratio of the medians (150 / 100).
    assert results.ratio(10, "acode-full", base="bare-full") == 1.5
    assert results.ratio(10, "bare-full") == pytest.approx(1 / 1.5)


def test_a_killed_acode_workflow_recovers_with_no_step_run_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "test-secret")
    _only(monkeypatch, "bench.recovery", "acode-full", "acode-skip", "bare-full", "plain")
    results = run_recovery([40], 1, tmp_path, lambda _: None, full=False, results=None)
    assert isinstance(results, RecoveryResults)
    for key in ("acode-full", "acode-skip", "bare-full"):
        assert results.worst_duplicates(40, key) == 0
        assert results.worst_missing(40, key) == 0
        sample = results.samples[(40, key)][0]
        assert 0 < sample.loaded_s <= sample.first_new_s
        assert sample.finished_s is not None
        assert sample.first_new_s <= sample.finished_s
    # Nothing recorded, nothing recovered: plain Python runs the first half again.
    assert results.worst_duplicates(40, "plain") == 20
