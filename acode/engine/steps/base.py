"""The contract every step kind implements.

A step runs in up to three phases. ``prepare`` gathers what resume needs before
the side effect (pre-images, snapshots); it is recorded in ``StepStarted`` only for
kinds whose ``durable_start`` is true, because a step that resume would simply run
again needs no start record and so costs one commit instead of two. ``execute``
performs the side effect. ``recover`` decides, for a step found started but not
finished, whether it is already done, can be run again, or must be rolled back.

A step that ``waits`` (approve: for a person's decision) is not recovered: found
unfinished, it is taken up again as the same attempt, and ``awaited`` may end it before
it starts. Its ``Outcome`` may record events of its own with the completion (the
decision), move the session to a state on completion, or say that it waits (``Wait``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from acode.domain.config import AcodeConfig
from acode.domain.events import EventType
from acode.domain.kinds import StepKind
from acode.domain.states import SessionState
from acode.engine.observer import StepPhase
from acode.store.records import FileRow

if TYPE_CHECKING:
    from acode.store.base import EventStore

__all__ = [
    "InProgressStrategy",
    "Outcome",
    "Prepared",
    "Recovery",
    "RecoveryAction",
    "StepAction",
    "StepContext",
    "StepEnv",
    "Wait",
    "WaitingAction",
]

InProgressStrategy = Literal["rollback", "retry", "prompt"]


@dataclass(frozen=True)
class StepContext:
    """What a step's code may know about itself. ``idempotency_key`` is stable for an
    attempt: pass it to external systems that deduplicate requests."""

    session_id: str
    step_id: str
    kind: str
    attempt: int
    position: int
    idempotency_key: str
    workspace: Path
    task_id: str | None = None


class StepEnv(NamedTuple):
    """What a step kind's code is given: the step, the store, the settings."""

    ctx: StepContext
    store: EventStore
    config: AcodeConfig
    strategy: InProgressStrategy = "rollback"
    # On resume: files changed after this instant (ns) are not the interrupted step's
    # doing, and its rollback leaves them alone (acode.engine.rollback).
    fresh_after_ns: int | None = None


class Prepared(NamedTuple):
    """Recorded in StepStarted (``record``) with the blobs it refers to."""

    record: Mapping[str, Any] = MappingProxyType({})
    blobs: tuple[tuple[str, bytes], ...] = ()


class Wait(NamedTuple):
    """A step that cannot complete now (an approval no one can give now). Unless its
    position has a `steps` row already, it records an ``event`` (the step's fields and
    ``fields``) and the session's move to ``state``, with the row; ``error`` is raised."""

    event: EventType
    fields: Mapping[str, Any]
    state: tuple[SessionState, str]
    error: BaseException


class Outcome(NamedTuple):
    """A step's result, with what its commit records besides."""

    result: Any
    blobs: tuple[tuple[str, bytes], ...] = ()
    messages: tuple[tuple[str, dict[str, Any]], ...] = ()
    files: tuple[FileRow, ...] = ()  # workspace files as the step left them
    # What the caller gets back, when the step has it at hand (a read's text): a step
    # just run needs no round trip through the store. None: StepAction.value decodes it
    # from ``result``, as a replay does.
    value: Any = None
    # Events of the step's own, recorded before its completion in the same commit.
    events: tuple[tuple[EventType, dict[str, Any]], ...] = ()
    # The state the completion moves the session to, and why.
    state: tuple[SessionState, str] | None = None
    # The step does not complete now: nothing above is recorded.
    wait: Wait | None = None
    # What the observer is told of the step's end, instead of DONE with its duration.
    told: tuple[StepPhase, str] | None = None


class RecoveryAction(StrEnum):
    ALREADY_DONE = "skip"
    RETRY = "retry"
    ROLLBACK_AND_RETRY = "rollback_retry"


class Recovery(NamedTuple):
    """What resume did with an interrupted step, and why."""

    action: RecoveryAction
    detail: str
    result: Any = None
    restored: tuple[str, ...] = ()
    files: tuple[FileRow, ...] = ()


class StepAction(Protocol):
    @property
    def kind(self) -> StepKind: ...

    @property
    def durable_start(self) -> bool: ...

    @property
    def waits(self) -> bool:
        """Whether the step may wait (a ``WaitingAction``)."""
        ...

    def input(self) -> dict[str, Any]:
        """What identifies the step's input; its hash is compared on replay."""
        ...

    def prepare(self, env: StepEnv) -> Prepared: ...

    def execute(self, env: StepEnv, prepared: Prepared) -> Outcome: ...

    def recover(self, env: StepEnv, started: dict[str, Any]) -> Recovery: ...

    def value(self, store: EventStore, result: Any) -> Any:
        """What the caller gets back, from the recorded result (and the blobs it names)."""
        ...


class WaitingAction(StepAction, Protocol):
    def awaited(self, env: StepEnv, resumed: bool) -> Outcome | None:
        """Before the step starts: its outcome when it needs no run (what it waited for
        came while it waited: ``resumed``, its position has a `steps` row), or one that
        waits when it cannot start now; None to start it."""
        ...
