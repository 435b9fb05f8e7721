"""The read-only commands: status and `session list/show/history/unlock`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from acode.cli.console import emit_json, emit_text, err_console, iso, out_console
from acode.cli.views import (
    print_history,
    print_session_list,
    print_status,
    print_steps,
    session_json,
)
from acode.errors import NothingToResumeError, SessionNotFoundError, UsageError
from acode.operations.inspection import read_store

# What a command needs beyond reading the store loads in that command: `session list`,
# the one a script runs most, must not pay for the others (the remote, the journal).
if TYPE_CHECKING:
    from acode.domain.config import AcodeConfig
    from acode.domain.position import Position
    from acode.engine.handoff import HandoffStatus
    from acode.operations.inspection import SessionDetail
    from acode.store.base import EventStore
    from acode.store.leases import LeaseHolder

__all__ = [
    "session_checkpoint",
    "session_discard",
    "session_export",
    "session_history",
    "session_list",
    "session_show",
    "session_unlock",
    "status",
]


def status(workspace: Path, session_id: str | None, as_json: bool) -> None:
    from acode.engine.config import load_config
    from acode.engine.sync_link import sync_status
    from acode.operations.inspection import session_detail

    config = load_config(workspace)
    with read_store(workspace) as store:
        if store is None:
            raise _no_sessions(workspace)
        try:
            detail = session_detail(
                store, workspace, session_id, worktree=bool(config.handoff.remote)
            )
        except NothingToResumeError:  # none at all: where it looked, in a shared store
            if config.store.url is None:
                raise
            raise _none_in_store(workspace, store, config) from None
        sync = sync_status(store, detail.row, config.sync.remote)
        position = _position(store, detail)
        handoff = _handoff(detail, workspace, config)
        location = store.location
        lease = _lease(store, detail.row.id) if config.store.url is not None else None
    print_status(
        detail.row,
        detail.summary,
        detail.lock_holder,
        as_json,
        sync=sync,
        usage=detail.usage,
        position=position,
        handoff=handoff,
        store=location,
        lease=lease,
    )


def _lease(store: EventStore, session_id: str) -> LeaseHolder | None:
    """The holder of the session's lease in the PostgreSQL store: a process of any
    machine, which this machine's lock file does not see."""
    from acode.store.postgres.store import PostgresStore

    return store.lease_holder(session_id) if isinstance(store, PostgresStore) else None


def _handoff(detail: SessionDetail, workspace: Path, config: AcodeConfig) -> HandoffStatus | None:
    """Where the session's hand-off ref stands; None, with nothing of it loaded, when
    hand-off is off."""
    if not config.handoff.remote:
        return None
    from acode.engine.handoff import handoff_status

    return handoff_status(detail.row, workspace, config.handoff, detail.worktree)


def _no_sessions(workspace: Path) -> NothingToResumeError:
    """For a command that shows the most recent session where there is none."""
    return NothingToResumeError(
        f"no sessions in {workspace}",
        hint='start one with `acode run PLAN.yaml` or `acode run "TASK"`',
    )


def _none_in_store(workspace: Path, store: EventStore, config: AcodeConfig) -> NothingToResumeError:
    """For a command that shows the most recent session of a workspace none of whose
    sessions the PostgreSQL store holds: where it looked, and why another clone's
    sessions may not be seen."""
    error = _no_sessions(workspace)
    return NothingToResumeError(
        f"no sessions of {_in_store(workspace, store, config)}",
        hint=f"{error.hint}; {_SHARED_NAME}" if config.store.workspace is None else error.hint,
    )


# Why a clone in another directory sees none of the sessions recorded in this one.
_SHARED_NAME = (
    "the sessions of a clone in another directory are seen only under a store.workspace "
    "name both set in .agent/config.yml (docs/fleet.md)"
)


def _in_store(workspace: Path, store: EventStore, config: AcodeConfig) -> str:
    from acode.engine.store_choice import workspace_identity

    return f"workspace {workspace_identity(workspace, config.store)} in {store.location}"


def _position(store: EventStore, detail: SessionDetail) -> Position | None:
    """The step the session is at, placed in its plan."""
    from acode.resume.listing import session_position

    s = detail.summary
    return session_position(store, detail.row, s.current_step, s.current_task)


def session_list(
    workspace: Path, resumable: bool, show_all: bool, as_json: bool, *, remote: bool = False
) -> None:
    if remote:
        from acode.cli.sync_command import list_remote

        list_remote(workspace, resumable=resumable, show_all=show_all, as_json=as_json)
        return
    empty_in = None
    with read_store(workspace) as store:
        rows = store.sessions() if store is not None else []
        if not rows and store is not None and not as_json:
            empty_in = _empty_store(workspace, store)
    if empty_in is not None:
        out_console().print(empty_in, markup=False)
        return
    if not show_all:
        rows = [r for r in rows if not r.archived]
    if resumable:
        from acode.engine.catalog import is_resumable_row

        rows = [r for r in rows if is_resumable_row(r)]
    print_session_list(rows, as_json)


