"""Everything measured against the other engines (issue 5), in one place: per-step
overhead, crash recovery, recovery as the history grows, database bytes, cold start,
the specification's budget and the ghost snapshot."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from bench.budget import Budget, run_budget
from bench.coldstart import ColdStart, run_coldstart
from bench.compare import StepResults, run_steps
from bench.recovery import RecoveryResults, run_history, run_recovery

__all__ = ["SideBySide", "SideBySideSettings", "peer_versions", "run_side_by_side"]

_DISTRIBUTIONS = ("dbos", "SQLAlchemy", "langgraph", "langgraph-checkpoint-sqlite")


@dataclass(frozen=True)
class SideBySideSettings:
    step_sizes: tuple[int, ...]
    step_runs: int
    turns: int  # the turns a run of steps is cut into (run_steps)
    recovery_sizes: tuple[int, ...]
    recovery_runs: int
    history_sizes: tuple[int, ...]  # probed only: first new step, one crash each
    history_samples: int
    history_peers: tuple[str, ...] | None  # the peers probed there (None: every one)
    cold_samples: int
    budget_steps: int
    snapshot_files: int
    budget_samples: int
    full: bool


@dataclass(frozen=True)
class SideBySide:
    settings: SideBySideSettings
    steps: StepResults
    recovery: RecoveryResults
    coldstart: ColdStart
    budget: Budget
    versions: dict[str, str]


def peer_versions() -> dict[str, str]:
    versions = {}
    for name in _DISTRIBUTIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def run_side_by_side(
    settings: SideBySideSettings, root: Path, progress: Callable[[str], None]
) -> SideBySide:
    scratch = Path(tempfile.mkdtemp(prefix="acode-peers-", dir=root))
    try:
        # Cold start first: its warm-up run also compiles what the other drivers import.
        coldstart = run_coldstart(settings.cold_samples, scratch, progress)
        s = settings
        steps = run_steps(s.step_sizes, s.step_runs, s.turns, scratch, progress, full=s.full)
        recovery = run_recovery(s.recovery_sizes, s.recovery_runs, scratch, progress, full=s.full)
        run_history(
            s.history_sizes,
            s.history_samples,
            scratch,
            progress,
            results=recovery,
            keys=s.history_peers,
        )
        budget = run_budget(s.budget_steps, s.snapshot_files, s.budget_samples, scratch, progress)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return SideBySide(settings, steps, recovery, coldstart, budget, peer_versions())
