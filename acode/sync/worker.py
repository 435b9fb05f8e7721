"""The sync worker of a running session: a daemon thread that pushes its events.

It has its own SQLite connection (WAL lets it read while the session writes) and its
own remote connection. A commit of the session wakes it (``wake.set()``: the only
cost on the step path); otherwise it wakes to renew the session's lease. After a
failure it waits out an exponential back-off with jitter, and commits do not wake it
early: a remote that is down is not asked again on every step. The session never
waits for it; at the end it gets a short grace period to push the rest.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from acode.domain.backoff import Backoff
from acode.errors import AcodeError, RemoteUnavailable
from acode.store.base import EventStore, open_store
from acode.sync.dsn import describe_remote
from acode.sync.notices import NoticeKind, Report, SyncNotice, now_us, reconnected, record_failure
from acode.sync.pusher import push_session
from acode.sync.remote import Lease, Remote, connect_remote

__all__ = ["SyncWorker"]


class SyncWorker:
    def __init__(
        self,
        *,
        store_url: str | Path,
        dsn: str,
        session_id: str,
        lease: Lease,
        report: Report,
        backoff: Backoff | None = None,
        min_interval: float = 0.1,
        renew_every: float = 10.0,
        failures: int = 0,
    ) -> None:
        """``store_url``: the local store's (``open_store``), which the worker opens a
        connection of its own to. ``failures``: attempts that already failed in a row (a
        resume that could not reach the remote), so the first one waits for its back-off."""
        self.wake = threading.Event()
        self._store_url = store_url
        self._dsn = dsn
        self._name = describe_remote(dsn)
        self._session_id = session_id
        self._lease = lease
        self._report = report
        self._backoff = backoff or Backoff()
        # Commits closer together than this share one push: the step path keeps the CPU.
        self._min_interval = min_interval
        self._renew_every = renew_every
        self._failures = failures
        self._retry_at = time.monotonic() + self._backoff.first if failures else 0.0
        self._last_attempt = float("-inf")
        self._conflict_reported = False
        self._degraded_reported = failures > 0  # whoever saw that failure reported it
        self._closing = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"acode-sync-{session_id[:8]}", daemon=True
        )

    def start(self) -> None:
        self.wake.set()  # what was written before the worker existed is pending already
        self._thread.start()

    def close(self, grace: float) -> bool:
        """Push what is left (unless backing off) and give up the lease, waiting at
        most ``grace`` seconds; True when the worker finished in time. A worker still
        busy after that is left to finish: it is a daemon thread."""
        self._closing.set()
        self.wake.set()
        return self._done.wait(grace)

    # -- the thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            store = open_store(self._store_url, "normal")
        except AcodeError:
            self._done.set()  # nothing can be read: the next process pushes instead
            return
        remote: Remote | None = None
        try:
            sid = store.session(self._session_id).sid
            while not self._closing.is_set():
                backing_off = self._retry_at - time.monotonic()
                if backing_off > 0:  # commits do not shorten the wait; closing does
                    self._closing.wait(backing_off)
                    continue
                self.wake.wait(self._until_renewal())
                if self._closing.is_set():
                    break
                self.wake.clear()
                pause = self._last_attempt + self._min_interval - time.monotonic()
                if pause > 0 and self._closing.wait(pause):
                    break
                remote = self._attempt(store, sid, remote, final=False)
            if time.monotonic() >= self._retry_at:
                remote = self._attempt(store, sid, remote, final=True)
        finally:
            if remote is not None:
                remote.close()
            store.close()
            self._done.set()

    def _until_renewal(self) -> float:
        return max(0.0, self._last_attempt + self._renew_every - time.monotonic())

    def _attempt(
        self, store: EventStore, sid: int, remote: Remote | None, *, final: bool
    ) -> Remote | None:
        """One push of everything pending (and the lease); returns the connection to
        keep, None after a failure."""
        self._last_attempt = time.monotonic()
        before = store.sync_state(sid)
        try:
            remote = remote or connect_remote(self._dsn)
            result = push_session(
                store,
                remote,
                self._session_id,
                now_us,
                lease=None if final else self._lease,
                release=self._lease if final else None,
            )
        except RemoteUnavailable as exc:
            self._failed(store, sid, exc.reason, remote)
            return None
        except AcodeError as exc:  # a remote schema too new; the local database busy
            self._failed(store, sid, exc.message, remote)
            return None
        except Exception as exc:  # a bug here must not end the worker unnoticed
            self._failed(store, sid, f"internal error: {type(exc).__name__}: {exc}", remote)
            return None
        self._failures, self._retry_at, self._degraded_reported = 0, 0.0, False
        notice = reconnected(before, self._session_id, self._name, result.pushed)
        if notice is not None:
            self._report(notice)
        replaced = result.lease.replaced
        if replaced is not None:
            self._report(
                SyncNotice(
                    kind=NoticeKind.LEASE_TAKEN_OVER,
                    session_id=self._session_id,
                    remote=self._name,
                    holder=replaced.describe(),
                    epoch=result.lease.epoch,
                )
            )
        if result.holder is not None and not self._conflict_reported:
            self._conflict_reported = True
            self._report(
                SyncNotice(
                    kind=NoticeKind.LEASE_CONFLICT,
                    session_id=self._session_id,
                    remote=self._name,
                    holder=result.holder.describe(),
                )
            )
        return remote

    def _failed(self, store: EventStore, sid: int, reason: str, remote: Remote | None) -> None:
        if remote is not None:
            remote.close()
        self._failures += 1
        try:
            delay = record_failure(store, sid, reason, self._failures, self._backoff)
            pending = store.last_seq(sid) - store.sync_state(sid).synced_seq
        except (AcodeError, sqlite3.Error):  # the local database is busy: try again later
            delay, pending = self._backoff.delay(self._failures, 0.5), 0
        self._retry_at = time.monotonic() + delay
        if pending > 0 and not self._degraded_reported:
            self._degraded_reported = True
            self._report(
                SyncNotice(
                    kind=NoticeKind.DEGRADED,
                    session_id=self._session_id,
                    remote=self._name,
                    reason=reason,
                    pending=pending,
                )
            )
