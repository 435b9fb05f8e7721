"""Where a session is in its plan, as the manual writes it: "Task 2/3, Step 3/5
(implement > build)". The numbers come from the plan; the ids are what the history
records, and all a session without a plan (an agent's, a library's) has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a library session, which has no plan, never loads the plan module
    from acode.domain.plan import Plan

__all__ = ["Position", "position_in"]


@dataclass(frozen=True, slots=True)
class Position:
    """A step's place: its ids, and with a plan its task's and its own number, each
    out of how many there are."""

    step_id: str
    task_id: str | None = None
    task_number: int | None = None
    task_count: int | None = None
    step_number: int | None = None  # within its task
    step_count: int | None = None  # of its task

    def describe(self) -> str:
        """ "Task 2/3, Step 3/5 (implement > build)"; without a plan "implement > build"."""
        ids = f"{self.task_id} > {self.step_id}" if self.task_id else self.step_id
        if self.task_number is None:
            return ids
        return (
            f"Task {self.task_number}/{self.task_count}, "
            f"Step {self.step_number}/{self.step_count} ({ids})"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "task": self.task_id,
            "step": self.step_id,
            "task_number": self.task_number,
            "task_count": self.task_count,
            "step_number": self.step_number,
            "step_count": self.step_count,
        }


def position_in(plan: Plan | None, step_id: str, task_id: str | None = None) -> Position:
    """The place of ``step_id`` in ``plan``; only its ids when there is no plan or the
    plan does not have it."""
    if plan is not None:
        for t_number, task in enumerate(plan.tasks, start=1):
            for s_number, step in enumerate(task.steps, start=1):
                if step.id == step_id:
                    return Position(
                        step_id=step_id,
                        task_id=task.id,
                        task_number=t_number,
                        task_count=len(plan.tasks),
                        step_number=s_number,
                        step_count=len(task.steps),
                    )
    return Position(step_id=step_id, task_id=task_id)
