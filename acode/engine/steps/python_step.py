"""python: a callable of the user's, given a StepContext, returning JSON-able data.

Callables are retryable by default: an interrupted call simply runs again, so it
needs no start record. Mark one ``@acode.python_step(retryable=False)`` when running
it twice would do harm; resume then refuses to run it again on its own.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from acode.domain.events import canonical_json
from acode.domain.kinds import StepKind
from acode.engine.steps.base import (
    Outcome,
    Prepared,
    Recovery,
    RecoveryAction,
    StepContext,
    StepEnv,
)
from acode.errors import PlanError, StepFailedError

if TYPE_CHECKING:
    from acode.store.base import EventStore

__all__ = [
    "PythonStep",
    "StepFunction",
    "import_step_function",
    "is_retryable",
    "python_step",
    "recorded_form",
]

StepFunction = Callable[[StepContext], Any]
F = TypeVar("F", bound=StepFunction)
_RETRYABLE_ATTR = "__acode_retryable__"


def python_step(*, retryable: bool = True) -> Callable[[F], F]:
    """Declare how resume treats the function when a call to it was interrupted."""

    def mark(fn: F) -> F:
        setattr(fn, _RETRYABLE_ATTR, retryable)
        return fn

    return mark


def is_retryable(fn: StepFunction) -> bool:
    return bool(getattr(fn, _RETRYABLE_ATTR, True))


def import_step_function(target: str, workspace: Path) -> StepFunction:
    """The callable named ``module.path:function``, importable from the workspace."""
    module_name, _, attr = target.partition(":")
    if str(workspace) not in sys.path:
        sys.path.insert(0, str(workspace))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PlanError(
            f"python step target {target!r}: cannot import {module_name!r}: {exc}",
            hint="the module must be importable from the workspace or the environment",
        ) from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise PlanError(f"python step target {target!r}: {module_name} has no function {attr!r}")
    return fn  # type: ignore[no-any-return]


def _json_form(value: Any) -> bool:
    """Whether ``value`` is its own JSON form (decoding its JSON gives an equal value of
    the same types): no tuple, no non-string key, no float that JSON cannot hold."""
    # Loops, and strings and integers checked in place: a step's result is walked once
    # per step, mostly through such leaves, and a call per leaf was most of the walk.
    kind = type(value)
    if kind is dict:
        for k, v in value.items():
            if type(k) is not str:
                return False
            leaf = type(v)
            if leaf is not str and leaf is not int and not _json_form(v):
                return False
        return True
    if kind is list:
        for item in value:
            leaf = type(item)
            if leaf is not str and leaf is not int and not _json_form(item):
                return False
        return True
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    return False


def recorded_form(result: Any, step_id: str) -> Any:
    """What step ``step_id``'s ``result`` is recorded and returned as: its JSON form, the
    value a replay returns, so that live and replayed calls return the same thing.
    Raises StepFailedError for a value JSON cannot hold."""
    try:
        if _json_form(result):
            return result  # already its JSON form: no round trip
    except RecursionError:
        pass  # a cycle: the encoder names it below
    try:
        return json.loads(canonical_json(result))
    except (TypeError, ValueError) as exc:
        raise StepFailedError(
            f"step {step_id!r} returned {type(result).__name__}, "
            f"which cannot be recorded as JSON: {exc}",
            hint="return dicts, lists, strings, numbers, booleans or None",
        ) from exc


@dataclass(frozen=True)
class PythonStep:
    """A ``python`` step: a function of the caller's, and its input."""

    fn: StepFunction = field(compare=False)
    arguments: Any = None
    kind: StepKind = StepKind.PYTHON
    waits: ClassVar[bool] = False

    @property
    def durable_start(self) -> bool:
        return not is_retryable(self.fn)

    def input(self) -> dict[str, Any]:
        return {"input": self.arguments} if self.arguments is not None else {}

    def prepare(self, env: StepEnv) -> Prepared:
        return Prepared()

    def execute(self, env: StepEnv, prepared: Prepared) -> Outcome:
        result = recorded_form(self.fn(env.ctx), env.ctx.step_id)
        return Outcome(result)

    def recover(self, env: StepEnv, started: dict[str, Any]) -> Recovery:
        if env.strategy == "retry":
            return Recovery(action=RecoveryAction.RETRY, detail="strategy retry runs it again")
        raise StepFailedError(
            f"step {env.ctx.step_id!r} was interrupted and is marked not retryable",
            hint="check whether its effect happened, then resume with `--strategy retry` "
            "to run it again",
        )

    def value(self, store: EventStore, result: Any) -> Any:
        return result
