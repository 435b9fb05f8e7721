"""Cold start: what a new process pays before it does anything, against ``python -c pass``.

Each command runs as a fresh process, the commands taking turns; one run of each first,
not counted, leaves the operating system's file cache and Python's byte-code cache as
a person's second run would find them.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.budget import plan_session
from bench.peers import PEERS, available
from bench.peers.launch import driver_env

__all__ = ["BASELINE", "ColdStart", "run_coldstart"]

BASELINE = "python -c pass"
_LANGGRAPH = (
    "import langgraph.graph, langgraph.checkpoint.sqlite; "
    "from langgraph.graph import StateGraph; from langgraph.checkpoint.sqlite import SqliteSaver"
)


@dataclass
class ColdStart:
    seconds: dict[str, list[float]] = field(default_factory=dict)  # command -> samples
    session_steps: int = 0  # steps in the session the acode commands look at

    def median(self, label: str) -> float:
        return statistics.median(self.seconds[label])


def _commands(workspace: Path) -> dict[str, list[str]]:
    python = sys.executable
    acode = str(Path(python).parent / "acode")
    commands = {
        BASELINE: [python, "-c", "pass"],
        'python -c "import acode"': [python, "-c", "import acode"],
        "acode resume --dry-run": [acode, "resume", "--dry-run", "-w", str(workspace)],
        "acode session list": [acode, "session", "list", "-w", str(workspace)],
    }
    installed = {p.requires for p in PEERS if p.requires and available(p)}
    if "dbos" in installed:
        commands['python -c "import dbos"'] = [python, "-c", "import dbos"]
    if "langgraph" in installed:
        commands["python -c 'import langgraph + SqliteSaver'"] = [python, "-c", _LANGGRAPH]
    return commands


def _time(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, env=driver_env(), check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-2000:]!r}")
    return seconds


def run_coldstart(
    samples: int, scratch: Path, progress: Callable[[str], None], *, steps: int = 1_000
) -> ColdStart:
    """``samples`` runs of each command; the acode ones against an unfinished plan
    session that read ``steps`` files (``acode resume`` continues plan sessions)."""
    workspace = scratch / "coldstart"
    plan_session(workspace, steps)
    commands = _commands(workspace)
    result = ColdStart(session_steps=steps)
    for command in commands.values():
        _time(command)  # warm-up, not counted
    for _ in range(samples):
        for label, command in commands.items():
            result.seconds.setdefault(label, []).append(_time(command))
    progress(
        "cold start (ms): "
        + "  ".join(f"{label} {result.median(label) * 1e3:.0f}" for label in commands)
    )
    return result
