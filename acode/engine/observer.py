"""What a running session tells the outside world (progress bars, logs, JSON lines)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

__all__ = [
    "ApprovalRequest",
    "Approver",
    "NullObserver",
    "Observer",
    "StepNotice",
    "StepPhase",
]


class StepPhase(StrEnum):
    STARTED = "started"
    DONE = "done"
    SKIPPED = "skipped"  # completed in an earlier run; its recorded result is used
    RECOVERED = "recovered"  # found interrupted and already applied
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


@dataclass(frozen=True)
class StepNotice:
    """A step starting, ending or failing, as an observer is told."""

    phase: StepPhase
    position: int
    step_id: str
    kind: str
    title: str
    task_id: str | None = None
    total: int | None = None
    detail: str | None = None
    duration_ms: int | None = None


class Observer(Protocol):
    def on_step(self, notice: StepNotice) -> None: ...


class NullObserver:
    def on_step(self, notice: StepNotice) -> None:
        return None


@dataclass(frozen=True)
class ApprovalRequest:
    """A question an approval step puts to a person."""

    session_id: str
    step_id: str
    question: str
    subject: object


# Returns the decision, or None when no one can be asked now.
Approver = Callable[[ApprovalRequest], bool | None]
