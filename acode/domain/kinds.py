"""Step kinds: what every layer names a step's kind by, and the one registry of them.

Apart from the plan (``acode.domain.plan``), which builds and validates whole plans, so
that running a step or resuming a session does not load the plan's validation.

``STEP_KINDS`` says, for each kind, everything a new kind must have: the keys a plan's
step of it takes, its action (the class in ``acode/engine/steps/`` that runs it, named
by its import path: a kind's module loads on its first step), the ``Session`` method
that runs it from the library, and the sections of docs/plans.md and docs/library.md
that describe it. The plan's validation reads its keys from here;
tests/engine/test_step_kinds.py holds the actions, methods and docs to it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

__all__ = ["STEP_KINDS", "KindSpec", "StepKind"]


class StepKind(StrEnum):
    """What a step does. A step names its kind by carrying exactly one key of that name."""

    READ = "read"
    WRITE = "write"
    EDIT = "edit"
    RUN = "run"
    MODEL = "model"
    APPROVE = "approve"
    COMMIT = "commit"
    PYTHON = "python"


class KindSpec(NamedTuple):
    """One step kind, as every layer knows it. A named tuple, not a frozen dataclass:
    every session's process loads this module (docs/architecture.md, "Layers")."""

    kind: StepKind
    # What the value of the kind key is, for messages such as "step 'x' has an empty
    # command" (and the word the library's method calls that argument).
    target: str
    # The keys a plan's step of this kind takes besides `id`, `title` and the kind key.
    keys: tuple[str, ...]
    # The step action, "module:Class" under acode.engine.steps.
    action: str
    # The Session method a library caller runs a step of this kind with.
    method: str


_STEPS = "acode.engine.steps"


def _spec(kind: StepKind, target: str, keys: tuple[str, ...], action: str, method: str) -> KindSpec:
    return KindSpec(kind=kind, target=target, keys=keys, action=f"{_STEPS}.{action}", method=method)


STEP_KINDS: dict[StepKind, KindSpec] = {
    spec.kind: spec
    for spec in (
        _spec(StepKind.READ, target="path", keys=(), action="file_steps:ReadStep", method="read"),
        _spec(
            StepKind.WRITE,
            target="path",
            keys=("content",),
            action="file_steps:WriteStep",
            method="write",
        ),
        _spec(
            StepKind.EDIT,
            target="path",
            keys=("old", "new"),
            action="file_steps:EditStep",
            method="edit",
        ),
        _spec(
            StepKind.RUN,
            target="command",
            keys=("idempotent", "timeout", "paths", "check"),
            action="run_step:RunStep",
            method="run",
        ),
        # Session.chat, the agent's model call, is a step of this kind too (ChatStep).
        _spec(
            StepKind.MODEL, target="prompt", keys=(), action="model_step:ModelStep", method="model"
        ),
        _spec(
            StepKind.APPROVE,
            target="question",
            keys=(),
            action="approve_step:ApproveStep",
            method="approve",
        ),
        _spec(
            StepKind.COMMIT,
            target="message",
            keys=(),
            action="commit_step:CommitStep",
            method="commit",
        ),
        _spec(
            StepKind.PYTHON,
            target="function",
            keys=(),
            action="python_step:PythonStep",
            method="step",
        ),
    )
}
