"""Where a session stands with the remote, read from the local database alone.

Showing it never touches the network: the worker records every attempt's outcome in
`sync_state`, and this reads it back with the number of events still waiting.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from acode.store.base import EventStore
from acode.store.records import SessionRow
from acode.sync.dsn import describe_remote

__all__ = ["SyncMode", "SyncStatus", "session_sync_status"]


class SyncMode(StrEnum):
    LOCAL = "local"  # no remote configured
    UP_TO_DATE = "up_to_date"
    PENDING = "pending"  # events wait, and no attempt has failed (yet)
    DEGRADED = "degraded"  # events wait because the last attempt failed


@dataclass(frozen=True)
class SyncStatus:
    mode: SyncMode
    remote: str | None = None  # how the remote is shown: no password
    pending: int = 0
    synced_seq: int = 0
    last_attempt: int | None = None  # microseconds since the epoch
    last_success: int | None = None
    next_retry: int | None = None
    reason: str | None = None  # why the last attempt failed
    failures: int = 0  # consecutive failed attempts
    down_since: int | None = None


_LOCAL = SyncStatus(SyncMode.LOCAL)


def session_sync_status(store: EventStore, session: SessionRow, dsn: str | None) -> SyncStatus:
    """The sync status of ``session`` with the remote ``dsn`` (None: local only)."""
    if not dsn:
        return _LOCAL
    state = store.sync_state(session.sid)
    pending = max(0, store.last_seq(session.sid) - state.synced_seq)
    if pending == 0:
        mode = SyncMode.UP_TO_DATE
    else:
        mode = SyncMode.DEGRADED if state.last_error else SyncMode.PENDING
    return SyncStatus(
        mode=mode,
        remote=describe_remote(dsn),
        pending=pending,
        synced_seq=state.synced_seq,
        last_attempt=state.last_attempt,
        last_success=state.last_success,
        next_retry=state.next_retry,
        reason=state.last_error,
        failures=state.failures,
        down_since=state.down_since,
    )
