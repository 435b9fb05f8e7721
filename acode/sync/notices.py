"""What sync tells the rest of acode: entering degraded mode, reconnecting, a lease
held elsewhere or taken over from a holder that ended; and the bookkeeping of each
attempt's outcome."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from acode.domain.backoff import Backoff
from acode.store.base import EventStore
from acode.store.records import SyncStateRow

__all__ = [
    "NoticeKind",
    "Report",
    "SyncNotice",
    "now_us",
    "reconnected",
    "record_failure",
]


class NoticeKind(StrEnum):
    DEGRADED = "degraded"  # a failure while events wait: the session goes on locally
    RECONNECTED = "reconnected"  # failing -> succeeding
    LEASE_CONFLICT = "lease_conflict"  # another process holds the session's lease
    LEASE_TAKEN_OVER = "lease_taken_over"  # from a holder of this machine that had ended


@dataclass(frozen=True)
class SyncNotice:
    kind: NoticeKind
    session_id: str
    remote: str
    reason: str | None = None
    pending: int = 0  # events waiting
    pushed: int = 0  # events pushed by the attempt that reconnected
    away_seconds: float | None = None  # how long the remote was unreachable
    holder: str | None = None  # who holds the lease (taken over: who held it)
    epoch: int = 0  # the lease's epoch once taken over


Report = Callable[[SyncNotice], None]


def now_us() -> int:
    return time.time_ns() // 1000


def record_failure(
    store: EventStore, sid: int, reason: str, failures: int, backoff: Backoff
) -> float:
    """Keep a failed attempt in `sync_state`; returns the seconds until the next one."""
    delay = backoff.delay(failures, random.random())
    now = now_us()
    store.record_failure(sid, reason, now, now + int(delay * 1e6))
    return delay


def reconnected(
    before: SyncStateRow, session_id: str, remote: str, pushed: int
) -> SyncNotice | None:
    """The notice for a success after failures (``before`` is the state the attempt
    started from), with how long the remote was away."""
    if before.failures == 0:
        return None
    away = (now_us() - before.down_since) / 1e6 if before.down_since else None
    return SyncNotice(
        kind=NoticeKind.RECONNECTED,
        session_id=session_id,
        remote=remote,
        pushed=pushed,
        away_seconds=away,
    )
