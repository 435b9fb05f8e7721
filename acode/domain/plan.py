"""Plans: tasks of steps as frozen values.

Pure: no YAML and no I/O. ``Plan.to_dict()`` has the shape of a plan file, so the dict
recorded in the event log reads like the file it came from and goes back through the
checks of a plan file (``acode.domain.plan_validation``) in ``Plan.from_dict``; a plan
acode recorded and proved unchanged comes back without them (``Plan.from_record``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from acode.domain.frozen import build
from acode.domain.kinds import StepKind

__all__ = ["Plan", "StepSpec", "TaskSpec"]

_TITLE_WIDTH = 60


def _default_title(kind: StepKind, target: str) -> str:
    lines = target.strip().splitlines()
    title = f"{kind.value}: {lines[0] if lines else ''}"
    return title if len(title) <= _TITLE_WIDTH else title[: _TITLE_WIDTH - 3] + "..."


@dataclass(frozen=True)
class StepSpec:
    """One step as the plan declares it. ``target`` is the value of the kind key: a path
    (read, write, edit), a command (run), a question (approve), a prompt (model), a commit
    message (commit) or ``module.path:function`` (python). An empty ``title`` is derived
    from the kind and target."""

    id: str
    kind: StepKind
    task_id: str
    target: str
    title: str = ""
    content: str | None = None
    old: str | None = None
    new: str | None = None
    idempotent: bool = False
    timeout: float | None = None
    paths: tuple[str, ...] = ()
    check: str | None = None
    line: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.title:
            object.__setattr__(self, "title", _default_title(self.kind, self.target))

    def to_dict(self) -> dict[str, object]:
        """The step as a plan file writes it; defaults, task id and line are left out."""
        data: dict[str, object] = {"id": self.id}
        if self.title != _default_title(self.kind, self.target):
            data["title"] = self.title
        data[self.kind.value] = self.target
        optional: dict[str, object | None] = {
            "content": self.content,
            "old": self.old,
            "new": self.new,
            "idempotent": True if self.idempotent else None,
            "timeout": self.timeout,
            "paths": list(self.paths) if self.paths else None,
            "check": self.check,
        }
        data.update((key, value) for key, value in optional.items() if value is not None)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object], task_id: str) -> StepSpec:
        """Rebuild a step from ``to_dict()``; the same checks as a plan file, raising PlanError."""
        from acode.domain.plan_validation import build_step

        return build_step(data, task_id)


@dataclass(frozen=True)
class TaskSpec:
    """A named group of steps; its steps run in order."""

    id: str
    title: str
    steps: tuple[StepSpec, ...]
    line: int | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "title": self.title, "steps": [s.to_dict() for s in self.steps]}


@dataclass(frozen=True)
class Plan:
    """Ordered tasks of ordered steps; step ids are unique across the whole plan."""

    title: str
    tasks: tuple[TaskSpec, ...]

    def steps(self) -> tuple[StepSpec, ...]:
        """Every step of every task, in the order they run."""
        return tuple(step for task in self.tasks for step in task.steps)

    def to_dict(self) -> dict[str, object]:
        """A JSON-able dict in the shape of a plan file (this is what the event log records)."""
        return {"title": self.title, "tasks": [task.to_dict() for task in self.tasks]}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Plan:
        """Rebuild a plan from ``to_dict()``, with the checks of a plan file."""
        from acode.domain.plan_validation import build_plan

        return build_plan(data, source="recorded plan")

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> Plan:
        """Rebuild a plan that acode recorded and has proven unchanged (its hash is in
        the signed checkpoints), without the checks of a plan file: they were made when
        it was recorded, and cost a long plan's resume noticeably
        (docs/benchmarks.md, "Figures behind design choices")."""
        return cls(
            title=data["title"],
            tasks=tuple(
                TaskSpec(
                    id=task["id"],
                    title=task["title"],
                    steps=tuple(_recorded_step(step, task["id"]) for step in task["steps"]),
                )
                for task in data["tasks"]
            ),
        )


_KIND_BY_NAME = {kind.value: kind for kind in StepKind}


def _recorded_step(data: Mapping[str, Any], task_id: str) -> StepSpec:
    # Built without the frozen dataclass's __init__ (acode.domain.frozen says why; with
    # __post_init__ it is most of planning the continuation of a long plan): the values
    # and the derived title are the ones __init__ would set, which a test compares.
    for key in data:
        kind = _KIND_BY_NAME.get(key)
        if kind is not None:
            break
    else:
        raise KeyError(f"recorded step {data.get('id')!r} has no kind")
    target = data[key]
    get = data.get
    paths = get("paths")
    return build(
        StepSpec,
        id=data["id"],
        kind=kind,
        task_id=task_id,
        target=target,
        title=get("title") or _default_title(kind, target),
        content=get("content"),
        old=get("old"),
        new=get("new"),
        idempotent=bool(get("idempotent", False)),
        timeout=get("timeout"),
        paths=tuple(paths) if paths else (),
        check=get("check"),
        line=None,
    )
