"""Output for people and for programs: Rich on a terminal, plain text otherwise, JSON
on request. Every message that reports a problem says what to do next."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from acode.errors import AcodeError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["ago", "count", "emit_json", "err_console", "iso", "out_console", "render_error"]

_out: Console | None = None
_err: Console | None = None


def out_console() -> Console:
    global _out
    if _out is None:
        from rich.console import Console

        # soft_wrap: a long message stays one line in a pipe or a log (one problem, one
        # line); a terminal still wraps it for the eye.
        _out = Console(highlight=False, soft_wrap=True)
    return _out


def err_console() -> Console:
    global _err
    if _err is None:
        from rich.console import Console

        _err = Console(stderr=True, highlight=False, soft_wrap=True)
    return _err


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=None) + "\n")
    sys.stdout.flush()


def render_error(error: AcodeError) -> None:
    from rich.markup import escape

    from acode.security.redaction import redact

    console = err_console()
    message = escape(redact(error.message))
    console.print(f"[bold red]error[/] [dim]{error.code.value}[/]: {message}")
    if error.hint:
        console.print(f"  [yellow]hint:[/] {escape(redact(error.hint))}")


def iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(us: int, now_us: int) -> str:
    seconds = max(0, (now_us - us) // 1_000_000)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def count(n: int | str, noun: str) -> str:
    """``1 step``, ``2 steps``."""
    return f"{n} {noun}" if str(n) == "1" else f"{n} {noun}s"
