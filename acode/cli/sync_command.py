"""`acode sync` and `acode session list --remote`: the commands that act on the remote.

Both push what waits for the remote first. Nothing here imports the driver: the sync
service does, when it connects.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from acode.cli.console import count, err_console
from acode.cli.sync_views import print_remote_sessions, print_sync_report
from acode.domain.states import SessionState, is_resumable
from acode.engine.config import load_config
from acode.engine.sync_link import log_sync_notice
from acode.errors import UsageError
from acode.operations.inspection import read_store
from acode.security.redaction import redact
from acode.system.workspace import StatePaths

__all__ = ["configured_remote", "list_remote", "run_sync"]


def configured_remote(workspace: Path) -> str | None:
    return load_config(workspace).sync.remote


def _require_remote(workspace: Path) -> str:
    remote = configured_remote(workspace)
    if remote is None:
        raise UsageError(
            f"no remote is configured for {workspace}",
            hint="set sync.remote in .agent/config.yml or ACODE_SYNC_DSN to a PostgreSQL URL "
            "(docs/sync.md)",
        )
    return remote


def run_sync(workspace: Path, *, wait: bool, timeout: float, as_json: bool) -> int:
    """Push every session's pending events; 0 when the remote has everything, 1 when
    events still wait (the reason is printed)."""
    from acode.sync.service import SyncReport, sync_workspace

    if timeout <= 0:
        raise UsageError(f"--timeout {timeout:g}: expected a number of seconds above 0")
    remote = _require_remote(workspace)
    paths = StatePaths(workspace)
    with read_store(workspace) as store:  # brings the schema up to date first
        short = {r.id: r.short_id for r in store.sessions()} if store is not None else {}
    if store is None:
        from acode.sync.dsn import describe_remote

        report = SyncReport(describe_remote(remote))
    else:
        report = sync_workspace(
            paths.db, remote, wait=wait, timeout=timeout, report=partial(log_sync_notice, paths)
        )
    print_sync_report(report, short, as_json)
    return 0 if report.reason is None else 1


def list_remote(workspace: Path, *, resumable: bool, show_all: bool, as_json: bool) -> None:
    """The sessions on the remote, beside this workspace's (after pushing them)."""
    from acode.sync.service import remote_sessions

    remote = _require_remote(workspace)
    paths = StatePaths(workspace)
    with read_store(workspace) as store:
        local = store.sessions() if store is not None else []
    if not show_all:
        local = [r for r in local if not r.archived]
    report, found = remote_sessions(paths.db, remote)
    if report.reason is not None:  # the listing goes on; those sessions may lag behind
        err_console().print(
            f"Note: {count(report.pending, 'event')} could not be pushed first: "
            f"{redact(report.reason)}",
            markup=False,
        )
    if resumable:
        found = [s for s in found if is_resumable(SessionState(s.state))]
        local = [r for r in local if is_resumable(SessionState(r.state))]
    print_remote_sessions(found, local, report.remote, as_json)
