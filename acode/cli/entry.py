"""The `acode` command's way in: every outcome mapped to its documented exit status, and
`acode session list`, what scripts run most, answered without the command-line parser.

Typer costs more to load and to build a command from its signature than the listing
itself costs (and Rich as much again, which a plain table does without: see
``views.print_session_list``). A command line that is a plain listing (``session list``
with ``--workspace``/``-w DIR``, ``--resumable``, ``--all``, ``--json``) is read here;
every other, --help and every mistake included, goes to the parser (``acode.cli.app``),
which says what is wrong with it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

from acode.errors import AcodeError, ErrorCode, UsageError

__all__ = ["interrupted", "main", "workspace_dir"]


def main() -> None:
    """Entry point: maps every outcome to the documented exit status."""
    from acode.cli.console import render_error
    from acode.security.child_env import scrub_own_environment

    # Before anything can start a process that reads this one's /proc/PID/environ.
    scrub_own_environment()

    try:
        _refuse_undecodable(sys.argv[1:])
        listing = _listing(sys.argv[1:])
        if listing is None:
            from acode.cli.app import run_parser

            code = run_parser()
        else:
            from acode.cli import inspect

            where = workspace_dir(listing.workspace)
            inspect.session_list(where, listing.resumable, listing.show_all, listing.as_json)
            code = 0
    except AcodeError as error:
        render_error(error)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        sys.exit(interrupted())
    except Exception as unexpected:
        from acode.store.sqlite.connection import damaged_database

        # A damaged database file is met by whichever query reads the damaged page first:
        # the environment's fault, reported as such wherever it surfaces.
        damage = damaged_database(unexpected)
        if damage is not None:
            render_error(damage)
            sys.exit(damage.exit_code)
        _report_bug(unexpected)
        sys.exit(1)
    sys.exit(code)


def interrupted() -> int:
    """Ctrl+C (or the parser's abort): said, and its exit status."""
    from acode.cli.console import err_console

    err_console().print("Interrupted.")
    return 130


def workspace_dir(option: Path | None) -> Path:
    from acode.runtime.workspace import find_workspace

    if option is None:
        return find_workspace(Path.cwd())
    if not option.is_dir():
        raise UsageError(
            f"--workspace {option}: no such directory",
            hint="give the directory of the project the session works in",
        )
    return option.resolve()


class _Listing(NamedTuple):
    workspace: Path | None
    resumable: bool
    show_all: bool
    as_json: bool


_FLAGS = {"--resumable": "resumable", "--all": "show_all", "--json": "as_json"}


def _listing(args: list[str]) -> _Listing | None:
    """The options of ``args`` when it is a plain ``session list`` command line, as the
    parser would read them (an option given twice: the last one); None for any other."""
    if args[:2] != ["session", "list"]:
        return None
    found: dict[str, bool] = {}
    workspace: str | None = None
    rest = iter(args[2:])
    for arg in rest:
        if arg in _FLAGS:
            found[_FLAGS[arg]] = True
            continue
        if arg in ("-w", "--workspace"):
            value = next(rest, None)
        elif arg.startswith("--workspace="):
            value = arg.removeprefix("--workspace=")
        elif arg.startswith("-w"):
            value = arg.removeprefix("-w")
        else:
            return None  # --remote, --help, an argument, a mistake: the parser's
        if not value or value.startswith("-"):
            return None  # a missing or odd directory: the parser says what it makes of it
        workspace = value
    return _Listing(
        Path(workspace) if workspace is not None else None,
        found.get("resumable", False),
        found.get("show_all", False),
        found.get("as_json", False),
    )


def _refuse_undecodable(args: list[str]) -> None:
    """acode records what it is given as UTF-8 text; an argument that is not (Python
    carries its bytes as lone surrogates) would fail only when it is written."""
    for arg in args:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as exc:
            shown = ascii(arg if len(arg) <= 60 else arg[:57] + "...")
            raise UsageError(
                f"the argument {shown} is not UTF-8 text",
                hint="give every argument in UTF-8 (rename a file whose name is not)",
            ) from exc


def _report_bug(unexpected: Exception) -> None:
    from rich.markup import escape

    from acode.cli.console import err_console
    from acode.security.redaction import redact

    what = escape(redact(f"{type(unexpected).__name__}: {unexpected}"))
    err_console().print(
        f"[bold red]internal error[/] [dim]{ErrorCode.INTERNAL.value}[/]: {what}\n"
        "  [yellow]hint:[/] this is a bug in acode, not a problem with what you gave it; "
        "please report it with the command you ran and this message. What acode recorded "
        "before it stays as it was: `acode session list` shows any session it left to resume."
    )