def _empty_store(workspace: Path, store: EventStore) -> str | None:
    """What `session list` says of a workspace none of whose sessions the PostgreSQL
    store holds; None for its SQLite file."""
    from acode.engine.config import load_config

    config = load_config(workspace)
    if config.store.url is None:
        return None
    lines = [
        f"No sessions of {_in_store(workspace, store, config)} yet. "
        "Start one with: acode run PLAN.yaml"
    ]
    if config.store.workspace is None:
        lines.append(f"{_SHARED_NAME[0].upper()}{_SHARED_NAME[1:]}.")
    return "\n".join(lines)


def session_show(workspace: Path, session_id: str, as_json: bool) -> None:
    from acode.cli.sync_command import configured_remote
    from acode.engine.sync_link import sync_status
    from acode.operations.inspection import session_detail

    remote = configured_remote(workspace)
    with read_store(workspace) as store:
        if store is None:
            raise SessionNotFoundError(f"no session {session_id!r}: {workspace} has no sessions")
        detail = session_detail(store, workspace, session_id)
        sync = sync_status(store, detail.row, remote)
        position = _position(store, detail) if not as_json else None
        location = store.location
    if as_json:
        data = session_json(detail.row, detail.summary)
        data["lock"] = detail.lock_holder
        data["steps"] = [
            {
                "position": s.position,
                "step": s.step_id,
                "task": s.task_id,
                "kind": s.kind,
                "status": s.status.value,
                "attempt": s.attempt,
            }
            for s in detail.steps
        ]
        emit_json(data)
        return
    print_status(
        detail.row,
        detail.summary,
        detail.lock_holder,
        as_json=False,
        sync=sync,
        position=position,
        store=location,
    )
    if detail.steps:
        out_console().print()
        print_steps(detail.steps)


def session_history(workspace: Path, session_id: str | None, as_json: bool) -> None:
    from acode.operations.inspection import session_events

    with read_store(workspace) as store:
        if store is None:
            if session_id is None:
                raise _no_sessions(workspace)
            raise SessionNotFoundError(f"no session {session_id!r}: {workspace} has no sessions")
        events = session_events(store, session_id)
    print_history(events, as_json)


def session_unlock(workspace: Path, session_id: str, force: bool) -> None:
    from acode.operations.maintenance import unlock_session

    owner = unlock_session(workspace, session_id, force=force)
    message = f"Removed the lock of {owner.describe()}." if owner else "The session was not locked."
    out_console().print(message, markup=False)


def session_discard(workspace: Path, session_id: str, as_json: bool) -> None:
    from acode.operations.maintenance import discard_session

    row = discard_session(workspace, session_id)
    if as_json:
        emit_json(session_json(row))
        return
    out_console().print(
        f"Discarded session {row.short_id} ({row.title}); it no longer appears among the "
        f"resumable sessions. Its history stays readable: acode session history {row.short_id}",
        markup=False,
    )


def session_checkpoint(workspace: Path, session_id: str, label: str, as_json: bool) -> None:
    from acode.operations.maintenance import mark_checkpoint

    marked = mark_checkpoint(workspace, session_id, label)
    mark, short = marked.mark, marked.row.short_id
    if as_json:
        emit_json(
            {
                "id": marked.row.id,
                "label": mark.label,
                "event": mark.seq,
                "at": iso(mark.ts_us),
                "by": mark.by,
                "new": marked.new,
            }
        )
        return
    where = f"event {mark.seq}, {iso(mark.ts_us)}"
    if marked.new:
        text = f"Marked session {short} at {where}: {mark.label!r}."
    else:
        text = (
            f"Session {short} already has a checkpoint {mark.label!r} ({where}); nothing recorded."
        )
    out_console().print(f"{text} See it with: acode session history {short}", markup=False)


def session_export(
    workspace: Path, session_id: str, fmt: str, output: Path | None, *, force: bool
) -> None:
    from acode.engine.catalog import find_session
    from acode.operations.export import check_export_target, export_session, write_export

    if fmt not in ("md", "json"):
        raise UsageError(f"--format {fmt!r} is not one of md, json")
    if output is not None:
        check_export_target(output, force=force)
    with read_store(workspace) as store:
        if store is None:
            raise SessionNotFoundError(f"no session {session_id!r}: {workspace} has no sessions")
        text = export_session(store, find_session(store, session_id), fmt)  # type: ignore[arg-type]
    if output is None:
        emit_text(text if text.endswith("\n") else text + "\n")
        return
    write_export(output, text, force=force)
    err_console().print(f"Wrote {output}", markup=False)
