"""Work sessions as values: tasks, breadcrumbs and their contract, cookies, and the
JSON documents kept under ``docs/acode/`` (rendered from the recorded history)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from acode.domain.json_text import read_json
from acode.domain.paths import text_problem
from acode.errors import ErrorCode, UsageError

__all__ = [
    "BREADCRUMB_FIELDS",
    "BREADCRUMB_KINDS",
    "MAX_BREADCRUMB_CHARS",
    "STACKING_MODES",
    "Breadcrumb",
    "EngineSession",
    "Subtask",
    "Task",
    "TaskStatus",
    "WorkSession",
    "breadcrumb_id",
    "next_task_id",
    "parse_breadcrumb",
    "parse_summary",
    "parse_task",
]

STACKING_MODES: Final = ("managed", "handsoff")
MAX_BREADCRUMB_CHARS: Final = 2000
BREADCRUMB_KINDS: Final = ("finding", "decision", "todo", "summary", "note")
# A JSON breadcrumb: "message" is required; the rest is optional.
BREADCRUMB_FIELDS: Final = ("message", "kind", "files", "data")
_TASK_ID = re.compile(r"task-(\d{3,})")
# A JSON breadcrumb holds a message, files and data: more than this is no breadcrumb.
_MAX_JSON_CHARS: Final = 8 * MAX_BREADCRUMB_CHARS


class TaskStatus(StrEnum):
    TODO = "todo"
    IN_PROGRESS = "in_progress"
    DONE = "done"


@dataclass(frozen=True)
class Task:
    id: str
    title: str
    description: str = ""
    status: TaskStatus = TaskStatus.TODO
    parent_task: str | None = None
    created_at: str = ""
    updated_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "title": self.title,
            "description": self.description,
            "status": self.status.value,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
        if self.parent_task is not None:
            data["parent_task"] = self.parent_task
        return data


def parse_task(data: object, source: str) -> Task:
    """A task from its JSON document; every problem names ``source`` and the key."""
    if not isinstance(data, Mapping):
        raise UsageError(f"{source}: expected a JSON object", hint="restore the file from git")
    problems: list[str] = []

    def text(key: str, *, required: bool = True, lines: bool = False) -> str:
        value = data.get(key, "" if not required else None)
        if not isinstance(value, str) or (required and not value.strip()):
            problems.append(f"{key}: expected a non-empty string")
            return ""
        problem = text_problem(value, "the text", lines=lines)
        if problem:
            problems.append(f"{key}: {problem}")
        return value

    task_id, title = text("id"), text("title")
    description = text("description", required=False, lines=True)
    created_at, updated_at = text("created_at", required=False), text("updated_at", required=False)
    if task_id and not _TASK_ID.fullmatch(task_id):
        problems.append(f"id: expected task-NNN, got {task_id!r}")
    status = data.get("status", TaskStatus.TODO.value)
    if not isinstance(status, str) or status not in {s.value for s in TaskStatus}:
        shown = repr(status) if isinstance(status, str) else f"a JSON {type(status).__name__}"
        problems.append(f"status: expected one of todo, in_progress, done, got {shown}")
    parent = data.get("parent_task")
    if parent is not None and not (isinstance(parent, str) and _TASK_ID.fullmatch(parent)):
        problems.append(f"parent_task: expected task-NNN or null, got {parent!r}")
    if problems:
        raise UsageError(
            f"{source}: " + "; ".join(problems),
            hint="fix the file (tasks are JSON: id, title, description, status), or restore it",
        )
    return Task(
        id=task_id,
        title=title.strip(),
        description=description,
        status=TaskStatus(status),
        parent_task=parent,
        created_at=created_at,
        updated_at=updated_at,
    )


def next_task_id(existing: Iterable[str]) -> str:
    numbers = [int(m.group(1)) for i in existing if (m := _TASK_ID.fullmatch(i))]
    return f"task-{max(numbers, default=0) + 1:03d}"


def breadcrumb_id(number: int) -> str:
    return f"bc-{number:03d}"


@dataclass(frozen=True)
class Breadcrumb:
    id: str
    message: str
    timestamp: str
    ai_session_id: str | None
    kind: str = "note"
    files: tuple[str, ...] = ()
    data: Any = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "message": self.message,
            "kind": self.kind,
            "timestamp": self.timestamp,
            "ai_session_id": self.ai_session_id,
        }
        if self.files:
            out["files"] = list(self.files)
        if self.data is not None:
            out["data"] = self.data
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Breadcrumb:
        return cls(
            id=data["id"],
            message=data["message"],
            timestamp=data["timestamp"],
            ai_session_id=data.get("ai_session_id"),
            kind=data.get("kind", "note"),
            files=tuple(data.get("files", ())),
            data=data.get("data"),
        )


def parse_breadcrumb(raw: str) -> dict[str, Any]:
    """The JSON contract of a breadcrumb message: a JSON object ``{"message": text,
    "kind": one of BREADCRUMB_KINDS, "files": [paths], "data": anything}`` (only
    "message" required), or well-formed text: non-empty, printable, at most
    MAX_BREADCRUMB_CHARS. Returns the fields; raises UsageError naming what is wrong."""
    text = raw.strip()
    if not text:
        raise _contract("the message is empty")
    if len(text) > _MAX_JSON_CHARS:
        raise _contract(f"{len(text)} characters, at most {_MAX_JSON_CHARS} even as JSON")
    if text.startswith("{"):
        try:
            data = read_json(text)
        except ValueError as exc:
            raise _contract(f"it starts with '{{' but is not valid JSON ({exc})") from exc
        return _structured(data)
    if text.startswith("["):
        try:
            read_json(text)
        except ValueError:
            pass  # text such as "[WIP] parser done"
        else:
            raise _contract("a JSON breadcrumb must be an object, not a list")
    if len(text) > MAX_BREADCRUMB_CHARS:
        raise _contract(f"{len(text)} characters, at most {MAX_BREADCRUMB_CHARS}")
    problem = _text_problem(text)
    if problem:
        raise _contract(problem)
    return {"message": text, "kind": "note"}


def parse_summary(raw: str) -> str:
    """A closed work session's summary (``--summary``), stripped; "" when none was given.
    A subtask's becomes a breadcrumb of its parent, so it is held to a text message's
    rules. Raises UsageError naming what is wrong."""
    text = raw.strip()
    if len(text) > MAX_BREADCRUMB_CHARS:
        problem: str | None = f"{len(text)} characters, at most {MAX_BREADCRUMB_CHARS}"
    else:
        problem = text_problem(text, "the summary", lines=True)
    if problem:
        raise UsageError(
            f"--summary: {problem}",
            hint='give printable text, e.g. --summary "Y provides validate and sanitize"; '
            "nothing was written",
        )
    return text


def _text_problem(text: str) -> str | None:
    return text_problem(text, "the message", lines=True)


def _structured(data: object) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise _contract("a JSON breadcrumb must be an object")
    unknown = sorted(set(data) - set(BREADCRUMB_FIELDS))
    if unknown:
        raise _contract(
            f"unknown field(s) {', '.join(unknown)}; the fields are " + ", ".join(BREADCRUMB_FIELDS)
        )
    message = data.get("message")
    if not isinstance(message, str) or not message.strip():
        raise _contract('"message" must be a non-empty string')
    if len(message) > MAX_BREADCRUMB_CHARS or _text_problem(message):
        raise _contract(f'"message" must be printable text of at most {MAX_BREADCRUMB_CHARS} chars')
    kind = data.get("kind", "note")
    if kind not in BREADCRUMB_KINDS:
        raise _contract(f'"kind" must be one of {", ".join(BREADCRUMB_KINDS)}, got {kind!r}')
    files = data.get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
        raise _contract('"files" must be a list of paths')
    for name in files:
        problem = text_problem(name, "the path")
        if problem:
            raise _contract(f'"files": {problem}')
    size = len(json.dumps(data.get("data")))
    if size > 4 * MAX_BREADCRUMB_CHARS:
        raise _contract(f'"data" is {size} characters of JSON, at most {4 * MAX_BREADCRUMB_CHARS}')
    out: dict[str, Any] = {"message": message.strip(), "kind": kind}
    if files:
        out["files"] = files
    if "data" in data:
        out["data"] = data["data"]
    return out


def _contract(problem: str) -> UsageError:
    return UsageError(
        f"breadcrumb rejected (JSON contract): {problem}",
        hint='give --message as text, or as JSON: {"message": "...", "kind": "finding", '
        '"files": ["src/y.py"]}; nothing was written',
        code=ErrorCode.WORK_CONTRACT,
    )


@dataclass(frozen=True)
class EngineSession:
    """One engine conversation the work session used, and how it began."""

    id: str | None
    started_at: str
    how: str  # "new", "resumed" or "rebuilt"


@dataclass(frozen=True)
class Subtask:
    task_id: str
    wsession_id: str
    status: str
    summary: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "wsession_id": self.wsession_id,
            "status": self.status,
            "summary": self.summary,
        }


@dataclass(frozen=True)
class WorkSession:
    """The document ``docs/acode/work_sessions/<id>.json``."""

    id: str
    task_id: str
    engine: str
    cwd: str
    status: str  # "active" or "closed"
    created_at: str
    parent_wsession_id: str | None = None
    ai_session_id: str | None = None
    engine_sessions: tuple[EngineSession, ...] = ()
    breadcrumbs: tuple[Breadcrumb, ...] = ()
    subtasks: tuple[Subtask, ...] = field(default=())
    closed_at: str | None = None
    summary: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "task_id": self.task_id,
            "engine": self.engine,
            "ai_session_id": self.ai_session_id,
            "cwd": self.cwd,
            "status": self.status,
            "created_at": self.created_at,
            "engine_sessions": [
                {"id": e.id, "started_at": e.started_at, "how": e.how} for e in self.engine_sessions
            ],
            "breadcrumbs": [b.to_dict() for b in self.breadcrumbs],
            "subtasks": [s.to_dict() for s in self.subtasks],
        }
        if self.parent_wsession_id is not None:
            data["parent_wsession_id"] = self.parent_wsession_id
        if self.closed_at is not None:
            data["closed_at"] = self.closed_at
            data["summary"] = self.summary
        return data
