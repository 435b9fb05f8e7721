"""The benchmark's NFR-004 and NFR-002 parts, run as the benchmark runs them on small
sessions: real driver processes, a real SIGKILL, a real model server on 127.0.0.1.
Nothing here judges a time: the benchmark does, on its own machine."""

from __future__ import annotations

from pathlib import Path

import pytest

import acode
from bench.after_resume import KINDS, AfterResume, _killed_session, _peer, run_after_resume
from bench.model_probe import SERVERS, ModelProbe, run_model_probe
from bench.nfr_report import render_after_resume, render_model_probe
from bench.peers.launch import Driver

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "test-secret")


@pytest.mark.parametrize("kind", ["resumed", "resumed-skip"])
def test_the_resumed_driver_goes_on_in_the_killed_session(tmp_path: Path, kind: str) -> None:
    workspace = tmp_path / "killed"
    _killed_session("normal", 30, workspace)
    driver = Driver(_peer("normal", kind), 20, workspace, 10)
    try:
        assert driver.turn() > 0
        assert driver.turn() > 0
        driver.finish()
    finally:
        driver.kill()
    session = acode.resume_session(None, workspace)
    try:
        assert session.steps_completed == 50  # the same session: 30 before the kill, 20 after
    finally:
        session.close()


def test_every_kind_is_timed_in_every_round(tmp_path: Path) -> None:
    lines: list[str] = []
    results = run_after_resume((40,), 30, 2, tmp_path, lines.append)
    for durability in ("full", "normal"):
        for kind, _ in KINDS:
            values = results.per_step_us[(durability, 40, kind)]
            assert len(values) == 2
            assert all(v > 0 for v in values)
    assert list(tmp_path.iterdir()) == []  # every copy and template removed
    assert sum("round" in line for line in lines) == 4


def test_ratios_pair_the_sessions_round_by_round() -> None:
    results = AfterResume(steps=10)
    results.per_step_us[("full", 5, "fresh")] = [100.0, 200.0, 100.0]
    results.per_step_us[("full", 5, "uninterrupted")] = [120.0, 200.0, 100.0]
    results.per_step_us[("full", 5, "resumed")] = [120.0, 200.0, 105.0]
    results.per_step_us[("full", 5, "resumed-skip")] = [100.0, 300.0, 100.0]
    assert results.ratios("full", 5, "resumed") == [1.2, 1.0, 1.05]
    assert results.ratio("full", 5, "resumed") == 1.05
    text = render_after_resume(results)
    assert (
        "| full | 5 | killed, resumed, completed steps replayed | 1.05 | 1.20, 1.00, 1.05 | met |"
        in text
    )
    assert (
        "| full | 5 | killed, resumed with skip_completed() | 1.00 | 1.00, 1.50, 1.00 | met |"
        in text
    )
    # Against the session never interrupted: 120 / 120, 200 / 200, 105 / 100.
    assert "steps replayed | 120 | 105 - 200 | 1.05 | 1.00 |" in text


def test_a_resumed_step_beyond_the_target_is_missed() -> None:
    results = AfterResume(steps=10)
    results.per_step_us[("normal", 5, "fresh")] = [100.0]
    results.per_step_us[("normal", 5, "uninterrupted")] = [150.0]
    results.per_step_us[("normal", 5, "resumed")] = [150.0]
    results.per_step_us[("normal", 5, "resumed-skip")] = [100.0]
    text = render_after_resume(results)
    assert (
        "| normal | 5 | killed, resumed, completed steps replayed | 1.50 | 1.50 | **missed** |"
        in text
    )


def test_the_model_probe_meets_both_servers(tmp_path: Path) -> None:
    results = run_model_probe(1, tmp_path, lambda _: None)
    for key, _ in SERVERS:
        assert len(results.preview_seconds[key]) == 1
        assert len(results.cli_seconds[key]) == 1
    assert results.verdicts["live"] == {"answered, a pass"}
    assert results.statuses["live"] == {0}
    # Whatever the silent server is called, the validation did not get its answer.
    assert results.verdicts["silent"].isdisjoint({"answered, a pass", "not checked"})


def test_the_validation_is_judged_on_its_worst_run() -> None:
    probe = ModelProbe(
        configured_timeout=2.0,
        preview_seconds={"live": [0.1, 0.2], "silent": [1.9, 2.1]},
        cli_seconds={"live": [0.5, 0.6], "silent": [2.4, 2.6]},
        verdicts={"live": {"answered, a pass"}, "silent": {"reported as a problem"}},
        statuses={"live": {0}, "silent": {0}},
    )
    text = render_model_probe(probe)
    assert (
        "| a server that answers | 0.15 (0.20) | 0.55 (0.60) | 0 | answered, a pass | met |" in text
    )
    assert (
        "| a server that takes the connection and never answers | 2.00 (2.10) | 2.50 (2.60) "
        "| 0 | reported as a problem | **missed** |"
    ) in text
