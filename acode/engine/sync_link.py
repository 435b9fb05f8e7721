"""A running session's tie to the remote mirror, when the workspace configures one.

With no remote, nothing of ``acode.sync`` (nor the PostgreSQL driver) is imported.
With one, a resume first asks the remote for the session's lease (after pushing what
waits for it) and is refused when another live process holds it; a holder of this
machine that has ended (killed, say) is taken over at once. A remote that cannot be asked
never stops a local run. The session's sync worker then runs beside it, and what
it reports goes to the structured log and, for a person watching, to the observer's
optional ``on_sync(notice)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from acode.engine.leases import held_elsewhere, this_process
from acode.system.log import log_event
from acode.system.workspace import StatePaths

if TYPE_CHECKING:
    from acode.engine.journal import Journal
    from acode.engine.observer import Observer
    from acode.store.base import EventStore
    from acode.store.records import SessionRow
    from acode.sync.notices import SyncNotice
    from acode.sync.status import SyncStatus
    from acode.sync.worker import SyncWorker

__all__ = ["GRACE_SECONDS", "SyncLink", "log_sync_notice", "open_sync_link", "sync_status"]

# How long the end of a run waits for the last push; the rest waits for the next run.
GRACE_SECONDS = 2.0


def open_sync_link(paths: StatePaths, remote: str | None, session_id: str) -> SyncLink | None:
    """The session's link to ``remote``; None (and nothing imported) without one."""
    return SyncLink(paths, remote, session_id) if remote else None


def sync_status(store: EventStore, row: SessionRow, remote: str | None) -> SyncStatus | None:
    """Where ``row`` stands with ``remote``, from the local database alone; None (and
    nothing imported) without a remote."""
    if not remote:
        return None
    from acode.sync.status import session_sync_status

    return session_sync_status(store, row, remote)


def log_sync_notice(paths: StatePaths, notice: SyncNotice) -> None:
    fields = {
        "session_id": notice.session_id,
        "remote": notice.remote,
        "reason": notice.reason,
        "pending": notice.pending,
        "pushed": notice.pushed,
        "away_seconds": None if notice.away_seconds is None else round(notice.away_seconds, 3),
        "holder": notice.holder,
        "epoch": notice.epoch,
    }
    log_event(paths, f"sync_{notice.kind.value}", **{k: v for k, v in fields.items() if v})


class SyncLink:
    def __init__(self, paths: StatePaths, dsn: str, session_id: str) -> None:
        self._paths = paths
        self._dsn = dsn
        self._session_id = session_id
        self._lease = this_process()
        self._failures = 0
        self._observer: Observer | None = None
        self._held: list[SyncNotice] = []  # reported before there was an observer
        self._worker: SyncWorker | None = None

    def claim(self, database: Path, short_id: str) -> int | None:
        """Before a resume writes anything: push the session's pending events and take
        its lease; SessionLockedError (exit 16) when another process holds it. Returns
        the newest event the remote holds of the session (None: it could not be asked)."""
        from acode.sync.notices import NoticeKind, SyncNotice
        from acode.sync.remote import LEASE_SECONDS
        from acode.sync.service import claim_session

        claim = claim_session(database, self._dsn, self._session_id, self._lease)
        if claim.holder is not None:
            raise held_elsewhere(self._lease, claim.holder, short_id, "the remote", LEASE_SECONDS)
        if claim.replaced is not None:
            self._notify(
                SyncNotice(
                    kind=NoticeKind.LEASE_TAKEN_OVER,
                    session_id=self._session_id,
                    remote=claim.remote,
                    holder=claim.replaced.describe(),
                    epoch=claim.epoch,
                )
            )
        if claim.reason is not None:
            self._failures = 1
            self._notify(
                SyncNotice(
                    kind=NoticeKind.DEGRADED,
                    session_id=self._session_id,
                    remote=claim.remote,
                    reason=claim.reason,
                    pending=claim.pending,
                )
            )
            return None
        return claim.newest

    def start(self, journal: Journal, observer: Observer) -> None:
        """Run the worker beside the session; every commit of ``journal`` wakes it."""
        from acode.sync.worker import SyncWorker

        self._observer = observer
        held, self._held = self._held, []
        for notice in held:
            self._deliver(notice)
        worker = SyncWorker(
            store_url=journal.store.url,
            dsn=self._dsn,
            session_id=self._session_id,
            lease=self._lease,
            report=self._notify,
            failures=self._failures,
        )
        journal.on_write = worker.wake.set
        self._worker = worker
        worker.start()

    def close(self, grace: float = GRACE_SECONDS) -> None:
        """Let the worker push the rest and give up the lease, for at most ``grace``."""
        if self._worker is not None:
            self._worker.close(grace)

    def _notify(self, notice: SyncNotice) -> None:
        log_sync_notice(self._paths, notice)
        if self._observer is None:
            self._held.append(notice)
        else:
            self._deliver(notice)

    def _deliver(self, notice: SyncNotice) -> None:
        on_sync = getattr(self._observer, "on_sync", None)
        if callable(on_sync):
            on_sync(notice)
