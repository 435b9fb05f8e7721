"""Pushing one session's pending events: in seq order, in batches, exactly once.

Each batch is one remote transaction (the session row, its events with
``ON CONFLICT (event_id) DO NOTHING``, the checkpoints they reach); ``synced_seq`` moves
only after that transaction committed. A crash or a lost reply between the two leaves
the batch pending here and present there: the next push sends it again and the remote
ignores it. So the remote ends with every event exactly once, whatever the kills.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from acode.domain.events import Event
from acode.store.base import EventStore
from acode.store.records import CheckpointRow, SessionRow
from acode.sync.remote import Lease, LeaseHolder, LeaseOutcome, Remote

__all__ = ["BATCH_SIZE", "Batch", "PushResult", "next_batch", "push_session"]

BATCH_SIZE = 500


@dataclass(frozen=True)
class Batch:
    session: SessionRow
    events: list[Event]
    checkpoints: list[CheckpointRow]

    @property
    def last_seq(self) -> int:
        return self.events[-1].seq


@dataclass(frozen=True)
class PushResult:
    pushed: int  # events sent in committed transactions (the remote may have had some)
    lease: LeaseOutcome = field(default_factory=LeaseOutcome)  # what asking for the lease came to

    @property
    def holder(self) -> LeaseHolder | None:
        """Who else holds the lease that was asked for."""
        return self.lease.holder


def next_batch(
    store: EventStore, session: SessionRow, remote_id: str, limit: int = BATCH_SIZE
) -> Batch | None:
    """The oldest pending events of ``session`` for the remote ``remote_id``, with the
    checkpoints they complete; None when the remote has everything."""
    synced = store.sync_state(session.sid).synced_for(remote_id)
    events = store.events(session, synced, limit)
    if not events:
        return None
    last = events[-1].seq
    checkpoints = [cp for cp in store.checkpoints(session) if synced < cp.seq <= last]
    return Batch(
        session=session, events=events, checkpoints=sorted(checkpoints, key=lambda cp: cp.id)
    )


def push_session(
    store: EventStore,
    remote: Remote,
    session_id: str,
    now_us: Callable[[], int],
    *,
    lease: Lease | None = None,
    release: Lease | None = None,
    batch_size: int = BATCH_SIZE,
) -> PushResult:
    """Push everything pending, then take (``lease``) or give up (``release``) the
    lease in the last transaction. Raises RemoteUnavailable; what was committed before
    stays marked."""
    session = store.session(session_id)
    pushed = 0
    while True:
        batch = next_batch(store, session, remote.remote_id, batch_size)
        final = batch is None or len(batch.events) < batch_size
        if batch is None and pushed and lease is None and release is None:
            return PushResult(pushed)  # the last full batch was the end
        outcome = remote.send(
            session,
            batch.events if batch else [],
            batch.checkpoints if batch else [],
            lease=lease if final else None,
            release=release if final else None,
        )
        if batch is None:
            seq = store.sync_state(session.sid).synced_for(remote.remote_id)
        else:
            seq = batch.last_seq
            pushed += len(batch.events)
        store.mark_synced(session.sid, remote.remote_id, seq, now_us())
        if final:
            return PushResult(pushed=pushed, lease=outcome)
