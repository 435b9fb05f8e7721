"""`acode queue` and `acode worker`: the fleet's commands (docs/fleet.md). Parse, call
acode.fleet, render."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from acode.cli.entry import plan_file_of
from acode.cli.options import JsonOption, WorkspaceOption
from acode.errors import UsageError

if TYPE_CHECKING:
    from acode.fleet.queue import Queue, QueueItem

__all__ = ["queue_app", "worker_app"]

queue_app = typer.Typer(
    help="Queue sessions for a fleet of workers (a PostgreSQL queue).", no_args_is_help=True
)
worker_app = typer.Typer(
    help="Claim queued sessions, run each in a scratch clone, push its result as a branch.",
    invoke_without_command=True,
)

QueueOption = Annotated[
    str | None, typer.Option("--queue", help="The queue's name (default: default).")
]
_QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _queue_name(name: str | None) -> str:
    if name is None:
        return "default"
    if not _QUEUE_NAME.fullmatch(name):
        raise UsageError(
            f"--queue {name!r}: a queue's name is 1 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
            hint="acode queue add PLAN.yaml --repo URL --queue nightly",
        )
    return name


def _open_queue(workspace: Path | None) -> Queue:
    from acode.cli.entry import workspace_dir
    from acode.engine.config import load_config
    from acode.fleet.queue import Queue, fleet_url

    return Queue(fleet_url(load_config(workspace_dir(workspace))))


@queue_app.command("add")
def queue_add(
    target: Annotated[
        str,
        typer.Argument(
            help="A plan file (PLAN.yaml), checked now, or a task for the model in quotes.",
            metavar="PLAN_OR_TASK",
        ),
    ],
    repo: Annotated[
        str, typer.Option("--repo", help="The git repository the session works on (URL or path).")
    ],
    branch: Annotated[
        str | None, typer.Option("--branch", help="The branch to clone (default: its default).")
    ] = None,
    queue: QueueOption = None,
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Put a session on the queue: a worker clones the repository, runs it, and pushes
    its result as the branch acode/<short session id>."""
    from acode.fleet.repo import check_branch, check_repo_url

    name = _queue_name(queue)
    url = check_repo_url(repo)
    checked_branch = check_branch(branch) if branch is not None else None
    plan_file = plan_file_of(target)
    plan_text, task, title = None, None, target.strip()
    if plan_file is not None:
        from acode.engine.plan_loader import load_plan

        plan = load_plan(plan_file)  # what `acode run` checks, before anything is queued
        plan_text, title = plan_file.read_text(encoding="utf-8"), plan.title
    else:
        task = target
    q = _open_queue(workspace)
    try:
        item = q.add(
            queue=name, title=title, plan=plan_text, task=task, repo_url=url, branch=checked_branch
        )
    finally:
        q.close()
    if as_json:
        from acode.cli.console import emit_json

        emit_json(_item_json(item))
        return
    from acode.cli.console import out_console

    out_console().print(
        f"Queued item {item.id} on {name}: {item.title} ({_repo(item)})", markup=False
    )


