"""The `acode` command's way in: every outcome mapped to its documented exit status, and
the command lines scripts run most, `acode session list` and `acode resume --dry-run`,
answered without the command-line parser.

Typer costs more to load and to build a command from its signature than the listing
itself costs (and Rich as much again, which a plain table does without: see
``views.print_session_list``). A command line that is a plain listing (``session list``
with ``--workspace``/``-w DIR``, ``--resumable``, ``--all``, ``--json``) or a plain dry
run (``resume [ID] --dry-run`` with ``-w DIR``, ``--json``, ``--verify``) is read here;
every other, --help and every mistake included, goes to the parser (``acode.cli.app``),
which says what is wrong with it."""

from __future__ import annotations

import gc
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
    _open_closed_streams()

    try:
        _refuse_undecodable(sys.argv[1:])
        listing = _listing(sys.argv[1:])
        dry_run = None if listing is not None else _dry_run(sys.argv[1:])
        if listing is not None or dry_run is not None:
            # A command that ends once it has printed its answer: the few reference
            # cycles it leaves go with the process, and collecting garbage on the way
            # (some thirty collections, over every object its imports made) costs more.
            gc.disable()
        if listing is not None:
            from acode.cli import inspect

            where = workspace_dir(listing.workspace)
            inspect.session_list(where, listing.resumable, listing.show_all, listing.as_json)
            code = 0
        elif dry_run is not None:
            from acode.cli.resume_command import ResumeRequest, run_resume

            # What the parser's `resume` builds of the same command line (cli/app.py).
            request = ResumeRequest(
                workspace=workspace_dir(dry_run.workspace),
                session_id=dry_run.session_id,
                dry_run=True,
                strategy=None,
                force=False,
                changed_files_action=None,
                verify=dry_run.verify,
                mode=None,
                as_json=dry_run.as_json,
            )
            code = run_resume(request)
        else:
            from acode.cli.app import run_parser

            code = run_parser()
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


def _open_closed_streams() -> None:
    """A command started with its output closed (``acode resume >&-``, a service manager)
    still does its work; what it would print goes to /dev/null. Python leaves such a
    stream None, which every print would fail on after the work had begun."""
    import os

    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            # The lowest free descriptor is the closed one: the processes a session
            # starts inherit /dev/null there too, not whatever file is opened next.
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115


def interrupted() -> int:
    """Ctrl+C (or the parser's abort): said, and its exit status."""
    from acode.cli.console import err_console

    err_console().print("Interrupted.")
    return 130


def workspace_dir(option: Path | None) -> Path:
    from acode.system.workspace import find_workspace

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


class _DryRun(NamedTuple):
    workspace: Path | None
    session_id: str | None
    as_json: bool
    verify: bool


class _Options(NamedTuple):
    flags: frozenset[str]
    workspace: Path | None
    arguments: tuple[str, ...]


def _listing(args: list[str]) -> _Listing | None:
    """The options of ``args`` when it is a plain ``session list`` command line, as the
    parser would read them (an option given twice: the last one); None for any other."""
    if args[:2] != ["session", "list"]:
        return None
    read = _options(args[2:], ("--resumable", "--all", "--json"))
    if read is None or read.arguments:
        return None
    return _Listing(
        workspace=read.workspace,
        resumable="--resumable" in read.flags,
        show_all="--all" in read.flags,
        as_json="--json" in read.flags,
    )


def _dry_run(args: list[str]) -> _DryRun | None:
    """The options of ``args`` when it is a plain ``resume [ID] --dry-run`` command line,
    as the parser would read them; None for any other (``--mode``, ``--strategy``, and
    the rest that a dry run has no use for, are the parser's to read)."""
    if args[:1] != ["resume"]:
        return None
    read = _options(args[1:], ("--dry-run", "--json", "--verify"))
    if read is None or "--dry-run" not in read.flags or len(read.arguments) > 1:
        return None
    session_id = read.arguments[0] if read.arguments else None
    return _DryRun(
        workspace=read.workspace,
        session_id=session_id,
        as_json="--json" in read.flags,
        verify="--verify" in read.flags,
    )


def _options(words: list[str], flags: tuple[str, ...]) -> _Options | None:
    """``words`` read as the parser reads a command's ``flags``, its ``--workspace``/``-w
    DIR`` (given twice: the last) and its arguments; None when something in them is not
    plainly one of these (another option, a missing or odd directory, ``--``): the
    parser says what it makes of it."""
    found: set[str] = set()
    workspace: str | None = None
    arguments: list[str] = []
    rest = iter(words)
    for word in rest:
        if word in flags:
            found.add(word)
            continue
        if word in ("-w", "--workspace"):
            value = next(rest, None)
        elif word.startswith("--workspace="):
            value = word.removeprefix("--workspace=")
        elif word.startswith("-w"):
            value = word.removeprefix("-w")
        elif word and not word.startswith("-"):
            arguments.append(word)
            continue
        else:
            return None  # another option, --help, --, a mistake: the parser's
        if not value or value.startswith("-"):
            return None  # a missing or odd directory: the parser says what it makes of it
        workspace = value
    return _Options(
        flags=frozenset(found),
        workspace=Path(workspace) if workspace is not None else None,
        arguments=tuple(arguments),
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
