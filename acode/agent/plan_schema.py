"""The plan a model submits: its published JSON schema, its values, and its validation.

Pure apart from reading the schema file once at import. ``validate_plan`` takes what the
model answered (tool-call arguments or message content, as text or already parsed) and
returns either the plan or the problems, one short line each, naming the JSON path: the loop
sends them back to the model, so they say what is wrong and what is expected.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

from acode.errors import PlanError

__all__ = [
    "MAX_TITLE_CHARS",
    "PLAN_SCHEMA",
    "AgentPlan",
    "AgentStep",
    "AgentTask",
    "describe_value",
    "plan_feedback",
    "validate_plan",
]

PLAN_SCHEMA: Final[dict[str, Any]] = json.loads(
    resources.files("acode.agent").joinpath("plan.schema.json").read_text(encoding="utf-8")
)
# A length rule lives here, not in the schema: llama.cpp turns maxLength into a grammar
# that makes small models emit malformed arguments.
MAX_TITLE_CHARS: Final = 200
# The shape a model is asked for, quoted in the problems so that a retry can copy it.
_EXAMPLE: Final = '{"tasks": [{"title": "...", "steps": [{"title": "..."}]}]}'
# Enough of a wrong value to recognise it, short enough to keep a problem on one line.
_SHOWN_CHARS: Final = 40
_FEEDBACK_PROBLEMS: Final = 12


@dataclass(frozen=True, slots=True)
class AgentStep:
    """One step of a task, as the model titled it."""

    title: str


@dataclass(frozen=True, slots=True)
class AgentTask:
    """One task: ``id`` is ``t1``, ``t2``, ... by its position in the plan."""

    id: str
    title: str
    steps: tuple[AgentStep, ...]


@dataclass(frozen=True, slots=True)
class AgentPlan:
    """A validated plan. ``to_dict`` is what the log records; ``from_dict`` reads it back."""

    tasks: tuple[AgentTask, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": [
                {
                    "id": task.id,
                    "title": task.title,
                    "steps": [{"title": step.title} for step in task.steps],
                }
                for task in self.tasks
            ]
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentPlan:
        """The plan ``to_dict`` gave. Ids are derived from the order again, so a recorded
        plan and a freshly validated one are equal values."""
        plan, problems = _build(data, max_tasks=None, max_steps=None)
        if plan is None:
            raise PlanError(
                f"the recorded agent plan is invalid: {problems[0]}",
                hint="the session log holds a plan this version of acode cannot read; "
                "start a new session with `acode run`",
            )
        return plan


def validate_plan(
    answer: object, *, max_tasks: int, max_steps_per_task: int = 20
) -> tuple[AgentPlan | None, tuple[str, ...]]:
    """``(plan, ())`` for a valid answer, ``(None, problems)`` otherwise. Never raises.

    ``answer`` is a JSON text (possibly in a ```json fence or with prose around one JSON
    object) or an already parsed value. Titles are stripped; unknown keys are ignored.
    """
    data, problem = _parse(answer)
    if problem is not None:
        return None, (problem,)
    return _build(data, max_tasks=max_tasks, max_steps=max_steps_per_task)


def plan_feedback(problems: Sequence[str]) -> str:
    """The user message that answers an invalid plan, so that the model can retry."""
    shown = [f"- {problem}" for problem in problems[:_FEEDBACK_PROBLEMS]]
    if len(problems) > _FEEDBACK_PROBLEMS:
        shown.append(f"- ... and {len(problems) - _FEEDBACK_PROBLEMS} more problems")
    listing = "\n".join(shown) if shown else "- the plan could not be read"
    return (
        f"Your plan was not valid:\n{listing}\n"
        f"Call submit_plan again with the whole corrected plan, shaped as {_EXAMPLE}: "
        "at least one task, every task with a non-empty title and at least one step, "
        f"every step with a non-empty title, titles at most {MAX_TITLE_CHARS} characters."
    )


# -- parsing --------------------------------------------------------------------------


def _parse(answer: object) -> tuple[object, str | None]:
    """The JSON value of the answer, or a problem saying why there is none."""
    if not isinstance(answer, str | bytes):
        return answer, None
    text = answer.decode("utf-8", "replace") if isinstance(answer, bytes) else answer
    if not text.strip():
        return None, f"not JSON: the answer was empty; expected {_EXAMPLE}"
    try:
        return json.loads(text), None
    except (ValueError, RecursionError) as whole_error:
        # Models wrap the object in fences or prose: the first {...} block that parses wins.
        first_error: ValueError | RecursionError | None = None
        for block in _object_blocks(text):
            try:
                return json.loads(block), None
            except (ValueError, RecursionError) as exc:
                first_error = first_error or exc
        return None, f"not JSON: {_json_error(first_error or whole_error)}"


def _object_blocks(text: str) -> Iterator[str]:
    """The balanced top-level ``{...}`` blocks of ``text``, in order. Braces inside JSON
    strings do not count; an unclosed block ends the search."""
    start = text.find("{")
    while start != -1:
        end = _block_end(text, start)
        if end is None:
            return
        yield text[start : end + 1]
        start = text.find("{", end + 1)


def _block_end(text: str, start: int) -> int | None:
    depth = 0
    in_string = escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index
    return None


def _json_error(exc: ValueError | RecursionError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (line {exc.lineno}, column {exc.colno})"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc)


# -- building -------------------------------------------------------------------------


def _build(
    data: object, *, max_tasks: int | None, max_steps: int | None
) -> tuple[AgentPlan | None, tuple[str, ...]]:
    problems: list[str] = []
    if not isinstance(data, Mapping):
        return None, (f"expected a JSON object shaped as {_EXAMPLE}, got {describe_value(data)}",)
    if "tasks" not in data:
        return None, (f"tasks: missing; expected {_EXAMPLE}",)
    raw_tasks = data["tasks"]
    if not isinstance(raw_tasks, list | tuple):
        return None, (f"tasks: expected a list of tasks, got {describe_value(raw_tasks)}",)
    if not raw_tasks:
        problems.append("tasks: expected at least 1 task")
    elif max_tasks is not None and len(raw_tasks) > max_tasks:
        problems.append(f"tasks: {len(raw_tasks)} tasks, at most {max_tasks}")
    tasks = [
        _task(raw, f"tasks[{index}]", f"t{index + 1}", max_steps, problems)
        for index, raw in enumerate(raw_tasks)
    ]
    if problems:
        return None, tuple(problems)
    return AgentPlan(tasks=tuple(task for task in tasks if task is not None)), ()


def _task(
    raw: object, path: str, task_id: str, max_steps: int | None, problems: list[str]
) -> AgentTask | None:
    if not isinstance(raw, Mapping):
        problems.append(
            f'{path}: expected an object with "title" and "steps", got {describe_value(raw)}'
        )
        return None
    title = _title(raw, path, problems)
    steps = _steps(raw, path, max_steps, problems)
    if title is None or steps is None:
        return None
    return AgentTask(id=task_id, title=title, steps=steps)


def _steps(
    raw_task: Mapping[Any, Any], path: str, max_steps: int | None, problems: list[str]
) -> tuple[AgentStep, ...] | None:
    path = f"{path}.steps"
    if "steps" not in raw_task:
        problems.append(f'{path}: missing; expected a list such as [{{"title": "..."}}]')
        return None
    raw_steps = raw_task["steps"]
    if not isinstance(raw_steps, list | tuple):
        problems.append(f"{path}: expected a list of steps, got {describe_value(raw_steps)}")
        return None
    before = len(problems)
    if not raw_steps:
        problems.append(f"{path}: expected at least 1 step")
    elif max_steps is not None and len(raw_steps) > max_steps:
        problems.append(f"{path}: {len(raw_steps)} steps, at most {max_steps}")
    steps: list[AgentStep] = []
    for index, raw in enumerate(raw_steps):
        step_path = f"{path}[{index}]"
        if not isinstance(raw, Mapping):
            problems.append(
                f'{step_path}: expected an object with "title", got {describe_value(raw)}'
            )
            continue
        title = _title(raw, step_path, problems)
        if title is not None:
            steps.append(AgentStep(title=title))
    return tuple(steps) if len(problems) == before else None


def _title(raw: Mapping[Any, Any], path: str, problems: list[str]) -> str | None:
    path = f"{path}.title"
    if "title" not in raw:
        problems.append(f"{path}: missing; expected a non-empty string")
        return None
    value = raw["title"]
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{path}: expected a non-empty string, got {describe_value(value)}")
        return None
    title = value.strip()
    if len(title) > MAX_TITLE_CHARS:
        problems.append(f"{path}: {len(title)} characters, at most {MAX_TITLE_CHARS}")
        return None
    return title


def describe_value(value: object) -> str:
    """A wrong value as a model would recognise it in a problem: its JSON cut short, or
    its kind for a container. Shared with the tool-call checks."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        # Not JSON at all (a caller's parsed value) or an integer too long to print.
        return f"a {type(value).__name__}"
    return text if len(text) <= _SHOWN_CHARS else f"{text[: _SHOWN_CHARS - 3]}..."
