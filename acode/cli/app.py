"""The `acode` command: parse, call the library, render. No decision is made here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from acode.cli.entry import main, plan_file_of, workspace_dir
from acode.cli.options import JsonOption, RecentSessionArgument, SessionArgument, WorkspaceOption
from acode.errors import UsageError

if TYPE_CHECKING:
    from acode.domain.config import AcodeConfig
    from acode.resume.modes import Mode
    from acode.resume.service import ChangedFilesAction

__all__ = ["app", "main", "workspace_dir"]

app = typer.Typer(
    name="acode",
    help="Crash-proof AI coding-agent sessions: every step recorded, any interruption resumable.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
session_app = typer.Typer(help="List, inspect and manage sessions.", no_args_is_help=True)
app.add_typer(session_app, name="session")


def _print_version(asked: bool) -> None:
    if asked:
        from acode import __version__

        print(f"acode {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print acode's version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    """The options of `acode` itself, before any command."""


def _commands_for(argv: list[str]) -> None:
    """Typer builds every registered command from its signature at each start, a good
    part of what a command line costs before it runs. A command line that names a command
    (``acode status ...``, ``acode session list ...``) reaches no other: only it is built.
    The work commands (task, work, wsession, settings), half of all, join the command
    line that can reach them: any that names no command of this module (help, a work
    command, a typo, which the parser answers with the names close to it); the fleet's
    (queue, worker) alone when named, else with them."""
    if _keep_only(app, argv[:1]):
        if argv[0] == "session":
            _keep_only(session_app, argv[1:2])
        return
    from acode.cli.fleet_app import queue_app, worker_app

    fleet = {"queue": queue_app, "worker": worker_app}
    if argv[:1] and argv[0] in fleet:
        app.registered_commands, app.registered_groups = [], []
        app.add_typer(fleet[argv[0]], name=argv[0])
        return
    if any(g.name == "queue" for g in app.registered_groups):
        return  # added already
    for name, group in fleet.items():
        app.add_typer(group, name=name)
    from acode.cli.work_app import settings_app, task_app, work_app, wsession_app

    app.add_typer(task_app, name="task")
    app.add_typer(work_app, name="work")
    app.add_typer(wsession_app, name="wsession")
    app.add_typer(settings_app, name="settings")


def _keep_only(group: typer.Typer, words: list[str]) -> bool:
    """Leave ``group`` only the command or sub-group ``words`` names, if it names one."""
    commands = {
        c.name or (c.callback.__name__ if c.callback else ""): c for c in group.registered_commands
    }
    groups = {g.name: g for g in group.registered_groups}
    if not words or (words[0] not in commands and words[0] not in groups):
        return False
    group.registered_commands = [commands[words[0]]] if words[0] in commands else []
    group.registered_groups = [groups[words[0]]] if words[0] in groups else []
    return True


@app.command()
def run(
    target: Annotated[
        str,
        typer.Argument(
            help="A plan file (PLAN.yaml) to run, or a task for the model in quotes: "
            '"Add email validation to src/login.py".',
            metavar="PLAN_OR_TASK",
        ),
    ],
    workspace: WorkspaceOption = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Model name (replaces model.name).")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="OpenAI-compatible API root (replaces model.base_url)."),
    ] = None,
    max_turns: Annotated[
        int | None,
        typer.Option("--max-turns", help="Model turns per task (replaces agent.max_turns)."),
    ] = None,
    approve_plan: Annotated[
        bool, typer.Option("--approve-plan", help="Ask before executing the model's plan.")
    ] = False,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            help="autopilot (never asks), interactive or preflight; recorded, and the default "
            "of its resume (default: interactive on a terminal, else autopilot).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Run a plan file, or a task with the model, as a new session. Ctrl+C pauses it;
    `acode resume` continues it."""
    from acode.resume.modes import start_mode

    started = start_mode(_mode(mode), sys.stdin.isatty())
    ws = workspace_dir(workspace)
    flags = {
        "model.name": model,
        "model.base_url": base_url,
        "agent.max_turns": max_turns,
        "agent.approve_plan": True if approve_plan else None,
    }
    overrides = {key: value for key, value in flags.items() if value is not None}
    plan_file = plan_file_of(target)
    if plan_file is None:
        from acode.cli.agent_command import AgentRequest, run_agent_command
        from acode.engine.lifecycle import open_workspace

        request = AgentRequest(
            workspace=ws, task=target, overrides=overrides, as_json=as_json, mode=started
        )
        raise typer.Exit(run_agent_command(request, open_workspace(ws).config))
    if overrides:
        from acode.cli.agent_command import AGENT_FLAGS

        raise UsageError(
            f"{', '.join(AGENT_FLAGS[k] for k in overrides)}: only for a task, not a plan file",
            hint="set the model of a plan's model steps in .agent/config.yml",
        )
    from acode.cli.driver import start_plan
    from acode.engine.plan_loader import load_plan

    plan = load_plan(plan_file)
    raise typer.Exit(start_plan(plan, ws, as_json=as_json, mode=started, plan_file=plan_file))


