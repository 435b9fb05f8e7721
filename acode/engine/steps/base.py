"""The contract every step kind implements.

A step runs in up to three phases. ``prepare`` gathers what resume needs before
the side effect (pre-images, snapshots); it is recorded in ``StepStarted`` only for
kinds whose ``durable_start`` is true, because a step that resume would simply run
again needs no start record and so costs one commit instead of two. ``execute``
performs the side effect. ``recover`` decides, for a step found started but not
finished, whether it is already done, can be run again, or must be rolled back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from acode.domain.config import AcodeConfig
from acode.domain.kinds import StepKind
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

    def input(self) -> dict[str, Any]:
        """What identifies the step's input; its hash is compared on replay."""
        ...

    def prepare(self, env: StepEnv) -> Prepared: ...

    def execute(self, env: StepEnv, prepared: Prepared) -> Outcome: ...

    def recover(self, env: StepEnv, started: dict[str, Any]) -> Recovery: ...

    def value(self, store: EventStore, result: Any) -> Any:
        """What the caller gets back, from the recorded result (and the blobs it names)."""
        ...
