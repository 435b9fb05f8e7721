"""The specification's performance budget (NFR-001 to NFR-003, docs/requirements.md),
measured on acode's own parts (in this process: these are acode's internals, not
something a peer has), and the cost of a ghost snapshot of a git work tree.

The session: a plan of ``steps`` + 100 read steps over ``steps`` workspace files, killed
(left unfinished) after ``steps`` of them; so resume has that many steps and files to
look at. It is recorded with durability normal to build it quickly: what is measured
here reads, and the one commit it times is timed in the per-step table too.
"""

from __future__ import annotations

import gc
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import acode
from acode.domain.continuation import plan_continuation
from acode.domain.kinds import StepKind
from acode.domain.plan import Plan, StepSpec, TaskSpec
from acode.domain.reducer import StepStatus
from acode.engine.catalog import recorded_plan
from acode.engine.journal import Journal
from acode.engine.lifecycle import existing_workspace, start_session
from acode.resume.environment import changed_files
from acode.resume.service import select_for_resume
from acode.security.signing import load_signer
from acode.store.base import EventStore, open_store
from acode.store.records import SessionRow
from acode.system.clock import SystemClock
from acode.system.snapshot import snapshot_worktree

__all__ = ["BUDGET", "Budget", "plan_session", "run_budget"]

# The specification's performance benchmarks (docs/requirements.md): (target, maximum),
# milliseconds.
BUDGET = {
    "state recovery": (250.0, 500.0),
    "environment validation": (1_000.0, 2_000.0),
    "continuation planning": (50.0, 100.0),
    "checkpoint creation": (50.0, 100.0),
}
_PENDING = 100  # plan steps left to run after the kill


@dataclass
class Budget:
    steps: int = 0
    files: int = 0
    seconds: dict[str, list[float]] = field(default_factory=dict)  # what -> samples
    snapshot_files: int = 0

    def median_ms(self, what: str) -> float:
        return statistics.median(self.seconds[what]) * 1e3


def _files(workspace: Path, count: int) -> list[str]:
    paths = []
    for i in range(count):
        rel = f"src/m{i // 100:03d}/f{i:05d}.py"
        target = workspace / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"# module {i}\nVALUE = {i}\n" + "x = 1\n" * 10, encoding="utf-8")
        paths.append(rel)
    return paths


def plan_session(workspace: Path, steps: int) -> str:
    """A plan session that read ``steps`` files, left unfinished as a kill leaves it."""
    paths = _files(workspace, steps + _PENDING)
    config = workspace / ".agent" / "config.yml"
    config.parent.mkdir(parents=True)
    config.write_text("durability: normal\n", encoding="utf-8")
    specs = tuple(
        StepSpec(id=f"read-{i}", kind=StepKind.READ, task_id="t", target=path)
        for i, path in enumerate(paths)
    )
    plan = Plan("budget", (TaskSpec("t", "read everything", specs),))
    session = start_session("budget", workspace, plan=plan)
    for spec in specs[:steps]:
        session.read(spec.id, spec.target, task=spec.task_id)
    session.close()
    return session.id


def _timed(samples: int, what: Callable[[], object]) -> list[float]:
    times = []
    for _ in range(samples):
        gc.collect()
        start = time.perf_counter()
        what()
        times.append(time.perf_counter() - start)
    return times


def _state_recovery(workspace: Path, session_id: str) -> None:
    """Find the session, verify its newest signed checkpoint and the chain after it."""
    ws = existing_workspace(workspace)
    store = open_store(ws.paths.db, ws.config.durability)
    try:
        row = select_for_resume(store, session_id)
        Journal.load(store, row, SystemClock(), load_signer())
    finally:
        store.close()


def _loaded(workspace: Path, session_id: str) -> tuple[EventStore, SessionRow, Journal]:
    ws = existing_workspace(workspace)
    store = open_store(ws.paths.db, ws.config.durability)
    row = select_for_resume(store, session_id)
    return store, row, Journal.load(store, row, SystemClock(), load_signer())


def _environment(store: EventStore, row: SessionRow, workspace: Path) -> None:
    """Every file the session touched against its record (size and mtime first)."""
    changed_files(workspace, store.file_fields(row.sid))


def _continuation(store: EventStore, row: SessionRow, journal: Journal) -> None:
    """The recorded plan against the recorded steps: what is done, what runs next (as
    acode.resume.service does it)."""
    summary = journal.summary
    assert summary is not None
    plan = recorded_plan(store, row, summary)  # the plan its signed checkpoints name
    assert plan is not None
    unfinished = {s.position: s.status for s in store.unfinished_steps(row.sid)}
    statuses = {
        step.id: unfinished.get(i, StepStatus.COMPLETED)
        for i, step in enumerate(plan.steps()[: summary.next_position])
    }
    plan_continuation(plan, statuses)


def _whole_resume(workspace: Path, session_id: str) -> None:
    """``acode.resume_session`` as a caller sees it: all of the above, the lock, the
    ``session_resumed`` commit."""
    acode.resume_session(session_id, workspace).close()


def _repository(workspace: Path, count: int) -> None:
    workspace.mkdir(parents=True)
    _files(workspace, count)

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=workspace, check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "commit", "-qm", "1")
    for i in range(0, count, 100):  # a step's worth of edits, and a new file
        (workspace / f"src/m{i // 100:03d}/f{i:05d}.py").write_text("changed\n", encoding="utf-8")
    (workspace / "notes.txt").write_text("new\n", encoding="utf-8")


def run_budget(
    steps: int,
    snapshot_files: int,
    samples: int,
    scratch: Path,
    progress: Callable[[str], None],
) -> Budget:
    budget = Budget(steps=steps, files=steps, snapshot_files=snapshot_files)
    workspace = scratch / "budget"
    progress(f"budget: building a session of {steps:,} read steps over {steps:,} files")
    session_id = plan_session(workspace, steps)
    budget.seconds["state recovery"] = _timed(
        samples, lambda: _state_recovery(workspace, session_id)
    )
    # The next two start from the loaded journal, as resume does after the recovery.
    store, row, journal = _loaded(workspace, session_id)
    try:
        root = workspace.resolve()
        budget.seconds["environment validation"] = _timed(
            samples, lambda: _environment(store, row, root)
        )
        budget.seconds["continuation planning"] = _timed(
            samples, lambda: _continuation(store, row, journal)
        )
    finally:
        store.close()
    budget.seconds["whole resume_session()"] = _timed(
        samples, lambda: _whole_resume(workspace, session_id)
    )
    shutil.rmtree(workspace)
    repository = scratch / "snapshot"
    _repository(repository, snapshot_files)
    counter = iter(range(samples + 1))
    budget.seconds["ghost snapshot"] = _timed(
        samples, lambda: snapshot_worktree(repository, f"refs/acode/bench/s{next(counter)}")
    )
    shutil.rmtree(repository)
    progress(
        "budget (ms): "
        + "  ".join(f"{what} {budget.median_ms(what):.1f}" for what in budget.seconds)
    )
    return budget
