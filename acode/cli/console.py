"""Output for people and for programs: Rich on a terminal, plain text otherwise, JSON
on request. Every message that reports a problem says what to do next.

Everything acode prints goes through the redactor (invariant 7, docs/invariants.md): the two
consoles write through :class:`_Redacted`, which masks each text Rich renders before it
reaches the stream, and :func:`emit_json` masks every string of the value. A table
cell is masked before it goes into the table (:func:`cells`), where a narrow column
could fold or cut a secret into a shape the redactor no longer knows."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO, cast

from acode.errors import AcodeError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

__all__ = [
    "ago",
    "cells",
    "console_width",
    "count",
    "emit_json",
    "emit_text",
    "err_console",
    "iso",
    "keyboard",
    "out_console",
    "plain_output",
    "plain_table",
    "print_lines",
    "printable",
    "render_error",
]

_out: Console | None = None
_err: Console | None = None


class _Redacted:
    """A text stream that masks secrets in what is written to it, and is otherwise the
    stream it wraps (Rich asks it whether it is a terminal, its encoding, its fileno).
    Rich writes each rendered print in one call, so a secret is never split between
    two writes; highlighting is off, so no style code is put inside one."""

    def __init__(self, stream: Callable[[], TextIO]) -> None:
        self._stream = stream  # looked up at each use, as Rich does: tests swap sys.stdout

    def _target(self) -> TextIO:
        stream = self._stream()
        # While a live display runs, sys.stdout is Rich's proxy, which prints through
        # this console: write to the stream it stands for, as Rich's own console does.
        return cast("TextIO", getattr(stream, "rich_proxied_file", stream))

    def write(self, text: str) -> int:
        from acode.security.redaction import redact

        return self._target().write(redact(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)


def out_console() -> Console:
    global _out
    if _out is None:
        from rich.console import Console

        # soft_wrap: a long message stays one line in a pipe or a log (one problem, one
        # line); a terminal still wraps it for the eye.
        _out = Console(file=_redacted(lambda: sys.stdout), highlight=False, soft_wrap=True)
    return _out


def err_console() -> Console:
    global _err
    if _err is None:
        from rich.console import Console

        _err = Console(file=_redacted(lambda: sys.stderr), highlight=False, soft_wrap=True)
    return _err


def _redacted(stream: Callable[[], TextIO]) -> TextIO:
    return cast("TextIO", _Redacted(stream))


def cells(*values: str) -> list[Text]:
    """A table row's cells, each masked whole before the table can fold or cut it, and
    shown as written: brackets in a title, a label or an error are text, not markup."""
    from rich.text import Text

    from acode.security.redaction import redact

    return [Text(redact(value)) for value in values]


def plain_output() -> bool:
    """Whether Rich would write standard output as plain text, no style in it: when it is
    no terminal by Rich's own rules (TTY_COMPATIBLE, then FORCE_COLOR, then isatty)."""
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "0"
    force = os.environ.get("FORCE_COLOR")
    if force is not None:
        return force == ""
    isatty = getattr(sys.stdout, "isatty", None)
    try:
        return isatty is None or not isatty()
    except ValueError:  # closed
        return True


def console_width() -> int:
    """The width Rich gives the console here: COLUMNS, else the first of standard input,
    output and error that is a terminal, else 80."""
    columns = os.environ.get("COLUMNS")
    if columns is not None and columns.isdigit():
        return int(columns)
    for fd in (0, 1, 2):
        try:
            return os.get_terminal_size(fd).columns or 80
        except (ValueError, OSError):  # not a terminal
            continue
    return 80


def plain_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], limits: Sequence[int | None], width: int
) -> str | None:
    """The table that Rich draws plainly of ``header`` and ``rows`` (``Table(box=None,
    pad_edge=False)``, a column at most as wide as its limit), without loading Rich:
    when every cell is printable ASCII within its column's limit and the table fits in
    ``width``, each column is as wide as its widest cell, two spaces apart. Otherwise
    None: what Rich would fold, cut or measure in its own way is Rich's to draw."""
    table = [header, *rows]
    for row in table:
        for cell, limit in zip(row, limits, strict=True):
            if not cell.isascii() or not cell.isprintable() or (limit and len(cell) > limit):
                return None
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    if sum(widths) + 2 * (len(widths) - 1) > width:
        return None
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + "\n" for row in table
    )


