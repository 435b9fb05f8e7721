"""What a session tells its observer of a step's phases (started, done, skipped, ...)."""

from __future__ import annotations

import time
from collections.abc import Callable

from acode.domain.kinds import StepKind
from acode.engine.journal import Journal
from acode.engine.observer import NullObserver, Observer, StepNotice, StepPhase

__all__ = ["Notice", "ignore", "step_notice"]

# Tells the observer of one phase: (phase, detail, *, timed=False).
Notice = Callable[..., None]


def ignore(*_: object, **__: object) -> None:
    return None


def step_notice(
    observer: Observer,
    journal: Journal,
    position: int,
    step_id: str,
    kind: StepKind,
    task: str | None,
    title: str | None,
) -> Notice:
    """What tells ``observer`` of a phase of this step; with no observer, nothing (not
    even the notice) is made."""
    if isinstance(observer, NullObserver):
        return ignore
    assert journal.summary is not None
    total = journal.summary.total_steps
    # From now, not from STARTED: what comes before the step's command (a recovery, a
    # ghost snapshot of the work tree, the durable start record) is the step's cost
    # too, and in a big repository it is most of it.
    began = time.monotonic()

    def tell(phase: StepPhase, detail: str | None, *, timed: bool = False) -> None:
        """``timed``: give the time since this step was taken up."""
        duration_ms = int((time.monotonic() - began) * 1000) if timed else None
        observer.on_step(
            StepNotice(
                phase=phase,
                position=position,
                step_id=step_id,
                kind=kind.value,
                title=title or step_id,
                task_id=task,
                total=total,
                detail=detail,
                duration_ms=duration_ms,
            )
        )

    return tell
