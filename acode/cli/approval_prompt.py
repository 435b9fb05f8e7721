"""The approval prompt: what the approval gates, then y / n / v / ?.

Everything shown goes through ``redact`` (no secret on the screen) and ``printable`` (no
escape sequence or bidirectional override in a diff can rewrite or hide what is on the
screen). The pager gets the same text.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

from acode.cli.console import err_console, keyboard, printable
from acode.engine.approval_view import GatedView
from acode.security.child_env import child_environment
from acode.security.redaction import redact

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

__all__ = ["ask_approval", "page", "show_gated"]

# Lines of what an approval gates shown before the question; `v` shows them all.
SHOWN_LINES = 40
_NOTHING = (
    "(nothing more to show: acode shows what the step of a plan file that follows an "
    "approval will do, and here there is none)"
)


def show_gated(view: GatedView | None, console: Console | None = None) -> None:
    """What the approval gates: its heading and the first lines of its text."""
    from rich.text import Text

    console = console or err_console()
    if view is None:
        console.print(_NOTHING, markup=False, style="dim")
        return
    console.print(Text(printable(redact(view.heading)), style="bold"))
    lines = _lines(view)
    for line in lines[:SHOWN_LINES]:
        console.print(_styled(line, view))
    if len(lines) > SHOWN_LINES:
        more = len(lines) - SHOWN_LINES
        console.print(f"  ... {more} more lines: answer v to see them all", style="dim")


def ask_approval(
    step_id: str, question: str, view: GatedView | None, *, denied: str, ctrl_c: str
) -> bool | None:
    """Ask until the answer is y or n (True, False); None at the end of input. ``denied``
    and ``ctrl_c`` say, in the help, what a denial and a Ctrl+C do here. A Ctrl+C is
    raised as it comes (KeyboardInterrupt, or the run's pause request)."""
    from rich.text import Text

    console = err_console()
    can_view = view is not None and bool(view.text)
    choices = "y/n/v/?" if can_view else "y/n/?"
    prompt = Text.assemble(
        ("Approval needed", "bold yellow"),
        f" ({step_id}): {printable(redact(question))} ",
        (f"[{choices}]", "bold magenta"),
        ": ",
    )
    while True:
        console.print(prompt, end="")
        try:
            answer = keyboard().readline().strip().lower()
        except EOFError:
            console.print()
            return None
        if answer in ("y", "yes"):
            return True
        if answer in ("n", "no"):
            return False
        if answer == "v" and view is not None and can_view:
            page(view)
        elif answer == "?":
            console.print(_help(can_view, denied, ctrl_c), markup=False)
        else:
            console.print(f"Please answer {choices.replace('/', ', ')} (? explains them)")


def _help(can_view: bool, denied: str, ctrl_c: str) -> str:
    lines = [
        "  y  approve: the session goes on and runs the step shown",
        f"  n  deny: {denied}",
    ]
    if can_view:
        lines.append("  v  view all of it in a pager ($PAGER, else less -R)")
    lines += ["  ?  this help", f"  Ctrl+C  {ctrl_c}"]
    return "\n".join(lines)


def page(view: GatedView) -> None:
    """The whole of what the approval gates in the person's pager: $PAGER, else
    ``less -R`` when there is one, else printed. The pager writes where the prompt is."""
    text = "\n".join([printable(redact(view.heading)), *_lines(view)]) + "\n"
    command = _pager()
    if command is None:
        err_console().print(text, markup=False, end="")
        return
    sys.stderr.flush()
    try:
        pager = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=sys.stderr.fileno(), env=child_environment()
        )
    except OSError as exc:
        err_console().print(f"cannot start the pager {command[0]}: {exc}", markup=False)
        err_console().print(text, markup=False, end="")
        return
    try:
        pager.communicate(text.encode())  # a pager left early closes the pipe: no error
    finally:
        # A Ctrl+C reaches the pager too, which keeps the terminal until it is left: the
        # pause goes on once it has ended, as git waits for its pager.
        pager.wait()


def _pager() -> list[str] | None:
    chosen = os.environ.get("PAGER")
    if chosen is not None:
        return shlex.split(chosen) or None  # PAGER="" asks for none
    return ["less", "-R"] if shutil.which("less") else None


def _lines(view: GatedView) -> list[str]:
    return printable(redact(view.text)).splitlines()


def _styled(line: str, view: GatedView) -> Text:
    from rich.text import Text

    if not view.files:  # a command or a step, not a diff
        return Text(line)
    if line.startswith(("+++", "---", "diff ", "index ")):
        return Text(line, style="bold")
    if line.startswith("+"):
        return Text(line, style="green")
    if line.startswith("-"):
        return Text(line, style="red")
    if line.startswith("@@"):
        return Text(line, style="cyan")
    return Text(line)
