"""Continuation planning: given a plan and what was recorded, what resume will do.

Pure: the plan and the step statuses in, a ContinuationPlan out. It is shown to the
person and logged before anything runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from acode.domain.kinds import StepKind
from acode.domain.plan import Plan, StepSpec
from acode.domain.reducer import StepStatus

__all__ = [
    "ContinuationPlan",
    "PlanMismatch",
    "check_positions",
    "expected_action",
    "plan_continuation",
    "replay_ranges",
]


@dataclass(frozen=True)
class ContinuationPlan:
    skipped_tasks: tuple[str, ...]
    skipped_steps: tuple[str, ...]
    in_progress: str | None
    in_progress_action: str | None
    pending_steps: tuple[str, ...]
    resume_task: str | None
    resume_task_number: int | None
    resume_step_number: int | None

    def to_dict(self) -> dict[str, object]:
        return {
            "skipped_tasks": list(self.skipped_tasks),
            "skipped_steps": list(self.skipped_steps),
            "in_progress": self.in_progress,
            "in_progress_action": self.in_progress_action,
            "pending_steps": list(self.pending_steps),
            "resume_task": self.resume_task,
        }


def expected_action(step: StepSpec) -> str:
    """What resume is expected to do with an interrupted step of this kind; the final
    word comes from the step itself when it runs (hashes, trailers, checks)."""
    match step.kind:
        case StepKind.WRITE | StepKind.EDIT:
            return "compare with pre/post image"
        case StepKind.RUN if step.idempotent:
            return "retry"
        case StepKind.RUN if step.check:
            return "check, else rollback_retry"
        case StepKind.RUN:
            return "rollback_retry" if step.paths else "retry"
        case StepKind.APPROVE:
            return "ask again unless decided"
        case StepKind.COMMIT:
            return "find commit by trailer, else commit"
        case _:
            return "retry"


def plan_continuation(plan: Plan, statuses: Mapping[str, StepStatus]) -> ContinuationPlan:
    skipped_tasks: list[str] = []
    skipped: list[str] = []
    pending: list[str] = []
    in_progress: StepSpec | None = None
    resume_at: tuple[str, int, int] | None = None
    for t_index, task in enumerate(plan.tasks, start=1):
        task_done = True
        for s_index, step in enumerate(task.steps, start=1):
            status = statuses.get(step.id)
            if status is StepStatus.COMPLETED:
                skipped.append(step.id)
                continue
            task_done = False
            if resume_at is None:
                resume_at = (task.id, t_index, s_index)
            if status in (StepStatus.IN_PROGRESS, StepStatus.ROLLED_BACK) and in_progress is None:
                in_progress = step
            else:
                pending.append(step.id)
        if task_done:
            skipped_tasks.append(task.id)
    return ContinuationPlan(
        skipped_tasks=tuple(skipped_tasks),
        skipped_steps=tuple(skipped),
        in_progress=in_progress.id if in_progress else None,
        in_progress_action=expected_action(in_progress) if in_progress else None,
        pending_steps=tuple(pending),
        resume_task=resume_at[0] if resume_at else None,
        resume_task_number=resume_at[1] if resume_at else None,
        resume_step_number=resume_at[2] if resume_at else None,
    )


class PlanMismatch(ValueError):
    """The recorded plan and the recorded step positions disagree: no continuation can
    be planned from them."""


def check_positions(plan: Plan, next_position: int, unfinished: Mapping[int, str]) -> None:
    """Raise PlanMismatch unless the recorded steps fit the plan: no more positions than it
    has steps, and each unfinished step (position -> step id) where the plan has it. A
    program that ran other steps through the library than the plan it recorded leaves
    such a record."""
    steps = plan.steps()
    if next_position > len(steps):
        raise PlanMismatch(f"{next_position} steps were recorded, but its plan has {len(steps)}")
    for position, step_id in sorted(unfinished.items()):
        planned = steps[position].id if position < len(steps) else None
        if planned != step_id:
            raise PlanMismatch(
                f"step {position + 1} was recorded as {step_id!r}, but its plan has "
                + (f"{planned!r} there" if planned else f"only {len(steps)} steps")
            )


def replay_ranges(next_position: int, unfinished: Iterable[int]) -> list[tuple[int, int]]:
    """The positions of the completed steps, in the order a resume replays them (steps
    take their positions one after the other, so event order is position order), as
    (first, last) ranges: every position before ``next_position`` but the unfinished."""
    ranges: list[tuple[int, int]] = []
    start = 0
    for gap in sorted(p for p in set(unfinished) if p < next_position):
        if gap > start:
            ranges.append((start, gap - 1))
        start = gap + 1
    if next_position > start:
        ranges.append((start, next_position - 1))
    return ranges
