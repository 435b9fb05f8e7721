"""The tools the model may call, and the reading of its tool calls into checked values.

Pure. The definitions use the OpenAI ``tools`` shape. Parameter schemas carry no
``maxLength``: llama.cpp turns it into a grammar that makes small models emit malformed
arguments. A call that cannot be run becomes a ``BadToolCall`` whose error is sent back to
the model as the call's result, worded so that the model can correct the call.
"""

from __future__ import annotations

import copy
import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from acode.agent.plan_schema import PLAN_SCHEMA, bounded_plan_schema, describe_value
from acode.domain.paths import file_path_problem

__all__ = [
    "PLAN_TOOL",
    "PLAN_TOOL_CHOICE",
    "TASK_TOOLS",
    "TASK_TOOL_CHOICE",
    "TASK_TOOL_NAMES",
    "BadToolCall",
    "ToolCall",
    "parse_tool_calls",
    "path_problem",
    "plan_tool",
    "relative_path",
]

# name -> (description, ((argument, description), ...)); every argument a required string.
_TASK_TOOL_SPECS: Final[dict[str, tuple[str, tuple[tuple[str, str], ...]]]] = {
    "read_file": (
        "Read a text file of the repository and return its content.",
        (("path", "The file's path, relative to the repository root."),),
    ),
    "write_file": (
        "Create a file, or replace its whole content. Parent directories are created.",
        (
            ("path", "The file's path, relative to the repository root."),
            ("content", "The complete new content of the file."),
        ),
    ),
    "edit_file": (
        "Replace the one occurrence of a piece of text in a file; it fails when the text "
        "is missing or occurs more than once, so quote enough of it to be unique.",
        (
            ("path", "The file's path, relative to the repository root."),
            ("old", "The exact text to replace, occurring once in the file."),
            ("new", "The text to put in its place."),
        ),
    ),
    "run_command": (
        "Run a shell command in the repository root and return its exit status and output.",
        (("command", "The shell command line, for example: python -m pytest -q"),),
    ),
    "finish_task": (
        "Say that the current task is done, with a one-line summary of what was done.",
        (("summary", "What was done, in one line."),),
    ),
}


def _function_tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


TASK_TOOLS: Final[tuple[dict[str, Any], ...]] = tuple(
    _function_tool(
        name,
        description,
        {
            "type": "object",
            "properties": {arg: {"type": "string", "description": text} for arg, text in args},
            "required": [arg for arg, _ in args],
        },
    )
    for name, (description, args) in _TASK_TOOL_SPECS.items()
)
TASK_TOOL_NAMES: Final[tuple[str, ...]] = tuple(_TASK_TOOL_SPECS)
TASK_TOOL_CHOICE: Final = "auto"


def _plan_tool(schema: Mapping[str, Any]) -> dict[str, Any]:
    return _function_tool(
        "submit_plan",
        "Submit the plan: the tasks to do in order, each with its steps. Call it exactly once.",
        {
            key: copy.deepcopy(value)
            for key, value in schema.items()
            if key not in {"$schema", "$id"}
        },
    )


PLAN_TOOL: Final[dict[str, Any]] = _plan_tool(PLAN_SCHEMA)


def plan_tool(max_tasks: int, max_steps: int) -> dict[str, Any]:
    """``PLAN_TOOL`` with the plan's size bounded (``agent.max_tasks``, ``max_steps``):
    told no bound, a small model repeats tasks until max_tokens cuts its JSON short."""
    return _plan_tool(bounded_plan_schema(max_tasks, max_steps))


# Forced: llama.cpp's server treats an omitted tool_choice as "none".
PLAN_TOOL_CHOICE: Final[dict[str, Any]] = {"type": "function", "function": {"name": "submit_plan"}}

