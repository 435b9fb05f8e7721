"""The conversation with the model: its messages, their size, and their compaction.

Pure. Messages are plain dicts in the OpenAI chat shape, so that what the log records is
exactly what was sent. ``compact`` is deterministic (the same messages give the same
summary, byte for byte), so a resumed session rebuilds the very conversation it had.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from acode.agent.plan_schema import AgentPlan

__all__ = [
    "SUMMARY_PREFIX",
    "assistant_message",
    "compact",
    "dangling_tool_calls",
    "estimate_tokens",
    "planning_messages",
    "system_message",
    "task_message",
    "tool_message",
]

SUMMARY_PREFIX: Final = "Summary of earlier turns (compacted by acode):"
# A token is about four characters of English or code; dividing by 3.5 errs on the high
# side, so that an estimate within the budget is within the model's context too.
_CHARS_PER_TOKEN: Final = 3.5
_TOKENS_PER_MESSAGE: Final = 4
# Widths of the values in a summary line, tried in turn until the conversation fits.
_WIDTHS: Final = (160, 80, 40, 16)
_WHITESPACE: Final = re.compile(r"\s+")


def system_message(workspace_name: str) -> dict[str, Any]:
    return {
        "role": "system",
        "content": (
            f"You are acode's coding agent, working in the repository {workspace_name}. "
            "You work through a plan one task at a time. Use the tools to read and change "
            "files (read_file, write_file, edit_file) and to run commands (run_command). "
            "Paths are relative to the repository root, for example src/app.py; paths "
            "outside the repository are refused. When the current task is done, call "
            "finish_task with a one-line summary."
        ),
    }


def planning_messages(task: str, workspace_name: str) -> list[dict[str, Any]]:
    """The first two messages of a session: the system message and the request to plan."""
    return [
        system_message(workspace_name),
        {
            "role": "user",
            "content": (
                f"The request: {task}\n\n"
                "Before doing any work, plan it: call submit_plan with the tasks to do, in "
                "order, each with a short title and the steps it takes, each step with a "
                "short title. Keep the plan small: a few tasks of a few steps."
            ),
        },
    ]


def task_message(task: str, plan: AgentPlan, task_index: int) -> dict[str, Any]:
    """The user message that starts task ``plan.tasks[task_index]``: the request, the plan
    with the tasks before it done and the current one marked, and what to do now."""
    if not 0 <= task_index < len(plan.tasks):
        raise IndexError(f"task_index {task_index} is outside a plan of {len(plan.tasks)} tasks")
    current = plan.tasks[task_index]
    lines = [f"The request: {task}", "", "The plan ([x] done, [>] current, [ ] to do):"]
    for index, planned in enumerate(plan.tasks):
        mark = "x" if index < task_index else ">" if index == task_index else " "
        lines.append(f"[{mark}] {planned.id}. {planned.title}")
        if index == task_index:
            lines.extend(f"      - {step.title}" for step in planned.steps)
    lines += [
        "",
        f"Now do task {current.id}: {current.title}. Use the tools; when this task is done, "
        "call finish_task with a one-line summary.",
    ]
    return {"role": "user", "content": "\n".join(lines)}


def assistant_message(
    content: str | None, tool_calls: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The assistant turn as it is sent back. Content is ``""``, never null (llama.cpp's
    server answers 500 to null); a call without an id gets ``call_<index>``, the id
    ``tools.parse_tool_calls`` gives it."""
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if tool_calls:
        message["tool_calls"] = [
            _normalized_call(index, call) for index, call in enumerate(tool_calls)
        ]
    return message


