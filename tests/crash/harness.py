"""What the crash tests share: their settings, the reference run's record and the tally
of kills that landed.

ACODE_CRASH_CASES (default 10) is the number of kill-and-resume cases; each case draws
3 or 4 kills. ACODE_CRASH_SEED (default: a fresh random seed) seeds every case; it is
printed at the end of the run and in every failure, so that a case can be replayed.
Both are read when the tests are collected, as tests/conftest.py clears ACODE_*
variables before each test runs.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.crash.killing import Invocation, Pace
from tests.crash.workload import GitState

__all__ = [
    "CASES",
    "SEED",
    "TALLY",
    "Reference",
    "Tally",
]

DEFAULT_CASES = 10


def _int_setting(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise pytest.UsageError(f"{name}={raw!r} is not an integer") from None


CASES = _int_setting("ACODE_CRASH_CASES", DEFAULT_CASES)
SEED = _int_setting("ACODE_CRASH_SEED", random.SystemRandom().randrange(1 << 32))
if CASES < 1:
    raise pytest.UsageError(f"ACODE_CRASH_CASES={CASES} must be at least 1")


@dataclass(frozen=True)
class Reference:
    """The uninterrupted run of the main plan, and what a case needs to repeat it."""

    template: Path
    plan_file: Path
    env: dict[str, str]
    workspace: Path
    session_id: str
    files: dict[str, bytes]
    git: GitState
    pace: Pace


@dataclass
class Tally:
    """Kills that landed (the process was alive when it died), over all cases."""

    cases: int = 0
    kills: int = 0
    resumes: int = 0
    by_how: dict[str, int] = field(default_factory=dict)

    def record(self, invocations: Sequence[Invocation]) -> None:
        self.cases += 1
        self.resumes += sum(1 for inv in invocations if inv.argv[1] == "resume")
        for inv in invocations:
            if inv.killed and inv.kill is not None:
                self.kills += 1
                self.by_how[inv.kill.how] = self.by_how.get(inv.kill.how, 0) + 1

    def summary(self) -> str:
        how = ", ".join(f"{name} {n}" for name, n in sorted(self.by_how.items()))
        return (
            f"crash tests: seed {SEED}; {self.cases} cases, {self.kills} kills landed "
            f"({how}), {self.resumes} resumes. Replay: ACODE_CRASH_SEED={SEED}"
        )


TALLY = Tally()