_SHOWN_CHARS: Final = 40


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call that names a task tool and carries every argument as a string.

    ``arguments`` holds a dict of exactly the tool's parameters (extra ones are dropped),
    so the value is not hashable despite being frozen.
    """

    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class BadToolCall:
    """A call that cannot be run; ``error`` is the result to send back to the model."""

    id: str
    name: str
    error: str


def parse_tool_calls(raw: Sequence[Mapping[str, Any]]) -> tuple[ToolCall | BadToolCall, ...]:
    """Each raw OpenAI tool call, checked against ``TASK_TOOLS``. Never raises.

    A call without an id gets ``call_<index>`` (its position in ``raw``), the same id
    ``conversation.assistant_message`` gives it, so that its result can answer it.
    """
    return tuple(_parse_one(index, item) for index, item in enumerate(raw))


def _parse_one(index: int, item: object) -> ToolCall | BadToolCall:
    if not isinstance(item, Mapping):
        return BadToolCall(id=f"call_{index}", name="", error=f"tool call {index} is not an object")
    raw_id = item.get("id")
    call_id = raw_id if isinstance(raw_id, str) and raw_id else f"call_{index}"
    function = item.get("function")
    if not isinstance(function, Mapping):
        return BadToolCall(id=call_id, name="", error=f"tool call has no function; {_the_tools()}")
    raw_name = function.get("name")
    name = raw_name if isinstance(raw_name, str) else ""
    if not name:
        return BadToolCall(
            id=call_id, name="", error=f"the tool call names no tool; {_the_tools()}"
        )
    if name not in _TASK_TOOL_SPECS:
        return BadToolCall(
            id=call_id, name=name, error=f"unknown tool {_quoted(name)}; {_the_tools()}"
        )
    arguments, error = _arguments(name, function.get("arguments"))
    if error is not None:
        return BadToolCall(id=call_id, name=name, error=error)
    return ToolCall(id=call_id, name=name, arguments=arguments)


def _arguments(name: str, raw: object) -> tuple[dict[str, str], str | None]:
    usage = _usage(name)
    value: object = raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        value = {}
    elif isinstance(raw, str):
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            detail = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
            return {}, f"{name}: the arguments are not valid JSON ({detail}); call it as {usage}"
    if not isinstance(value, Mapping):
        return {}, f"{name}: the arguments must be a JSON object; call it as {usage}"
    params = [arg for arg, _ in _TASK_TOOL_SPECS[name][1]]
    missing = [arg for arg in params if arg not in value]
    if missing:
        listed = " and ".join(f"'{arg}'" for arg in missing)
        noun = "argument" if len(missing) == 1 else "arguments"
        return {}, f"{name}: missing {noun} {listed}; call it as {usage}"
    for arg in params:
        if not isinstance(value[arg], str):
            shown = describe_value(value[arg])
            return {}, f"{name}: argument '{arg}' must be a string, got {shown}"
    return {arg: value[arg] for arg in params}, None


def relative_path(path: str) -> str | None:
    """The workspace-relative POSIX path a path argument names, or ``None`` when it breaks
    the rule of workspace paths (``path_problem`` says how: empty, absolute, escaping the
    workspace with ``..``, naming its root, a NUL, control or bidirectional character, a
    name or a path too long for a file system).

    Lexical only: a symlink inside the workspace can still point out of it, so the code
    that opens the file checks the resolved path too.
    """
    if path_problem(path) is not None:
        return None
    parts: list[str] = []
    for part in path.split("/"):
        if part in {"", "."}:
            continue
        if part != "..":
            parts.append(part)
        elif not parts:
            return None
        else:
            parts.pop()
    return posixpath.join(*parts) if parts else None


def path_problem(path: str) -> str | None:
    """Why the path argument of a tool call cannot be used, worded for the model; None
    when ``relative_path`` takes it."""
    if not path.strip():
        return "the path is empty"
    return file_path_problem(path)


def _usage(name: str) -> str:
    return f"{name}({', '.join(arg for arg, _ in _TASK_TOOL_SPECS[name][1])})"


def _the_tools() -> str:
    return f"the tools are {', '.join(_usage(name) for name in TASK_TOOL_NAMES)}"


def _quoted(name: str) -> str:
    shown = name if len(name) <= _SHOWN_CHARS else f"{name[: _SHOWN_CHARS - 3]}..."
    return f"'{shown}'"
