"""Looking after sessions no process runs: clearing a stale lock, discarding a session for
good, marking a checkpoint."""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import NamedTuple

from acode.domain.events import EventType
from acode.domain.marks import Mark, check_label
from acode.domain.states import SessionState, is_terminal
from acode.engine.catalog import find_session
from acode.engine.journal import Journal
from acode.engine.lifecycle import (
    Workspace,
    existing_workspace,
    open_workspace_store,
    take_lock_and_lease,
)
from acode.engine.marks import record_mark
from acode.errors import NothingToResumeError, SessionLockedError, UsageError
from acode.operations.inspection import read_store
from acode.security.signing import load_signer
from acode.store.base import EventStore
from acode.store.records import SessionRow
from acode.system.clock import Clock, SystemClock
from acode.system.locks import LockOwner, force_unlock, is_locked, read_owner
from acode.system.workspace import StatePaths

__all__ = ["Marked", "discard_session", "locked_session", "mark_checkpoint", "unlock_session"]


class _Locked(NamedTuple):
    workspace: Workspace
    store: EventStore
    row: SessionRow
    clock: Clock


def unlock_session(workspace: Path, id_or_prefix: str, *, force: bool) -> LockOwner | None:
    """Remove the lock file; refuses while its holder runs unless ``force``. Returns the
    holder that was removed (None: nobody held it)."""
    paths = StatePaths(workspace)
    with read_store(workspace) as store:
        if store is None:
            raise NothingToResumeError("no sessions in this workspace")
        row = find_session(store, id_or_prefix)
    held = is_locked(paths.locks, row.id)
    if not held:
        force_unlock(paths.locks, row.id)  # only a record of a holder that has ended
        return None
    if not force:
        owner = read_owner(paths.locks, row.id)
        raise SessionLockedError(
            f"session {row.short_id} is locked by "
            f"{owner.describe() if owner else 'a running process'}, which is still running",
            hint="stop that process (Ctrl+C pauses it cleanly); only if you are sure it no "
            f"longer works on this session: acode session unlock {row.short_id} --force",
        )
    return force_unlock(paths.locks, row.id)


@contextmanager
def locked_session(workspace: Path, id_or_prefix: str) -> Iterator[_Locked]:
    """A session no process runs, its lock (and lease) held for one change by the caller: its
    workspace, its store and its row as it is under the lock."""
    clock = SystemClock()
    ws = existing_workspace(workspace)
    store = open_workspace_store(ws)
    try:
        row = find_session(store, id_or_prefix)
        with ExitStack() as held:
            # The lease too: on a shared store another machine may run the session.
            take_lock_and_lease(ws, store, row.id, clock, held, label=row.short_id)
            yield _Locked(workspace=ws, store=store, row=store.session(row.id), clock=clock)
    finally:
        store.close()


def discard_session(workspace: Path, id_or_prefix: str, *, reason: str | None = None) -> SessionRow:
    """Take a resumable session off the resumable list; its history stays readable."""
    with locked_session(workspace, id_or_prefix) as (ws, store, row, clock):
        if is_terminal(SessionState(row.state)) or row.archived:
            raise UsageError(
                f"session {row.short_id} is {'discarded' if row.archived else row.state} "
                "already; only resumable sessions can be discarded",
                hint="`acode session list --all` shows every session",
            )
        journal = Journal.load(store, row, clock, load_signer())
        journal.write(
            [
                (
                    EventType.SESSION_DISCARDED,
                    {"by": getpass.getuser(), "reason": reason or "discarded by the user"},
                )
            ],
            archive=True,
        )
        # Discarded, it is never resumed: nothing it staged is rolled back from.
        ws.paths.clear_temp(row.id)
        return store.session(row.id)


class Marked(NamedTuple):
    """The mark a label names in a session, and whether this call recorded it."""

    mark: Mark
    new: bool
    row: SessionRow


def mark_checkpoint(workspace: Path, id_or_prefix: str, label: str) -> Marked:
    """Mark a session no process is running (``acode session checkpoint``); any state,
    terminal ones included: a mark names a point and changes nothing else."""
    check_label(label)  # a bad label is refused before anything is opened or locked
    with locked_session(workspace, id_or_prefix) as (ws, store, row, clock):
        journal = Journal.load(store, row, clock, load_signer())
        mark, new = record_mark(journal, label)
        if new:
            from acode.engine.progress_file import ProgressFile  # it reads marks too

            ProgressFile(ws.paths).update(journal, final=True)
        return Marked(mark=mark, new=new, row=store.session(row.id))
