"""Sessions used as ledgers: each command appends steps after the recorded ones.

A work session (and the workspace's task list) lives across many short commands:
`acode work task` records its start, the engine runs with no lock held, then the turn is
recorded; `acode wsession breadcrumb add`, run by the engine meanwhile, appends a
breadcrumb. Each command takes the session's lock only while it writes, loads and
verifies the signed history, appends python steps (one commit each, no durable start:
a command killed before its commit left nothing, and runs again whole), and lets go.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from acode.domain.events import EventType
from acode.domain.states import SessionState
from acode.engine.history import History
from acode.engine.journal import Journal
from acode.engine.lifecycle import Workspace, open_workspace_store, take_lock
from acode.engine.session import Session
from acode.engine.sync_link import open_sync_link
from acode.errors import SessionLockedError
from acode.security.signing import Signer, load_signer
from acode.store.base import EventStore
from acode.store.records import SessionRow
from acode.system.clock import SystemClock
from acode.system.locks import SessionLock

__all__ = ["append_to", "held", "is_open", "recorded_results", "verified"]

_LOCK_POLL_SECONDS = 0.05


@contextmanager
def append_to(ws: Workspace, session_id: str, *, wait_seconds: float = 10.0) -> Iterator[Session]:
    """The session, lock held, positioned after its last step; closed on exit. A lock held
    by another command is waited for (they hold it for milliseconds)."""
    clock = SystemClock()
    signer = load_signer()
    with ExitStack() as cleanup:
        store = open_workspace_store(ws)
        cleanup.callback(store.close)
        row = store.session(session_id)
        lock = _wait_for_lock(ws, row.id, row.short_id, wait_seconds)
        cleanup.callback(lock.release)
        row = store.session(row.id)
        journal = Journal.load(store, row, clock, signer)
        sync = open_sync_link(ws.paths, ws.config.sync.remote, row.id)
        cleanup.pop_all()  # the Session owns the store and the lock from here on
    session = Session(
        journal=journal, workspace=ws.root, config=ws.config, lock=lock, signer=signer, sync=sync
    )
    try:
        session.skip_completed()
        yield session
    finally:
        session.close()


def _wait_for_lock(ws: Workspace, name: str, label: str, wait_seconds: float) -> SessionLock:
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return take_lock(ws, name, SystemClock(), label=label)
        except SessionLockedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(_LOCK_POLL_SECONDS)


@contextmanager
def held(ws: Workspace, name: str, *, wait_seconds: float = 10.0) -> Iterator[None]:
    """A workspace-wide lock of its own name, for what must happen once (creating a
    ledger, allocating a task id)."""
    lock = _wait_for_lock(ws, name, name, wait_seconds)
    try:
        yield
    finally:
        lock.release()


def recorded_results(history: History) -> list[tuple[str, Any]]:
    """(step id, result) of every completed step, in order: what a ledger holds, each
    event checked on its session's chain."""
    return [
        (event.payload["step"], event.payload.get("result"))
        for event in history.of_type(EventType.STEP_COMPLETED)
    ]


def verified(store: EventStore, row: SessionRow, signer: Signer) -> History:
    """The history of ledger session ``row``, from its newest checkpoint verified."""
    return Journal.load(store, row, SystemClock(), signer).history


def is_open(row: SessionRow) -> bool:
    return row.state not in (SessionState.COMPLETED.value, SessionState.CANCELLED.value)
