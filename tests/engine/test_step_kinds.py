"""The registry of step kinds (``acode.domain.kinds.STEP_KINDS``) holds every kind, and
everything a kind must have exists: its action, its library method, its plan keys and
their docs. A kind added to ``StepKind`` without one of them fails here."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path

import pytest

from acode.domain.kinds import STEP_KINDS, KindSpec, StepKind
from acode.engine.session import Session

__all__: list[str] = []

DOCS = Path(__file__).resolve().parents[2] / "docs"
KINDS = [STEP_KINDS[kind] for kind in StepKind]


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` (a markdown heading line) up to the next heading."""
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    following = re.search(r"^#{1,3} ", text[start:], flags=re.MULTILINE)
    return text[start : start + following.start()] if following else text[start:]


def test_every_kind_is_registered_once() -> None:
    assert list(STEP_KINDS) == list(StepKind)
    assert all(spec.kind is kind for kind, spec in STEP_KINDS.items())
    methods = [spec.method for spec in KINDS]
    assert len(set(methods)) == len(methods)


@pytest.mark.parametrize("spec", KINDS, ids=[spec.kind.value for spec in KINDS])
def test_a_kind_has_its_action(spec: KindSpec) -> None:
    module_name, _, name = spec.action.partition(":")
    assert module_name.startswith("acode.engine.steps.")
    action = getattr(importlib.import_module(module_name), name)
    # Every action is a frozen dataclass whose `kind` field says its kind.
    assert dataclasses.is_dataclass(action)
    assert inspect.isclass(action)
    kinds = [f.default for f in dataclasses.fields(action) if f.name == "kind"]
    assert kinds == [spec.kind]
    for method in ("input", "value"):
        assert callable(getattr(action, method, None)), f"{name} has no {method}()"
    # A field, or a property where it depends on the step (a run step's idempotence).
    assert isinstance(getattr(action, "durable_start", None), bool | property)
    # A step that waits (steps/base.py WaitingAction) says what came while it waited.
    waits = getattr(action, "waits", None)
    assert isinstance(waits, bool)
    if waits:
        assert callable(getattr(action, "awaited", None)), f"{name} has no awaited()"


@pytest.mark.parametrize("spec", KINDS, ids=[spec.kind.value for spec in KINDS])
def test_a_kind_has_its_library_method(spec: KindSpec) -> None:
    method = getattr(Session, spec.method, None)
    assert callable(method), f"Session has no {spec.method}()"
    assert list(inspect.signature(method).parameters)[1] == "step_id"
    library = (DOCS / "library.md").read_text(encoding="utf-8")
    assert f"| `s.{spec.method}(id, " in library, f"docs/library.md has no row for s.{spec.method}"


@pytest.mark.parametrize("spec", KINDS, ids=[spec.kind.value for spec in KINDS])
def test_a_kind_and_its_plan_keys_are_documented(spec: KindSpec) -> None:
    plans = (DOCS / "plans.md").read_text(encoding="utf-8")
    section = _section(plans, f"### {spec.kind}")
    assert f"{spec.kind}: " in section or f"| `{spec.kind}` |" in section, (
        f"docs/plans.md: the {spec.kind} section shows no step of it"
    )
    for key in spec.keys:
        assert f"| `{key}` |" in section, f"docs/plans.md: {spec.kind} does not list `{key}`"
    resume = _section(plans, "## What resume does with each kind")
    rows = [line.split("|")[1] for line in resume.splitlines() if line.startswith("| ")]
    assert any(spec.kind in re.split(r"\W+", cell) for cell in rows[1:]), (
        f"docs/plans.md: no row says what resume does with a {spec.kind} step"
    )


def test_the_plan_takes_the_registered_keys_and_no_other() -> None:
    from acode.domain.plan_validation import build_plan
    from acode.errors import PlanError

    def plan(step: dict[str, object]) -> object:
        task = {"id": "t", "title": "t", "steps": [{"id": "s", **step}]}
        return build_plan({"title": "t", "tasks": [task]}, source="p.yml", line_of=lambda _: 1)

    values = {"idempotent": True, "timeout": 1, "paths": ["a"], "check": "true"}
    plan({"run": "true", **{key: values[key] for key in STEP_KINDS[StepKind.RUN].keys}})
    with pytest.raises(PlanError, match="content"):
        plan({"read": "a", "content": "x"})  # a key of another kind