# What Rich prints otherwise than it is written: control characters (it removes some, a
# newline or a tab it lays out) and what may be an emoji code, such as :bug: (replaced by
# its emoji; any text between two colons without a space is taken for one, to be sure).
_NOT_AS_WRITTEN = r"[\x00-\x1f\x7f]|:\S*:"


def print_lines(lines: Sequence[str]) -> None:
    """Each of ``lines`` printed as text, as ``out_console().print(line, markup=False)``
    prints it, masked line by line as that is: into a pipe without loading Rich (which
    costs more to load than a report costs to make) whenever Rich would print the lines
    as they are written."""
    if plain_output() and not any(re.search(_NOT_AS_WRITTEN, line) for line in lines):
        from acode.security.redaction import redact

        for line in lines:
            sys.stdout.write(redact(line + "\n"))
        sys.stdout.flush()
        return
    console = out_console()
    for line in lines:
        console.print(line, markup=False)


class _Keyboard:
    """Standard input's lines for prompts (``Prompt.ask(stream=keyboard())``), read so
    that a Ctrl+C always stops the wait.

    Python runs a signal's handler between bytecodes. A Ctrl+C that lands after the
    prompt is shown but before ``input()`` enters its blocking read is handled at once
    and the read then waits for the next key: the person's Ctrl+C is lost. Here the
    signal module also writes to a pipe, and waiting on the pipe and the terminal
    together returns for either, so the handler's exception is raised right away.
    """

    def readline(self) -> str:
        if not sys.stdin.isatty() or not _main_thread():
            return _line(sys.stdin.readline())
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        previous = signal.set_wakeup_fd(wake_w)
        try:
            while True:
                ready, _, _ = select.select([sys.stdin, wake_r], [], [])
                if wake_r in ready:
                    os.read(wake_r, 64)  # the handler has run (or raises now)
                if sys.stdin in ready:
                    return _line(sys.stdin.readline())
        finally:
            signal.set_wakeup_fd(previous)
            os.close(wake_r)
            os.close(wake_w)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _line(text: str) -> str:
    """The line as input() gives it: without its newline (Rich takes "" for the default
    answer), and EOFError at the end of input (never the default when the terminal is
    gone)."""
    if not text:
        raise EOFError
    return text.removesuffix("\n")


def keyboard() -> TextIO:
    # A TextIO for Rich's prompts, which call nothing but readline().
    return cast("TextIO", _Keyboard())


# What a terminal acts on instead of showing: control characters (an escape sequence can
# erase or rewrite lines already shown) and the invisible characters that reorder or hide
# text (bidirectional overrides, zero-width marks).
_UNSHOWABLE = r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]"


def printable(text: str) -> str:
    """``text`` with what a terminal would not show as it is written out as an escape
    (``\\x1b``, ``\\u202e``): a person sees every character of what they review."""
    return re.sub(_UNSHOWABLE, _escape, text)  # compiled on first use, then cached by re


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def emit_json(value: Any) -> None:
    from acode.security.redaction import redact_json

    try:
        sys.stdout.write(json.dumps(redact_json(value), ensure_ascii=False, indent=None) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        _reader_gone()


def emit_started(value: dict[str, Any]) -> None:
    """The `started` record of a new session, with ``--json``. Under a worker's start
    gate, nothing of the session runs until the worker has recorded its id: a worker
    killed before that (its end of the pipe closed, the read sees the end) would leave a
    session the queue does not know, and the next claim would start another that did its
    steps again. That one pauses instead, before its first step."""
    emit_json(value)
    from acode.fleet.session_env import START_GATE

    if os.environ.get(START_GATE) == "1" and not sys.stdin.readline():
        os.kill(os.getpid(), signal.SIGTERM)


def _reader_gone() -> None:
    """Whoever read the output is gone (a fleet worker killed, a pipe into `head`): what
    follows goes nowhere, and a run pauses as on SIGTERM, its handler choosing when,
    rather than fail the step whose notice could not be written."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    os.kill(os.getpid(), signal.SIGTERM)


def emit_text(text: str) -> None:
    """Text printed as it is, without Rich (an export to stdout), masked like the rest."""
    from acode.security.redaction import redact

    sys.stdout.write(redact(text))
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