Strategy = Literal["rollback", "retry", "prompt"]


@app.command()
def resume(
    session_id: Annotated[
        str | None, typer.Argument(help="Session id or prefix (default: the most recent).")
    ] = None,
    workspace: WorkspaceOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would happen; take no lock, write nothing.")
    ] = False,
    strategy: Annotated[
        str | None,
        typer.Option(
            "--strategy",
            help="What to do with a step that was interrupted half-way: rollback (default), "
            "retry or prompt.",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Resume despite the environment report: a changed configuration (the new "
            "one is used) and changed files (kept). Not past a missing workspace or model. "
            "A session from another machine: overwrite local changes with its work tree.",
        ),
    ] = False,
    continue_on_changes: Annotated[
        bool,
        typer.Option(
            "--continue-on-changes",
            help="Go on when files the session touched (or, after a pause, any file) have "
            "changed; the changes are kept.",
        ),
    ] = False,
    abort_on_changes: Annotated[
        bool,
        typer.Option("--abort-on-changes", help="Stop (exit 17) when such files have changed."),
    ] = False,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            help="autopilot (never asks; default without a terminal), interactive (default on a "
            "terminal) or preflight (full report, then type 'proceed').",
        ),
    ] = None,
    any_age: Annotated[
        bool,
        typer.Option(
            "--any-age",
            help="Autopilot: resume even a session interrupted 24 hours ago or more.",
        ),
    ] = False,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Replay the whole history from the first event and compare it with the "
            "checkpoints before resuming.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Continue an interrupted session exactly where it stopped."""
    from acode.cli.resume_command import ResumeRequest, run_resume

    request = ResumeRequest(
        workspace=workspace_dir(workspace),
        session_id=session_id,
        dry_run=dry_run,
        strategy=_strategy(strategy),
        force=force,
        changed_files_action=_changes_action(continue_on_changes, abort_on_changes),
        verify=verify,
        mode=_mode(mode),
        as_json=as_json,
        any_age=any_age,
    )
    raise typer.Exit(run_resume(request))


def _changes_action(go_on: bool, stop: bool) -> ChangedFilesAction | None:
    if go_on and stop:
        raise UsageError("--continue-on-changes and --abort-on-changes exclude each other")
    return "continue" if go_on else "abort" if stop else None


def _mode(value: str | None) -> Mode | None:
    from acode.resume.modes import Mode

    if value is None:
        return None
    try:
        return Mode(value)
    except ValueError:
        raise UsageError(
            f"--mode {value!r} is not one of autopilot, interactive, preflight"
        ) from None


def _strategy(value: str | None) -> Strategy | None:
    if value is None:
        return None
    if value not in ("rollback", "retry", "prompt"):
        raise UsageError(
            f"--strategy {value!r} is not one of rollback, retry, prompt",
            hint="rollback restores a half-done step's files before running it again",
        )
    return value  # type: ignore[return-value]


