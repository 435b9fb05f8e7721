"""Which changed files block a resume, and which only inform (docs/requirements.md, 2.1
and 2.3 of "Choosing what to resume"): each is named with the step that last read or
wrote it, and weighed against the steps still to run.

- **conflict** (blocking): another session of the workspace wrote it after this one last
  read or wrote it (for a file of the work tree it has no record of: after it stopped);
- **blocking**: a step still to run reads or writes it, or may (a `run` that declares no
  `paths`, a `commit`, a `python` step), or what runs next is not known (an agent's or a
  program's session);
- **informational**: only steps that are done touched it: what is left to run neither
  reads it nor writes it, so the change cannot alter what the session does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from acode.domain.ids import SHORT_ID_LENGTH
from acode.domain.kinds import StepKind
from acode.resume.environment import ChangedFile, Severity, Toucher
from acode.system.files import covers

if TYPE_CHECKING:
    from acode.domain.continuation import ContinuationPlan
    from acode.domain.plan import Plan, StepSpec
    from acode.engine.journal import Journal
    from acode.store.records import FileTouch

__all__ = ["classify"]

# Kinds that may read or change any file of the work tree: a `run` without `paths`
# (checked apart), a commit (it stages everything), a python step (any code).
_ANY_FILE = {StepKind.COMMIT: "commits every file", StepKind.PYTHON: "may read or change any file"}
_USES = {StepKind.READ: "reads it", StepKind.WRITE: "writes it", StepKind.EDIT: "edits it"}
INFORMATIONAL_REASON = "no step still to run reads or writes it"


def classify(
    journal: Journal,
    plan: Plan | None,
    continuation: ContinuationPlan | None,
    changed: Sequence[ChangedFile],
    *,
    agent: bool,
) -> list[ChangedFile]:
    """``changed``, each with the step that last touched it, its severity and why."""
    if not changed:
        return []
    store, row, summary = journal.store, journal.row, journal.summary
    paths = [c.path for c in changed]
    places = _places(plan)
    own = {t.path: t for t in store.touches(row.sid, paths)}
    # Another session's write counts from when this one last recorded the file, or
    # for a file it has no record of, from when it stopped.
    stopped = journal.history.event(summary.seq).ts_us if summary and summary.seq else 0
    since = {path: own[path].ts_us if path in own else stopped for path in paths}
    conflicts: dict[str, Toucher] = {}
    for touch in store.touches_since(row.sid, paths, min(since.values())):
        # The newest write wins: they come oldest first.
        if touch.kind != StepKind.READ and touch.ts_us > since[touch.path]:
            conflicts[touch.path] = _toucher(touch, {}, other=True)
    remaining = _remaining(plan, continuation)
    unknown = None
    if agent:
        unknown = "what an agent session does next is not known"
    elif plan is None or continuation is None:
        unknown = "a program's session: its steps still to run are not known"
    found = []
    for change in changed:
        conflict = conflicts.get(change.path)
        if conflict is not None:
            severity = Severity.CONFLICT
            reason = (
                f"session {conflict.session} ({conflict.where or conflict.step}: "
                f"{conflict.step}) wrote it after this session last saw it"
            )
        else:
            reason = unknown or _user(remaining, change.path, places) or ""
            severity = Severity.BLOCKING if reason else Severity.INFORMATIONAL
        found.append(
            change._replace(
                touched_by=_toucher(own[change.path], places) if change.path in own else None,
                severity=severity,
                reason=reason or INFORMATIONAL_REASON,
                conflict=conflict,
            )
        )
    return found


def _places(plan: Plan | None) -> dict[str, str]:
    """Each plan step's place, "Task 2, Step 1", by its id."""
    if plan is None:
        return {}
    return {
        step.id: f"Task {t}, Step {s}"
        for t, task in enumerate(plan.tasks, start=1)
        for s, step in enumerate(task.steps, start=1)
    }


def _toucher(touch: FileTouch, places: dict[str, str], *, other: bool = False) -> Toucher:
    step = touch.step or "?"
    where = places.get(step) or (f"step {touch.position + 1}" if touch.position is not None else "")
    return Toucher(
        step=step,
        kind=touch.kind,
        where=where,
        session=touch.session_id[:SHORT_ID_LENGTH] if other else None,
    )


def _remaining(plan: Plan | None, c: ContinuationPlan | None) -> list[StepSpec]:
    if plan is None or c is None:
        return []
    still = {c.in_progress, *c.pending_steps}
    return [step for step in plan.steps() if step.id in still]


def _user(remaining: list[StepSpec], path: str, places: dict[str, str]) -> str | None:
    """Why a step still to run makes a change to ``path`` matter; None: none does."""
    for step in remaining:
        what = _ANY_FILE.get(step.kind)
        if step.kind is StepKind.RUN:
            if not step.paths:
                what = "may read or change any file"
            elif any(covers(pattern, path) for pattern in step.paths):
                what = "may change it"
        elif step.kind in _USES and covers(step.target, path):
            what = _USES[step.kind]
        if what is not None:
            return f"{places[step.id]} ({step.id}), still to run, {what}"
    return None
