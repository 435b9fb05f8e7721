"""A scripted two-task conversation for the agent-loop tests: the plan, each task's
turns, and the workspace an uninterrupted run leaves."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

__all__ = [
    "LOGIN_PY",
    "PLAN",
    "TASK",
    "VALIDATE_PY",
    "expected_login",
    "rules",
    "start_repository",
]

TASK = "Add email validation to src/login.py"

LOGIN_PY = 'def login(email):\n    return f"welcome {email}"\n'
VALIDATE_PY = 'def valid(email):\n    return "@" in email\n'

PLAN: dict[str, Any] = {
    "tasks": [
        {"title": "Write the validator", "steps": [{"title": "write src/validate.py"}]},
        {
            "title": "Use it in login",
            "steps": [{"title": "edit src/login.py"}, {"title": "check it imports"}],
        },
    ]
}

_CHECK = "python -c \"import sys; sys.path.insert(0, 'src'); import login\""


def expected_login() -> str:
    return "from validate import valid\n\n" + LOGIN_PY


def rules(delay: float = 0.0) -> list[dict[str, Any]]:
    """Replies by conversation, so that a request sent again gets the same answer.
    ``delay`` slows every answer, which gives crash tests time to land a kill mid-call."""

    def reply(**fields: Any) -> dict[str, Any]:
        return {**fields, "delay": delay} if delay else fields

    return [
        {
            "tool": "submit_plan",
            "replies": [reply(tool_calls=[{"id": "p1", "name": "submit_plan", "arguments": PLAN}])],
        },
        {
            "match": "Now do task t1:",
            "replies": [
                reply(
                    tool_calls=[
                        {"id": "a1", "name": "read_file", "arguments": {"path": "src/login.py"}}
                    ]
                ),
                reply(
                    tool_calls=[
                        {
                            "id": "a2",
                            "name": "write_file",
                            "arguments": {"path": "src/validate.py", "content": VALIDATE_PY},
                        }
                    ]
                ),
                reply(
                    tool_calls=[
                        {"id": "a3", "name": "finish_task", "arguments": {"summary": "written"}}
                    ]
                ),
            ],
        },
        {
            "match": "Now do task t2:",
            "replies": [
                reply(
                    tool_calls=[
                        {
                            "id": "b1",
                            "name": "edit_file",
                            "arguments": {
                                "path": "src/login.py",
                                "old": "def login(email):",
                                "new": "from validate import valid\n\ndef login(email):",
                            },
                        },
                        {"id": "b2", "name": "run_command", "arguments": {"command": _CHECK}},
                    ]
                ),
                reply(content="Email validation is in place."),
            ],
        },
    ]


def start_repository(ws: Path) -> None:
    """A git repository holding src/login.py, committed."""
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "login.py").write_text(LOGIN_PY, encoding="utf-8")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "start"]):
        subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True)
