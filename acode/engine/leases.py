"""One process at a time runs a session: who this process is as a lease holder, the
refusal of a resume whose session another process holds, and the session's lease in
the PostgreSQL store (``StoreLease``), which fences its writes.

With the sessions in PostgreSQL (``store.url``), the process that starts or resumes a
session takes its lease there, besides the lock file of its workspace (which only this
machine sees), and renews it from a thread every third of ``fleet.lease_seconds``. A
resume is refused (exit 16) while another process holds it: one of this machine that
runs, or one of another machine until its lease lapses; one of this machine that has
ended is taken over at once. Every write of the session names the epoch of the lease,
and the database refuses a write whose epoch is no longer the lease's
(acode/store/postgres/queries.py). When the renewal finds the lease taken, or could not
renew it before it lapsed by this process's own clock (a tenth short), the session is
stopped: its writes are refused from then on, its step's commands are killed, and a
process that does not come to a write within a few seconds (waiting on a model, or on a
server it cannot reach) exits with ACODE-SESSION-004 (exit 19).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from acode.errors import SessionLockedError, SessionTakenOverError, StorageError
from acode.system.log import log_event

if TYPE_CHECKING:
    from acode.store.base import EventStore
    from acode.store.leases import Lease, LeaseHolder
    from acode.store.postgres.store import PostgresStore
    from acode.system.workspace import StatePaths

__all__ = ["LOST_GRACE_SECONDS", "StoreLease", "held_elsewhere", "hold_session", "this_process"]

_T = TypeVar("_T")

# How long a process whose lease is lost has to meet its refused write and end on its
# own before it is ended.
LOST_GRACE_SECONDS = 3.0
# How long the end of a session waits for the server to take its lease back.
GIVE_BACK_SECONDS = 2.0
# The renewal counts on its lease a tenth shorter than it is: the server's clock and
# this machine's need not agree to the millisecond, and a renewal has to get there.
_MARGIN = 0.9


def this_process() -> Lease:
    """This process as a lease holder, with what tells it from any other process."""
    from acode.store.leases import Lease
    from acode.system.process_table import process_table_id, start_mark

    return Lease.for_this_process(process_table_id(), start_mark(os.getpid()), start_mark)


def held_elsewhere(
    lease: Lease, holder: LeaseHolder, short_id: str, where: str, seconds: float
) -> SessionLockedError:
    """The refusal of a resume whose session's lease another process holds: one of this
    machine that runs (stop it, or wait), or one of another machine, or one this process
    cannot tell runs (wait, maybe for the lapse). ``where``: what keeps the lease
    ("the remote", "the store"); ``seconds``: how long a lease lasts unrenewed."""
    from acode.store.leases import iso

    named = f"{where} names {holder.describe()} as its holder (lease until {iso(holder.expires)})"
    if lease.runs_here(holder):
        return SessionLockedError(
            f"session {short_id} is running in another process of this machine: {named}",
            hint=f"wait for that run to end, or stop it (kill {holder.pid}); then run "
            f"`acode resume {short_id}` again",
        )
    place = "on another machine" if lease.here(holder) is False else "elsewhere"
    return SessionLockedError(
        f"session {short_id} is running {place}: {named}",
        hint=f"wait for that run to end; if it was killed, its lease lapses {seconds:g} s "
        f"after its last renewal and `acode resume {short_id}` then works",
    )


def hold_session(
    store: EventStore, paths: StatePaths, session_id: str, short_id: str, seconds: float
) -> StoreLease | None:
    """Take the session's lease when ``store`` is a PostgreSQL store (None otherwise:
    SQLite's lease is the lock file); SessionLockedError (exit 16) when another process
    holds it."""
    # A PostgreSQL store was opened through that module: where it was not loaded, the
    # store is SQLite's, and loading it here would only slow the start of the command.
    module = sys.modules.get("acode.store.postgres.store")
    if module is None or not isinstance(store, module.PostgresStore):
        return None
    held = StoreLease(store, paths, session_id, seconds)
    held.take(short_id)
    return held


class StoreLease:
    def __init__(
        self, store: PostgresStore, paths: StatePaths, session_id: str, seconds: float
    ) -> None:
        self._store = store
        self._paths = paths
        self._session_id = session_id
        self._seconds = seconds
        self._lease = this_process()
        self._valid_until = 0.0  # monotonic: the lease lapses then, unless renewed
        self._closing = threading.Event()
        self.lost = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="acode-lease", daemon=True)

    def take(self, short_id: str) -> None:
        sent = time.monotonic()
        outcome = self._store.take_lease(self._session_id, self._lease, self._seconds)
        if outcome.holder is not None:
            raise held_elsewhere(self._lease, outcome.holder, short_id, "the store", self._seconds)
        if outcome.replaced is not None:
            log_event(
                self._paths,
                "lease_taken_over",
                session_id=self._session_id,
                holder=outcome.replaced.describe(),
                epoch=outcome.epoch,
            )
        self._valid_until = sent + self._seconds * _MARGIN
        self._thread.start()

    def still_ours(self) -> bool:
        """Whether this process may still act for the session (the server asked: a
        hand-off push goes out only then)."""
        if self.lost.is_set():
            return False
        try:
            return self._store.holds_lease(self._session_id, self._lease)
        except StorageError:
            return False

    def release(self) -> None:
        """Stop renewing and give the lease back (unless lost): a resume takes it at
        once. A server that does not answer is not waited for: the lease lapses."""
        self._closing.set()
        if self.lost.is_set():
            return
        self._store.forfeit_lease(self._session_id)  # nothing more is written meanwhile
        _within(GIVE_BACK_SECONDS, self._store.give_back_lease, self._session_id, self._lease)

    def _renew(self) -> None:
        every = self._seconds / 3
        due = time.monotonic() + every
        while True:
            wait = min(due, self._valid_until) - time.monotonic()
            if self._closing.wait(max(wait, 0.0)):
                return
            if time.monotonic() >= self._valid_until:
                self._lose("not renewed in time")
                return
            sent = time.monotonic()
            # A server cut off may not answer at all: waited for until the lease would
            # lapse. True renewed, False another's, None no answer.
            answer = _within(
                self._valid_until - sent,
                self._store.renew_lease,
                self._session_id,
                self._lease,
                self._seconds,
            )
            if answer is True:
                self._valid_until = sent + self._seconds * _MARGIN
                due = sent + every
            elif answer is False:
                self._lose("taken over")
                return
            else:  # no answer: asked again soon, until the lease would lapse
                due = time.monotonic() + min(1.0, every)

    def _lose(self, reason: str) -> None:
        from acode.system.process_table import kill_descendants

        if self._closing.is_set():
            return
        self.lost.set()
        self._store.forfeit_lease(self._session_id)
        log_event(self._paths, "lease_lost", session_id=self._session_id, reason=reason)
        kill_descendants()
        if not self._closing.wait(LOST_GRACE_SECONDS):
            # Still running: waiting on a model or on the store. Nothing it would write
            # is taken any more; it ends here.
            error = SessionTakenOverError(
                f"session {self._session_id}: this process lost its lease ({reason}) "
                "and stops here without writing more",
                hint=f"`acode session show {self._session_id}` shows where it stands",
            )
            sys.stderr.write(f"{error}\n")
            sys.stderr.flush()
            os._exit(SessionTakenOverError.exit_code)


def _within(timeout: float, call: Callable[..., _T], *args: object) -> _T | None:
    """``call(*args)`` in a thread of its own, waited for at most ``timeout`` seconds:
    its result, or None when it failed (a StorageError) or did not answer in time (it
    is left to end by itself, or never, on a connection that went silent)."""
    answer: list[_T | None] = [None]

    def ask() -> None:
        with contextlib.suppress(StorageError):
            answer[0] = call(*args)

    asker = threading.Thread(target=ask, name="acode-lease-call", daemon=True)
    asker.start()
    asker.join(max(timeout, 0.0))
    return answer[0]
