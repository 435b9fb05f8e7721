"""The plan a model submits: its published JSON schema, its values, and its validation.

Pure apart from reading the schema file once at import. ``validate_plan`` takes what the
model answered (tool-call arguments or message content, as text or already parsed) and
returns either the plan or the problems, one short line each, naming the JSON path: the loop
sends them back to the model, so they say what is wrong and what is expected. The schema is
checked by jsonschema, which reports every problem at once; the rules it cannot say (a
title's stripped length, the JSON found in prose) are code here.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Final, cast

from acode.errors import PlanError

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = [
    "MAX_TITLE_CHARS",
    "PLAN_SCHEMA",
    "AgentPlan",
    "AgentStep",
    "AgentTask",
    "bounded_plan_schema",
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
# Enough of a wrong value to recognise it, short enough to keep a problem on one line.
_SHOWN_CHARS: Final = 40
# jsonschema's own message, for a rule of the schema that has no wording here, cut as short.
_SHOWN_MESSAGE: Final = 120
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


# -- checking and building -------------------------------------------------------------

# A problem's place in the answer: ("tasks", 2, "steps", 0, "title") is tasks[2].steps[0].title.
_Path = tuple[str | int, ...]


def bounded_plan_schema(max_tasks: int | None, max_steps: int | None) -> dict[str, Any]:
    """``PLAN_SCHEMA`` with the plan's size bounded (``maxItems``), where a bound is given:
    what the plan tool offers a model and what its answer is checked against."""
    schema = copy.deepcopy(PLAN_SCHEMA)
    tasks = schema["properties"]["tasks"]
    if max_tasks is not None:
        tasks["maxItems"] = max_tasks
    if max_steps is not None:
        tasks["items"]["properties"]["steps"]["maxItems"] = max_steps
    return schema


def _build(
    data: object, *, max_tasks: int | None, max_steps: int | None
) -> tuple[AgentPlan | None, tuple[str, ...]]:
    found = [*_schema_problems(data, _validator(max_tasks, max_steps)), *_title_problems(data)]
    if found:
        found.sort(key=lambda problem: _order(problem[0]))
        return None, tuple(_located(path, text) for path, text in found)
    assert isinstance(data, Mapping)  # the schema took it: tasks of steps, all titled
    return AgentPlan(
        tasks=tuple(
            AgentTask(
                id=f"t{number}",
                title=task["title"].strip(),
                steps=tuple(AgentStep(title=step["title"].strip()) for step in task["steps"]),
            )
            for number, task in enumerate(data["tasks"], start=1)
        )
    ), ()


@functools.lru_cache(maxsize=8)
def _validator(max_tasks: int | None, max_steps: int | None) -> Validator:
    from jsonschema import Draft202012Validator, validators

    # A caller's parsed value may hold any mapping or a tuple where JSON has an object or an
    # array; the problems describe them so (describe_value).
    types = Draft202012Validator.TYPE_CHECKER.redefine_many(
        {
            "object": lambda _checker, value: isinstance(value, Mapping),
            "array": lambda _checker, value: isinstance(value, list | tuple),
        }
    )
    checker = validators.extend(  # type: ignore[no-untyped-call]
        Draft202012Validator, type_checker=types
    )
    return cast("Validator", checker(bounded_plan_schema(max_tasks, max_steps)))


def _schema_problems(data: Any, validator: Validator) -> Iterator[tuple[_Path, str]]:
    """Every way ``data`` breaks the schema, worded from the schema itself."""
    missing_seen: set[_Path] = set()
    for error in validator.iter_errors(data):
        path: _Path = tuple(error.absolute_path)
        kind = error.validator
        bound = cast(Any, error.validator_value)
        value = cast(Any, error.instance)
        schema = cast("Mapping[str, Any]", error.schema)
        # A list's count is worded with its own name: "tasks", "steps".
        name = str(path[-1]) if path else ""
        if kind == "type":
            yield path, f"expected {_wanted(schema, path)}, got {describe_value(value)}"
        elif kind == "required":
            # One error per missing key, each naming the whole list: say them once.
            if path in missing_seen:
                continue
            missing_seen.add(path)
            for key in (key for key in bound if key not in value):
                wanted = _wanted_missing(schema["properties"][key]) if path else _EXAMPLE
                yield (*path, key), f"missing; expected {wanted}"
        elif kind == "minItems":
            yield path, f"expected at least {bound} {name if bound != 1 else name[:-1]}"
        elif kind == "maxItems":
            yield path, f"{len(value)} {name}, at most {bound}"
        else:
            # A rule added to the schema file that has no wording here yet: jsonschema's.
            message = " ".join(error.message.split())
            shown = message if len(message) <= _SHOWN_MESSAGE else message[:_SHOWN_MESSAGE] + "..."
            yield path, shown


def _title_problems(data: object) -> Iterator[tuple[_Path, str]]:
    """The rules of titles the schema does not say (see MAX_TITLE_CHARS): not blank, and
    not too long once stripped. A title of the wrong type is the schema's to report."""
    tasks = data.get("tasks") if isinstance(data, Mapping) else None
    for index, task in enumerate(tasks if isinstance(tasks, list | tuple) else ()):
        yield from _title_problem(task, ("tasks", index))
        steps = task.get("steps") if isinstance(task, Mapping) else None
        for step_index, step in enumerate(steps if isinstance(steps, list | tuple) else ()):
            yield from _title_problem(step, ("tasks", index, "steps", step_index))