def tool_message(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def estimate_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """An upper-ish estimate of the prompt's tokens: characters of the contents and of the
    tool-call arguments / 3.5, rounded up, plus 4 per message."""
    chars = 0
    for message in messages:
        chars += len(_text(message.get("content")))
        for call in _calls(message):
            chars += len(_arguments_text(call))
    return math.ceil(chars / _CHARS_PER_TOKEN) + _TOKENS_PER_MESSAGE * len(messages)


def dangling_tool_calls(messages: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The ids of assistant tool calls that no later tool message answers, in order."""
    pending: dict[str, None] = {}
    for message in messages:
        if message.get("role") == "assistant":
            for index, call in enumerate(_calls(message)):
                pending[_call_id(call, index)] = None
        elif message.get("role") == "tool":
            pending.pop(str(message.get("tool_call_id")), None)
    return tuple(pending)


# -- compaction -----------------------------------------------------------------------


def compact(
    messages: Sequence[Mapping[str, Any]], *, budget_tokens: int, keep_last: int = 6
) -> list[dict[str, Any]]:
    """The conversation made to fit ``budget_tokens``, deterministically.

    Keeps the leading system and user messages and at least the last ``keep_last``
    messages intact, widening the kept tail so that no assistant message with tool calls
    is parted from the tool messages that answer it. Everything between becomes ONE user
    message, ``SUMMARY_PREFIX`` then a line per earlier tool call (``name(key="value")
    -> first line of its result``) and per assistant text, shortened as far as the budget
    needs; when even the shortest lines do not fit, the earliest are dropped and counted.
    The kept tail is never dropped, so the result can still exceed a budget that the kept
    messages alone exceed. Within the budget already, the messages come back unchanged.
    """
    current = [dict(message) for message in messages]
    if estimate_tokens(current) <= budget_tokens:
        return current
    head_end = _head_end(current)
    tail_start = _tail_start(current, head_end, keep_last)
    middle = current[head_end:tail_start]
    if not middle:
        return current
    head, tail = current[:head_end], current[tail_start:]
    entries = _entries(middle)

    def with_summary(lines: Sequence[str]) -> list[dict[str, Any]]:
        return [*head, _summary_message(lines), *tail]

    for width in _WIDTHS:
        candidate = with_summary([entry.render(width) for entry in entries])
        if estimate_tokens(candidate) <= budget_tokens:
            return candidate
    # The shortest lines are still too long: keep the latest lines that fit, count the rest.
    lines = [entry.render(_WIDTHS[-1]) for entry in entries]
    # Binary search for the most lines that fit; all of them are known not to.
    low, high = 0, len(lines) - 1
    while low < high:
        kept = (low + high + 1) // 2
        if estimate_tokens(with_summary(_latest(lines, kept))) <= budget_tokens:
            low = kept
        else:
            high = kept - 1
    return with_summary(_latest(lines, low))


@dataclass(frozen=True, slots=True)
class _Entry:
    """One line of a summary, rendered at a given width of its values."""

    label: str
    text: str
    arguments: str | None = None  # a tool call's arguments as sent, or None for text
    result: str | None = None

    def render(self, width: int) -> str:
        if self.arguments is None:
            body = f"{self.label}: {_short(self.text, width)}" if self.label else self.text
            return f"- {_short(body, 3 * width)}"
        result = "(no result)" if self.result is None else _short(_first_line(self.result), width)
        # A model may send many arguments: the line as a whole is bounded too.
        line = f"{self.label}({_shown_arguments(self.arguments, width)}) -> {result}"
        return f"- {_short(line, 6 * width)}"


def _head_end(messages: Sequence[Mapping[str, Any]]) -> int:
    # The first two messages, and the answers to any tool call among them.
    end = min(2, len(messages))
    while end < len(messages) and messages[end].get("role") == "tool":
        end += 1
    return end


def _tail_start(messages: Sequence[Mapping[str, Any]], head_end: int, keep_last: int) -> int:
    start = max(head_end, len(messages) - max(keep_last, 0))
    # Tool results follow the assistant message that asked for them: keep them together.
    while head_end < start < len(messages) and messages[start].get("role") == "tool":
        start -= 1
    return start


def _entries(middle: Sequence[Mapping[str, Any]]) -> list[_Entry]:
    entries: list[_Entry] = []
    waiting: dict[str, int] = {}  # call id -> index of its entry, until its result comes
    for message in middle:
        role = str(message.get("role"))
        text = _text(message.get("content"))
        if role == "tool":
            call_id = str(message.get("tool_call_id"))
            if call_id in waiting:
                index = waiting.pop(call_id)
                entries[index] = _Entry(
                    label=entries[index].label,
                    text="",
                    arguments=entries[index].arguments,
                    result=text,
                )
            else:
                entries.append(_Entry(label="tool result", text=_first_line(text)))
        elif role == "user" and text.startswith(SUMMARY_PREFIX):
            # An earlier summary: its lines carry over, so compacting twice loses nothing.
            entries.extend(
                _Entry(label="", text=line[2:])
                for line in text.splitlines()[1:]
                if line.startswith("- ")
            )
        else:
            if text.strip():
                entries.append(_Entry(label=role, text=text))
            for index, call in enumerate(_calls(message)):
                waiting[_call_id(call, index)] = len(entries)
                entries.append(
                    _Entry(label=_call_name(call), text="", arguments=_arguments_text(call))
                )
    return entries


def _summary_message(lines: Sequence[str]) -> dict[str, Any]:
    body = "\n".join(lines) if lines else "- (no text and no tool calls)"
    return {"role": "user", "content": f"{SUMMARY_PREFIX}\n{body}"}


def _latest(lines: Sequence[str], count: int) -> list[str]:
    omitted = len(lines) - count
    return [f"- ({omitted} earlier entries omitted)", *lines[omitted:]]


def _shown_arguments(arguments: str, width: int) -> str:
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return _short(arguments, width)
    if not isinstance(value, dict):
        return _short(arguments, width)
    shown = (
        f"{key}={json.dumps(_short(item if isinstance(item, str) else json.dumps(item), width))}"
        for key, item in value.items()
    )
    return ", ".join(shown)


def _short(text: str, width: int) -> str:
    flat = _WHITESPACE.sub(" ", text).strip()
    return flat if len(flat) <= width else f"{flat[: max(width - 3, 0)]}..."


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else "(empty)"


# -- message parts --------------------------------------------------------------------


def _normalized_call(index: int, call: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": _call_id(call, index),
        "type": "function",
        "function": {"name": _call_name(call), "arguments": _arguments_text(call)},
    }


def _calls(message: Mapping[str, Any]) -> list[Any]:
    calls = message.get("tool_calls")
    return list(calls) if isinstance(calls, list | tuple) else []


def _call_id(call: object, index: int) -> str:
    raw = call.get("id") if isinstance(call, Mapping) else None
    return raw if isinstance(raw, str) and raw else f"call_{index}"


def _function(call: object) -> Mapping[str, Any]:
    function = call.get("function") if isinstance(call, Mapping) else None
    return function if isinstance(function, Mapping) else {}


def _call_name(call: object) -> str:
    name = _function(call).get("name")
    return name if isinstance(name, str) else ""


def _arguments_text(call: object) -> str:
    """The arguments as the JSON text the protocol carries: a model's own text is kept as
    it was, a parsed object (some servers send one) is serialised."""
    arguments = _function(call).get("arguments")
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return "{}"
    return _json_text(arguments)


def _text(content: object) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else _json_text(content)


def _json_text(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except ValueError:  # a circular structure or an integer too long to print
        return repr(value)
