"""`acode sync` and `acode session list --remote`: the commands that act on the remote.

Both push what waits for the remote first. Nothing here imports the driver: the sync
service does, when it connects.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acode.cli.console import count, emit_json, err_console
from acode.cli.handoff_views import print_refs_pushed, refs_pushed_json
from acode.cli.sync_views import print_remote_sessions, print_sync_report, sync_report_json
from acode.domain.states import SessionState, is_resumable
from acode.engine.config import load_config
from acode.engine.sync_link import log_sync_notice
from acode.errors import UsageError
from acode.operations.inspection import read_store
from acode.security.redaction import redact
from acode.system.workspace import StatePaths

if TYPE_CHECKING:
    from acode.sync.service import SyncReport

__all__ = ["configured_remote", "list_remote", "run_sync"]


def configured_remote(workspace: Path) -> str | None:
    return load_config(workspace).sync.remote


def _require_remote(workspace: Path) -> str:
    config = load_config(workspace)
    if config.store.url is not None:
        raise UsageError(
            f"the sessions of {workspace} are in the PostgreSQL store itself: there is no "
            "remote mirror to list",
            hint=f"acode session list -w {_quoted(workspace)} lists them from the store",
        )
    if config.sync.remote is None:
        raise UsageError(
            f"no remote is configured for {workspace}",
            hint="set sync.remote in .agent/config.yml or ACODE_SYNC_DSN to a PostgreSQL URL "
            "(docs/sync.md)",
        )
    return config.sync.remote


def _quoted(workspace: Path) -> str:
    import shlex

    return shlex.quote(str(workspace))


def run_sync(workspace: Path, *, wait: bool, timeout: float, as_json: bool) -> int:
    """Push every session's pending events, and their hand-off refs; 0 when the remotes
    have everything, 1 when something still waits (the reason is printed)."""
    if timeout <= 0:
        raise UsageError(f"--timeout {timeout:g}: expected a number of seconds above 0")
    config = load_config(workspace)
    if config.store.url is not None and config.handoff.remote is None:
        # store.url and sync.remote exclude each other: the mirror is not the fix here.
        raise UsageError(
            f"nothing to sync for {workspace}: its sessions are in the PostgreSQL store "
            "itself, every step committed there",
            hint="to move work trees between machines, set handoff.remote in "
            ".agent/config.yml to a git remote such as origin (docs/fleet.md)",
        )
    if config.sync.remote is None and config.handoff.remote is None:
        raise UsageError(
            f"no remote is configured for {workspace}",
            hint="set sync.remote in .agent/config.yml or ACODE_SYNC_DSN to a PostgreSQL URL "
            "(docs/sync.md), or handoff.remote to a git remote such as origin (docs/fleet.md)",
        )
    data: dict[str, Any] = {}
    code = 0
    if config.sync.remote is not None:
        report, short = _sync_events(workspace, config.sync.remote, wait=wait, timeout=timeout)
        if as_json:
            data = sync_report_json(report, short)
        else:
            print_sync_report(report, short, as_json=False)
        code = 0 if report.reason is None else 1
    if config.handoff.remote is not None:
        from acode.engine.handoff import push_waiting_refs

        refs = push_waiting_refs(workspace, config.handoff, wait=wait, timeout=timeout)
        if as_json:
            data["handoff"] = refs_pushed_json(refs)
        else:
            print_refs_pushed(refs)
        code = code or (0 if refs.reason is None else 1)
    if as_json:
        emit_json(data)
    return code


def _sync_events(
    workspace: Path, remote: str, *, wait: bool, timeout: float
) -> tuple[SyncReport, dict[str, str]]:
    from acode.sync.service import SyncReport, sync_workspace

    paths = StatePaths(workspace)
    with read_store(workspace) as store:  # brings the schema up to date first
        short = {r.id: r.short_id for r in store.sessions()} if store is not None else {}
    if store is None:
        from acode.sync.dsn import describe_remote

        return SyncReport(describe_remote(remote)), short
    report = sync_workspace(
        paths.db, remote, wait=wait, timeout=timeout, report=partial(log_sync_notice, paths)
    )
    return report, short


def list_remote(workspace: Path, *, resumable: bool, show_all: bool, as_json: bool) -> None:
    """The sessions on the remote, beside this workspace's (after pushing them)."""
    from acode.sync.service import remote_sessions

    remote = _require_remote(workspace)
    paths = StatePaths(workspace)
    with read_store(workspace) as store:
        local = store.sessions() if store is not None else []
        pruned = frozenset(r.id for r in store.pruned_with_prefix("")) if store else frozenset()
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
    print_remote_sessions(found, local, report.remote, as_json, pruned)