def _title_problem(node: object, path: _Path) -> Iterator[tuple[_Path, str]]:
    title = node.get("title") if isinstance(node, Mapping) else None
    if not isinstance(title, str):
        return
    stripped = title.strip()
    if not stripped:
        yield (*path, "title"), f"expected a non-empty string, got {describe_value(title)}"
    elif len(stripped) > MAX_TITLE_CHARS:
        yield (*path, "title"), f"{len(stripped)} characters, at most {MAX_TITLE_CHARS}"


def _wanted(schema: Mapping[str, Any], path: _Path) -> str:
    """What a value of the wrong type should have been."""
    if not path:
        return f"a JSON object shaped as {_EXAMPLE}"
    if schema["type"] == "object":
        return "an object with " + " and ".join(f'"{key}"' for key in schema["required"])
    if schema["type"] == "array":
        return f"a list of {path[-1]}"
    return _STRING


def _wanted_missing(schema: Mapping[str, Any]) -> str:
    if schema["type"] == "string":
        return _STRING
    noun = "a list" if schema["type"] == "array" else "an object"
    return f"{noun} such as {_example(schema)}"


def _example(schema: Mapping[str, Any]) -> str:
    """The smallest value the schema takes, with "..." for every string."""
    if schema["type"] == "object":
        fields = (f'"{key}": {_example(schema["properties"][key])}' for key in schema["required"])
        return "{" + ", ".join(fields) + "}"
    if schema["type"] == "array":
        return f"[{_example(schema['items'])}]"
    return '"..."'


def _fields(schema: Mapping[str, Any]) -> Iterator[str]:
    """The schema's property names, outermost first, each object's in its own order."""
    for key, value in schema.get("properties", {}).items():
        yield key
        yield from _fields(value.get("items", value))


# Problems are listed in the order of the answer: a task's title before its steps.
_FIELD_ORDER: Final = {key: rank for rank, key in enumerate(dict.fromkeys(_fields(PLAN_SCHEMA)))}


def _order(path: _Path) -> tuple[int, ...]:
    return tuple(_FIELD_ORDER[part] if isinstance(part, str) else part for part in path)


def _located(path: _Path, text: str) -> str:
    if not path:
        return text
    place = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)
    return f"{place.lstrip('.')}: {text}"


# The shape a model is asked for, quoted in the problems so that a retry can copy it.
_EXAMPLE: Final = _example(PLAN_SCHEMA)
# Every string of a plan is a title.
_STRING: Final = "a non-empty string"


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