@queue_app.command("list")
def queue_list(
    queue: QueueOption = None,
    state: Annotated[
        str | None,
        typer.Option(
            "--state", help="Only items in this state: queued, running, done, failed, cancelled."
        ),
    ] = None,
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """The items of the queues: queued, running (where, since when), done (its branch),
    failed (why), cancelled."""
    from acode.fleet.queue import STATES

    if state is not None and state not in STATES:
        raise UsageError(f"--state {state!r}: not a state", hint=f"give one of {', '.join(STATES)}")
    q = _open_queue(workspace)
    try:
        items = q.items(queue=None if queue is None else _queue_name(queue), state=state)
    finally:
        q.close()
    if as_json:
        from acode.cli.console import emit_json

        emit_json([_item_json(i) for i in items])
        return
    from acode.cli.console import cells, out_console

    if not items:
        out_console().print("No queue items.", markup=False)
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    # The short columns keep their width; the title and the detail (a failure's whole
    # reason) wrap to fit the terminal.
    for name in ("ID", "QUEUE", "STATE", "SINCE (UTC)"):
        table.add_column(name, no_wrap=True, justify="right" if name == "ID" else "left")
    table.add_column("TITLE", min_width=8, max_width=30)
    table.add_column("DETAIL", min_width=10)
    for i in items:
        table.add_row(
            *cells(str(i.id), i.queue, i.state, _since(i), i.title.splitlines()[0], _detail(i))
        )
    out_console().print(table)


@queue_app.command("cancel")
def queue_cancel(
    item_id: Annotated[
        int, typer.Argument(help="The queue item's id (acode queue list).", metavar="ID")
    ],
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Cancel a queued or running item; a worker running it stops its session."""
    q = _open_queue(workspace)
    try:
        item = q.cancel(item_id)
    finally:
        q.close()
    if as_json:
        from acode.cli.console import emit_json

        emit_json(_item_json(item))
        return
    from acode.cli.console import out_console

    out_console().print(f"Cancelled item {item.id}: {item.title}", markup=False)


@worker_app.callback()
def worker(
    ctx: typer.Context,
    concurrency: Annotated[
        int,
        typer.Option("--concurrency", min=1, max=256, help="Sessions run at once (1 to 256)."),
    ] = 1,
    queue: QueueOption = None,
    once: Annotated[
        bool,
        typer.Option("--once", help="Exit once the queue has nothing queued or running."),
    ] = False,
    workspace: WorkspaceOption = None,
    as_json: JsonOption = False,
) -> None:
    """Claim queued sessions, run each in a scratch clone under .agent/fleet/, push its
    result as the branch acode/<short id>. SIGTERM or Ctrl+C: pause the sessions, give
    their items back, exit 0."""
    if ctx.invoked_subcommand is not None:
        return
    from acode.cli.entry import workspace_dir
    from acode.engine.config import load_config
    from acode.fleet.queue import fleet_url
    from acode.fleet.worker import Worker, WorkerOptions

    home = workspace_dir(workspace)
    config = load_config(home)
    options = WorkerOptions(
        url=fleet_url(config),
        home=home,
        queue=_queue_name(queue),
        concurrency=concurrency,
        lease_seconds=config.fleet.lease_seconds,
        once=once,
        store_url=config.store.url,
    )
    raise typer.Exit(Worker(options, _reporter(as_json)).run())


@worker_app.command("status")
def worker_status(workspace: WorkspaceOption = None, as_json: JsonOption = False) -> None:
    """The workers seen: where they run, since when, items running, last heartbeat."""
    q = _open_queue(workspace)
    try:
        workers = q.workers()
    finally:
        q.close()
    if as_json:
        from acode.cli.console import emit_json

        emit_json([{**w._asdict(), **_times(w._asdict())} for w in workers])
        return
    from acode.cli.console import cells, out_console

    if not workers:
        out_console().print("No workers seen.", markup=False)
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("WORKER", "HOST", "PID", "QUEUE", "SINCE (UTC)", "RUNNING", "HEARTBEAT"):
        table.add_column(column, no_wrap=True)
    for w in workers:
        beat = "stopped " + _time(w.stopped_at) if w.stopped_at else _time(w.heartbeat_at)
        table.add_row(
            *cells(
                w.id,
                w.host,
                str(w.pid),
                w.queue,
                _time(w.started_at),
                f"{w.running}/{w.concurrency}",
                beat,
            )
        )
    out_console().print(table)


# -- rendering ------------------------------------------------------------------------


def _repo(item: QueueItem) -> str:
    from acode.fleet.repo import mask_url

    where = mask_url(item.repo_url)
    return f"{where} {item.branch}" if item.branch else where


def _time(moment: datetime | None, form: str = "%Y-%m-%d %H:%M:%S") -> str:
    return moment.astimezone(UTC).strftime(form) if moment else ""


def _times(row: dict[str, Any]) -> dict[str, Any]:
    """The row's times in ISO 8601 (UTC), for JSON."""
    return {
        k: _time(v, "%Y-%m-%dT%H:%M:%SZ") or None
        for k, v in row.items()
        if isinstance(v, datetime) or v is None
    }


def _since(item: QueueItem) -> str:
    moment = {"running": item.started_at, "queued": item.created_at}.get(item.state)
    return _time(moment or item.finished_at or item.updated_at, "%m-%d %H:%M")


def _detail(item: QueueItem) -> str:
    if item.state == "running":
        return f"{item.worker_host} pid {item.worker_pid}, attempt {item.attempts}"
    if item.state == "done":
        return f"branch {item.result_branch}"
    if item.state == "failed":
        return item.error or ""
    if item.state == "queued" and item.session_id:
        from acode.fleet.repo import fleet_id

        return f"to resume session {fleet_id(item.session_id)}"
    return _repo(item)


def _item_json(item: QueueItem) -> dict[str, Any]:
    row = item._asdict()
    row.pop("plan")
    row["repo_url"] = _repo(item) if not item.branch else _repo(item).rsplit(" ", 1)[0]
    row["kind"] = "plan" if item.plan is not None else "task"
    return {**row, **_times(row)}


def _reporter(as_json: bool) -> Any:
    import sys

    from acode.cli.console import emit_json

    def plain(event: dict[str, Any]) -> None:
        kind = event.pop("event")
        detail = " ".join(f"{k}={v}" for k, v in event.items() if v is not None)
        from acode.security.redaction import redact

        print(redact(f"{kind} {detail}"), file=sys.stdout, flush=True)

    def as_line(event: dict[str, Any]) -> None:
        emit_json(event)
        sys.stdout.flush()

    return as_line if as_json else plain