@app.command()
def status(
    session_id: RecentSessionArgument = None,
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a session's state, progress, lock, sync and hand-off status."""
    from acode.cli import inspect

    inspect.status(workspace_dir(workspace), session_id, as_json)


@app.command()
def sync(
    workspace: WorkspaceOption = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Retry with back-off until everything is pushed or --timeout passes.",
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option("--timeout", metavar="S", help="Give up after S seconds (default 30)."),
    ] = 30.0,
    as_json: JsonOption = False,
) -> None:
    """Push every session's pending events and hand-off refs now; exit 1 while some wait."""
    from acode.cli.sync_command import run_sync

    code = run_sync(workspace_dir(workspace), wait=wait, timeout=timeout, as_json=as_json)
    raise typer.Exit(code)


@app.command()
def doctor(workspace: WorkspaceOption = None, as_json: JsonOption = False) -> None:
    """Check acode's set-up here, each problem with its fix; exit 1 if a check fails."""
    from acode.cli.doctor_views import print_checks
    from acode.operations.doctor import diagnose, failed
    from acode.resume.environment import check_model

    def probe(config: AcodeConfig) -> tuple[str, str] | None:
        found = check_model(config)
        if found.problem is None:
            return None
        url = found.base_url.rstrip("/")
        fix = found.busy_hint("run acode doctor") if found.busy else f"curl -s {url}/models"
        return found.problem, fix

    checks = diagnose(workspace_dir(workspace), probe)
    print_checks(checks, as_json)
    raise typer.Exit(1 if failed(checks) else 0)


@session_app.command("list")
def session_list(
    workspace: WorkspaceOption = None,
    resumable: Annotated[
        bool, typer.Option("--resumable", help="Only sessions `acode resume` can continue.")
    ] = False,
    show_all: Annotated[bool, typer.Option("--all", help="Include discarded sessions.")] = False,
    remote: Annotated[
        bool,
        typer.Option(
            "--remote",
            help="The sessions on the remote (after pushing pending events), and where each "
            "exists.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """List sessions, most recent first."""
    from acode.cli import inspect

    inspect.session_list(workspace_dir(workspace), resumable, show_all, as_json, remote=remote)


@session_app.command("show")
def session_show(
    session_id: SessionArgument, workspace: WorkspaceOption = None, as_json: JsonOption = False
) -> None:
    """Show one session with its steps."""
    from acode.cli import inspect

    inspect.session_show(workspace_dir(workspace), session_id, as_json)


@session_app.command("history")
def session_history(
    session_id: RecentSessionArgument = None,
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a session's events in replay order (timestamp, then event id)."""
    from acode.cli import inspect

    inspect.session_history(workspace_dir(workspace), session_id, as_json)


@session_app.command("unlock")
def session_unlock(
    session_id: SessionArgument,
    workspace: WorkspaceOption = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Break the lock even though its holder is still running."),
    ] = False,
) -> None:
    """Remove a session's lock file when its holder is gone (or with --force)."""
    from acode.cli import inspect

    inspect.session_unlock(workspace_dir(workspace), session_id, force)


@session_app.command("export")
def session_export(
    session_id: SessionArgument,
    workspace: WorkspaceOption = None,
    fmt: Annotated[
        str, typer.Option("--format", help="md (the progress file) or json (everything).")
    ] = "md",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write to this file instead of stdout (never inside .agent/state).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the --output file if it exists.")
    ] = False,
) -> None:
    """Export a session, redacted: the progress file (md) or the complete history (json)."""
    from acode.cli import inspect

    inspect.session_export(workspace_dir(workspace), session_id, fmt, output, force=force)


@session_app.command("archive")
def session_archive(
    session_id: SessionArgument,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="The archive file to write (never inside .agent/state).",
        ),
    ],
    workspace: WorkspaceOption = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the --output file if it exists.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Write a stopped session, whole and signed, unredacted, to a file `session import`
    takes back (events, checkpoints, file images)."""
    from acode.cli.archive_command import session_archive as archive

    archive(workspace_dir(workspace), session_id, output, force=force, as_json=as_json)


@session_app.command("import")
def session_import(
    archive: Annotated[Path, typer.Argument(help="An archive `acode session archive` wrote.")],
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Verify an archive (its MAC, the session's history, every checkpoint), then add its
    session to this workspace, all or nothing."""
    from acode.cli.archive_command import session_import as import_

    import_(workspace_dir(workspace), archive, as_json=as_json)


