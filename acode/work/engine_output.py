"""What an engine CLI printed for one turn, read into an :class:`EngineTurn`. Pure: no I/O.

The rules come from running the real CLIs offline (docs/testing.md, "The real engines offline"):

- Codex (``codex exec --json``) prints JSON lines; the session is
  ``thread.started.thread_id``. Resuming an unknown UUID fails with "no rollout found"; a
  thread id other than the one asked for means codex silently started a new, empty thread
  (it does that for a non-UUID), so the turn counts as forgotten and the new id is never
  taken as the session.
- Claude Code (``claude -p --output-format json``) prints one JSON result with
  ``session_id``, ``result`` and ``is_error``. A failed call can say ``is_error: true`` under
  ``subtype: success`` and still print a fresh id: that id is never the session. "No
  conversation found" (or a value that is no session) means the session is forgotten.
- Aider has no session id and exits 0 even when the model never answered: the turn is good
  only when its "Tokens: ... sent, ... received." line follows the last error it printed.
- ``command``: any program; stdout is the answer, a non-zero exit a failure. A program
  has no way to say why it failed, so a non-zero exit when asked to resume counts as
  forgotten: the caller then tries a new session, which fails the same way if the cause
  was something else (a server that is down), and the recorded session stays.

``session_id`` is set only on an ``ok`` turn (aider's is always None). A forgotten turn is
never ``ok``: the turn the caller asked for (in that session) did not
happen, and the caller falls back to a new session with rebuilt context.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_TEXT",
    "EngineTurn",
    "parse_aider",
    "parse_claude",
    "parse_codex",
    "parse_command",
    "shorten",
]

MAX_TEXT = 4000
_MARK = "\n[... shortened ...]\n"


@dataclass(frozen=True)
class EngineTurn:
    """One turn of an engine, as acode records it."""

    session_id: str | None  # the engine's own session id for this turn; None if it has none
    ok: bool  # the turn ran and the model answered
    forgotten: bool  # asked to resume, the engine does not know that session
    text: str  # the final answer, or the error, at most MAX_TEXT characters
    detail: str  # one line: what happened, for logs and messages


def shorten(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` within ``limit`` characters, keeping its start and its end (an error's
    cause is often at the end, a plan's summary at the start)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    keep = limit - len(_MARK)
    head = keep // 2
    return text[:head] + _MARK + text[len(text) - (keep - head) :]


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _last_line(text: str) -> str:
    """The last non-empty line that is not part of a backtrace."""
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not re.match(r"\s*(\d+:|Stack backtrace:|at )", line)
    ]
    return lines[-1] if lines else ""


def _short_id(session_id: str) -> str:
    return session_id[:13]


# -- codex ---------------------------------------------------------------------------------


def _json_lines(stdout: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for raw in stdout.splitlines():
        line = raw.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def _codex_error(events: list[dict[str, Any]], stderr: str) -> str:
    for event in reversed(events):
        if event.get("type") == "turn.failed":
            error = event.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return str(error["message"])
    for event in reversed(events):
        if event.get("type") == "error" and isinstance(event.get("message"), str):
            return str(event["message"])
    return _last_line(stderr)


def parse_codex(stdout: str, stderr: str, returncode: int, *, asked: str | None) -> EngineTurn:
    """Read ``codex exec --json`` (or ``codex exec resume --json``)."""
    events = _json_lines(stdout)
    thread_id = next(
        (
            str(e["thread_id"])
            for e in events
            if e.get("type") == "thread.started" and isinstance(e.get("thread_id"), str)
        ),
        None,
    )
    if asked is not None and "no rollout found" in stderr:
        reason = _last_line(stderr).removeprefix("Error: ")
        return EngineTurn(
            session_id=None,
            ok=False,
            forgotten=True,
            text=shorten(reason),
            detail=f"no rollout found for {asked}",
        )
    if asked is not None and thread_id is not None and thread_id.lower() != asked.lower():
        detail = f"codex started a new thread {_short_id(thread_id)} instead of resuming {asked}"
        return EngineTurn(session_id=None, ok=False, forgotten=True, text=detail, detail=detail)
    answers = [
        e["item"]["text"]
        for e in events
        if e.get("type") == "item.completed"
        and isinstance(e.get("item"), dict)
        and e["item"].get("type") == "agent_message"
        and isinstance(e["item"].get("text"), str)
    ]
    completed = any(e.get("type") == "turn.completed" for e in events)
    failed = any(e.get("type") == "turn.failed" for e in events)
    if returncode == 0 and completed and not failed and thread_id is not None:
        verb = "new thread" if asked is None else "resumed"
        text = answers[-1] if answers else ""
        return EngineTurn(
            session_id=thread_id,
            ok=True,
            forgotten=False,
            text=shorten(text),
            detail=f"{verb} {thread_id}",
        )
    error = _codex_error(events, stderr) or f"codex exited {returncode} without an answer"
    return EngineTurn(
        session_id=None,
        ok=False,
        forgotten=False,
        text=shorten(error),
        detail=f"codex failed (exit {returncode}): {_one_line(error)}",
    )


# -- claude ----------------------------------------------------------------------------------

_CLAUDE_FORGOTTEN = (
    "No conversation found",
    "does not match any session",
)


def _claude_result(stdout: str) -> dict[str, Any] | None:
    try:  # one JSON document, however it is laid out
        whole = json.loads(stdout)
    except ValueError:
        whole = None
    events = [whole] if isinstance(whole, dict) else _json_lines(stdout)
    for event in reversed(events):
        if event.get("type") == "result" or "session_id" in event:
            return event
    return None


def parse_claude(stdout: str, stderr: str, returncode: int, *, asked: str | None) -> EngineTurn:
    """Read ``claude -p --output-format json``."""
    result = _claude_result(stdout)
    said = stderr + "\n" + stdout
    if asked is not None and any(marker in said for marker in _CLAUDE_FORGOTTEN):
        reason = _last_line(stderr) or _last_line(stdout)
        return EngineTurn(
            session_id=None,
            ok=False,
            forgotten=True,
            text=shorten(reason),
            detail=f"no conversation {asked} here",
        )
    if result is None:
        error = _last_line(stderr) or _last_line(stdout) or f"claude exited {returncode}"
        return EngineTurn(
            session_id=None,
            ok=False,
            forgotten=False,
            text=shorten(error),
            detail=f"claude failed (exit {returncode}): {_one_line(error)}",
        )
    text = result.get("result")
    text = text if isinstance(text, str) else ""
    session_id = result.get("session_id")
    if returncode != 0 or result.get("is_error") is not False or not isinstance(session_id, str):
        # The id a failed call printed is never the session: it may hold no answer at all.
        error = text or _last_line(stderr) or f"claude exited {returncode}"
        return EngineTurn(
            session_id=None,
            ok=False,
            forgotten=False,
            text=shorten(error),
            detail=f"claude failed (exit {returncode}): {_one_line(error)}",
        )
    if asked is None:
        detail = f"new session {session_id}"
    elif session_id == asked:
        detail = f"resumed {session_id}"
    else:  # older versions carried the history over into a new id: that id is the session now
        detail = f"resumed {asked} as {session_id}"
    return EngineTurn(
        session_id=session_id, ok=True, forgotten=False, text=shorten(text), detail=detail
    )


# -- aider -----------------------------------------------------------------------------------

_AIDER_TOKENS = re.compile(r"^Tokens: .* sent, .* received", re.MULTILINE)
_AIDER_ERROR = re.compile(r"^litellm\.\w+:.*$", re.MULTILINE)


def _aider_answer(stdout: str, end: int) -> str:
    """The answer: what aider printed after its header block (from "Aider v..." to the
    first blank line) and before the Tokens line."""
    lines = stdout[:end].splitlines()
    banner = next((i for i, line in enumerate(lines) if line.startswith("Aider v")), None)
    if banner is None:
        return "\n".join(lines).strip()
    blank = next((i for i in range(banner, len(lines)) if not lines[i].strip()), len(lines))
    return "\n".join(lines[blank:]).strip()


def parse_aider(stdout: str, stderr: str, returncode: int, *, asked: str | None) -> EngineTurn:
    """Read ``aider --message ... --no-pretty``: no session id; the exit code says little."""
    tokens = list(_AIDER_TOKENS.finditer(stdout))
    errors = list(_AIDER_ERROR.finditer(stdout))
    answered = bool(tokens) and (not errors or tokens[-1].start() > errors[-1].start())
    verb = "new chat" if asked is None else "restored chat"
    if returncode == 0 and answered:
        return EngineTurn(
            session_id=None,
            ok=True,
            forgotten=False,
            text=shorten(_aider_answer(stdout, tokens[-1].start())),
            detail=f"aider {verb}",
        )
    if errors:
        # litellm's messages wrap at 80 columns: take the error up to its blank line.
        error = stdout[errors[-1].start() :].split("\n\n", 1)[0]
        error = "\n".join(line for line in error.splitlines() if not line.startswith("Retrying"))
    else:
        error = _last_line(stderr) or _last_line(stdout) or f"aider exited {returncode}"
    return EngineTurn(
        session_id=None,
        ok=False,
        forgotten=False,
        text=shorten(error),
        detail=f"aider failed (exit {returncode}): {_one_line(error)}",
    )


# -- command ---------------------------------------------------------------------------------


def parse_command(
    stdout: str, stderr: str, returncode: int, *, session_id: str, asked: str | None = None
) -> EngineTurn:
    """Read any command: its stdout is the answer; ``session_id`` is the one acode gave it,
    ``asked`` the one it was asked to resume (None for a new session)."""
    if returncode == 0:
        return EngineTurn(
            session_id=session_id,
            ok=True,
            forgotten=False,
            text=shorten(stdout),
            detail="command exited 0",
        )
    error = stderr.strip() or stdout.strip() or f"exit {returncode}"
    return EngineTurn(
        session_id=None,
        ok=False,
        forgotten=asked is not None,
        text=shorten(error),
        detail=f"command failed (exit {returncode}): {_one_line(_last_line(error))}",
    )
