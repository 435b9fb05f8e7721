"""Sync on demand: `acode sync`, the lease a resume takes, `session list --remote`.

The network work of each runs in a helper thread that the caller waits for at most
its time-out: a remote that stops answering half-way through a reply (which no libpq
time-out notices) costs a command its time-out, never a hang. Every operation that
acts on the remote first pushes the events waiting for it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Generic, TypeVar

from acode.domain.backoff import Backoff
from acode.errors import AcodeError, RemoteUnavailable, SchemaTooNewError
from acode.store.base import EventStore, open_store
from acode.sync.dsn import describe_remote
from acode.sync.notices import Report, now_us, reconnected, record_failure
from acode.sync.pusher import push_session
from acode.sync.remote import (
    Lease,
    LeaseHolder,
    Remote,
    RemoteSession,
    connect_remote,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "Claim",
    "SessionPush",
    "SyncReport",
    "claim_session",
    "remote_sessions",
    "sync_workspace",
]

DEFAULT_TIMEOUT = 30.0
T = TypeVar("T")


@dataclass(frozen=True)
class SessionPush:
    session_id: str
    pushed: int  # events this command sent
    pending: int  # events still waiting


@dataclass(frozen=True)
class SyncReport:
    remote: str  # no password
    sessions: tuple[SessionPush, ...] = ()  # the sessions that had events waiting
    reason: str | None = None  # why events still wait (None: drained)
    attempts: int = 0

    @property
    def pushed(self) -> int:
        return sum(s.pushed for s in self.sessions)

    @property
    def pending(self) -> int:
        return sum(s.pending for s in self.sessions)


@dataclass(frozen=True)
class Claim:
    """What a resume learnt from the remote before it wrote anything."""

    remote: str  # no password
    holder: LeaseHolder | None = None  # another process holds the lease: refuse
    reason: str | None = None  # the remote could not be asked: go on locally
    pushed: int = 0
    pending: int = 0  # events still waiting for the remote
    newest: int = 0  # the newest event the remote holds of the session, once pushed
    epoch: int = 0  # the lease's epoch, once ours
    replaced: LeaseHolder | None = None  # the holder here that had ended, taken over at once


@dataclass
class _Latest(Generic[T]):
    """The newest result a helper thread published, read by the waiting caller."""

    value: T
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


def _within(timeout: float, initial: T, work: Callable[[_Latest[T]], None]) -> tuple[T, bool]:
    """Run ``work`` in a daemon thread for at most ``timeout`` seconds; returns the
    latest value it published and whether it finished."""
    latest = _Latest(initial)

    def run() -> None:
        try:
            work(latest)
        except BaseException as exc:
            latest.error = exc
        finally:
            latest.done.set()

    threading.Thread(target=run, name="acode-sync-now", daemon=True).start()
    finished = latest.done.wait(timeout)
    if finished and latest.error is not None:
        raise latest.error
    return latest.value, finished


def _open(database: Path) -> EventStore:
    # Durability normal: a lost mark only re-sends what the remote ignores.
    return open_store(database, "normal")


def _failure_reason(exc: AcodeError) -> str:
    return exc.reason if isinstance(exc, RemoteUnavailable) else exc.message


def _record(store: EventStore, session_id: str, reason: str, backoff: Backoff) -> None:
    sid = store.session(session_id).sid
    record_failure(store, sid, reason, store.sync_state(sid).failures + 1, backoff)


def _push_all(
    store: EventStore, remote: Remote, backoff: Backoff, report: Report | None
) -> tuple[list[SessionPush], str | None]:
    """Push every session with events the remote lacks, oldest session first."""
    waiting = [b for b in store.sync_backlog() if b.pending_for(remote.remote_id)]
    pushes: list[SessionPush] = []
    for index, item in enumerate(waiting):
        before = store.sync_state(store.session(item.session_id).sid)
        try:
            result = push_session(store, remote, item.session_id, now_us)
        except RemoteUnavailable as exc:
            for rest in waiting[index:]:
                _record(store, rest.session_id, exc.reason, backoff)
                pushes.append(
                    SessionPush(
                        session_id=rest.session_id,
                        pushed=0,
                        pending=rest.pending_for(remote.remote_id),
                    )
                )
            return pushes, exc.reason
        notice = reconnected(before, item.session_id, remote.name, result.pushed)
        if notice is not None and report is not None:
            report(notice)
        pushes.append(SessionPush(session_id=item.session_id, pushed=result.pushed, pending=0))
    return pushes, None


def _attempt(
    store: EventStore, dsn: str, backoff: Backoff, report: Report | None
) -> tuple[list[SessionPush], str | None]:
    try:
        remote = connect_remote(dsn)
    except (RemoteUnavailable, SchemaTooNewError) as exc:
        reason = _failure_reason(exc)
        waiting = [b for b in store.sync_backlog() if b.pending_for()]
        for item in waiting:
            _record(store, item.session_id, reason, backoff)
        return [
            SessionPush(session_id=b.session_id, pushed=0, pending=b.pending_for()) for b in waiting
        ], reason
    try:
        return _push_all(store, remote, backoff, report)
    finally:
        remote.close()


def _merge(before: tuple[SessionPush, ...], now: list[SessionPush]) -> tuple[SessionPush, ...]:
    """Per session: what all attempts pushed, what the last one left."""
    pushed = {s.session_id: s.pushed for s in before}
    merged = {s.session_id: s for s in before}
    for s in now:
        merged[s.session_id] = replace(s, pushed=pushed.get(s.session_id, 0) + s.pushed)
    return tuple(merged[k] for k in sorted(merged))


def sync_workspace(
    database: Path,
    dsn: str,
    *,
    wait: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    backoff: Backoff | None = None,
    report: Report | None = None,
) -> SyncReport:
    """Push every session's pending events now. With ``wait``, retry with back-off
    until nothing is pending or ``timeout`` seconds have passed."""
    policy = backoff or Backoff()
    deadline = time.monotonic() + timeout
    name = describe_remote(dsn)

    def work(latest: _Latest[SyncReport]) -> None:
        store = _open(database)
        try:
            waiting = [b for b in store.sync_backlog() if b.pending_for()]
            latest.value = SyncReport(
                remote=name,
                sessions=tuple(
                    SessionPush(session_id=b.session_id, pushed=0, pending=b.pending_for())
                    for b in waiting
                ),
                reason=f"the remote did not answer within {timeout:g} s",
            )
            while True:
                pushes, reason = _attempt(store, dsn, policy, report)
                current = latest.value
                latest.value = SyncReport(
                    remote=name,
                    sessions=_merge(current.sessions, pushes),
                    reason=reason,
                    attempts=current.attempts + 1,
                )
                left = deadline - time.monotonic()
                if reason is None or not wait or left <= 0:
                    return
                time.sleep(min(left, policy.delay(current.attempts + 1, random.random())))
        finally:
            store.close()

    result, _ = _within(timeout, SyncReport(name, reason="not started"), work)
    return result


def claim_session(
    database: Path, dsn: str, session_id: str, lease: Lease, *, timeout: float = 5.0
) -> Claim:
    """Push the session's pending events, then take its lease for ``lease``. A remote
    that cannot be asked is a Claim with a reason: a local run never waits on it."""
    name = describe_remote(dsn)

    def work(latest: _Latest[Claim]) -> None:
        store = _open(database)
        try:
            sid = store.session(session_id).sid
            pending = store.last_seq(sid) - store.sync_state(sid).synced_seq
            latest.value = replace(latest.value, pending=pending)
            try:
                remote = connect_remote(dsn)
            except (RemoteUnavailable, SchemaTooNewError) as exc:
                latest.value = Claim(name, reason=_failure_reason(exc), pending=pending)
                _record(store, session_id, _failure_reason(exc), Backoff())
                return
            try:
                result = push_session(store, remote, session_id, now_us, lease=lease)
                newest = remote.newest_seq(session_id)
            except RemoteUnavailable as exc:
                pending = store.last_seq(sid) - store.sync_state(sid).synced_seq
                latest.value = Claim(name, reason=exc.reason, pending=pending)
                _record(store, session_id, exc.reason, Backoff())
                return
            finally:
                remote.close()
            latest.value = Claim(
                name,
                holder=result.holder,
                pushed=result.pushed,
                newest=newest,
                epoch=result.lease.epoch,
                replaced=result.lease.replaced,
            )
        finally:
            store.close()

    late = Claim(name, reason=f"no answer within {timeout:g} s")
    claim, _ = _within(timeout, late, work)
    return claim


def remote_sessions(
    database: Path, dsn: str, *, timeout: float = DEFAULT_TIMEOUT
) -> tuple[SyncReport, list[RemoteSession]]:
    """Every session on the remote, after pushing what waits for it. Raises
    RemoteUnavailable when the remote cannot be listed."""
    name = describe_remote(dsn)

    def work(latest: _Latest[tuple[SyncReport, list[RemoteSession]]]) -> None:
        store = _open(database) if database.exists() else None
        try:
            remote = connect_remote(dsn)
            try:
                pushes, reason = _push_all(store, remote, Backoff(), None) if store else ([], None)
                latest.value = (
                    SyncReport(remote=name, sessions=tuple(pushes), reason=reason, attempts=1),
                    remote.sessions(),
                )
            finally:
                remote.close()
        finally:
            if store is not None:
                store.close()

    nothing: list[RemoteSession] = []
    (report, found), finished = _within(timeout, (SyncReport(name), nothing), work)
    if not finished:
        raise RemoteUnavailable(name, f"no answer within {timeout:g} s")
    return report, found