@session_app.command("discard")
def session_discard(
    session_id: SessionArgument, workspace: WorkspaceOption = None, as_json: JsonOption = False
) -> None:
    """Give up on a resumable session: it leaves the resumable list, its history stays."""
    from acode.cli import inspect

    inspect.session_discard(workspace_dir(workspace), session_id, as_json)


@session_app.command("prune")
def session_prune(
    workspace: WorkspaceOption = None,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="AGE",
            help="Sessions last updated longer ago than AGE: 30d, 12h, 2w.",
        ),
    ] = None,
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            help="Only sessions in this state: completed, failed, cancelled or discarded "
            "(repeatable).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be removed; remove nothing.")
    ] = False,
    include_backups: Annotated[
        bool,
        typer.Option(
            "--include-backups",
            help="Remove the -before-rollback snapshot refs too (they hold what a rollback "
            "overwrote).",
        ),
    ] = False,
    archive: Annotated[
        Path | None,
        typer.Option(
            "--archive",
            metavar="DIR",
            help="Archive each session to DIR/<id>.acode.gz first; one that cannot be "
            "archived stays.",
        ),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="Remove without asking (needed without a terminal).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Remove ended sessions for good: by --older-than and --state, else by the
    retention: settings. Never one that can be resumed, runs, or is not synced yet."""
    from acode.cli.prune_command import run_prune

    code = run_prune(
        workspace_dir(workspace),
        older_than=older_than,
        states=state,
        dry_run=dry_run,
        include_backups=include_backups,
        archive_dir=archive,
        yes=yes,
        as_json=as_json,
    )
    raise typer.Exit(code)


@session_app.command("checkpoint")
def session_checkpoint(
    session_id: SessionArgument,
    label: Annotated[
        str, typer.Option("--label", "-l", help='The name of the point, e.g. "tests green".')
    ],
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Mark the point a stopped session has reached with a label, as a signed checkpoint
    (acode checkpoints every step already: this names one)."""
    from acode.cli import inspect

    inspect.session_checkpoint(workspace_dir(workspace), session_id, label, as_json)


@app.command()
def approve(
    session_id: Annotated[
        str | None,
        typer.Argument(
            help="Session id or a unique prefix of it (default: the one session waiting)."
        ),
    ] = None,
    workspace: WorkspaceOption = None,
    step: Annotated[
        str | None, typer.Option("--step", help="The approval step (default: the waiting one).")
    ] = None,
    deny: Annotated[bool, typer.Option("--deny", help="Deny instead of approving.")] = False,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Show what the approval gates; record nothing."),
    ] = False,
    subject_hash: Annotated[
        str | None,
        typer.Option(
            "--subject-hash",
            metavar="HASH",
            help="Approve only if what it gates still has this hash (from --dry-run).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Show what a waiting approval gates and record a decision; then `acode resume` it."""
    from acode.cli.approve_command import approve_command

    approve_command(
        session_id,
        workspace_dir(workspace),
        step=step,
        deny=deny,
        dry_run=dry_run,
        subject_hash=subject_hash,
        as_json=as_json,
    )


def run_parser() -> int:
    """The command line ``sys.argv`` names, parsed and run: its exit status. What the
    parser finds wrong is said here; every other outcome is the entry point's
    (:func:`acode.cli.entry.main`)."""
    from acode.cli.entry import interrupted

    _commands_for(sys.argv[1:])
    try:
        # Outside standalone mode, a command's `typer.Exit(code)` comes back as the result.
        # A group always (what `app()` builds of several commands): the one command a
        # command line is left with stays a subcommand (``_commands_for``).
        result = typer.main.get_group(app)(standalone_mode=False)
    except typer.Exit as done:
        return int(done.exit_code)
    except typer.Abort:
        return interrupted()
    except typer.TyperException as bad:  # a usage error found by the parser
        bad.show()  # type: ignore[attr-defined]
        return int(getattr(bad, "exit_code", 2))
    return result if isinstance(result, int) else 0
