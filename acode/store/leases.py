"""Leases: one process at a time runs a session, and each holder has an epoch.

Two stores keep leases, each in its own table: the remote mirror (acode/sync, the lease
of a session whose history is a SQLite file) and the PostgreSQL store (acode/store/
postgres, where the lease also fences every write of the session's history). Both take
a lease the same way (``take``): free, already ours, lapsed, or held by a process of this
machine that has ended, which is taken over at once rather than after the lapse.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = ["Lease", "LeaseHolder", "LeaseOutcome", "iso", "take"]


@dataclass(frozen=True)
class Lease:
    """Who this process is, as a lease holder.

    ``machine`` and ``started`` are what the process table says of this process
    (``acode.system.process_table``, which this layer does not import: the caller gives
    them, and ``start_of``, which tells when the process of a pid here started). With
    them, a holder of this machine that has ended is told from one that runs."""

    token: str
    host: str
    pid: int
    machine: str | None = None
    started: int | None = None
    start_of: Callable[[int], int | None] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def for_this_process(
        cls,
        machine: str | None = None,
        started: int | None = None,
        start_of: Callable[[int], int | None] | None = None,
    ) -> Lease:
        return cls(uuid.uuid4().hex, socket.gethostname(), os.getpid(), machine, started, start_of)

    def here(self, holder: LeaseHolder) -> bool | None:
        """Whether ``holder`` is a process of this machine; None when either did not say."""
        if self.machine is None or holder.machine is None:
            return None
        return holder.machine == self.machine

    def runs_here(self, holder: LeaseHolder) -> bool | None:
        """Whether ``holder`` is a process of this machine that runs (False: one that no
        longer does: its pid is free, or was given to another process since, which
        started at another time); None when it is not known to be of this machine or
        this process cannot tell."""
        if self.here(holder) is not True or holder.started is None or self.start_of is None:
            return None
        return self.start_of(holder.pid) == holder.started

    def outlived(self, holder: LeaseHolder) -> bool:
        """Whether ``holder`` is a process of this machine that no longer runs."""
        return self.runs_here(holder) is False


@dataclass(frozen=True)
class LeaseHolder:
    """A lease as a store records it."""

    host: str
    pid: int
    since: datetime
    expires: datetime
    machine: str | None = None  # which processes ``pid`` is among (None: not said)
    started: int | None = None  # when the holder started, in its machine's terms
    epoch: int = 0  # how many holders the lease has had

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host} since {iso(self.since)}"


@dataclass(frozen=True)
class LeaseOutcome:
    """What asking for the lease came to."""

    holder: LeaseHolder | None = None  # another process holds it: not ours
    epoch: int = 0  # ours: its epoch (0: it lapsed as we looked; ours at the next renewal)
    replaced: LeaseHolder | None = None  # ours, taken at once from a holder here that ended


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def take(
    lease: Lease,
    attempt: Callable[[str | None, int | None], int | None],
    read: Callable[[], tuple[str | None, LeaseHolder | None]],
) -> LeaseOutcome:
    """Take the lease for ``lease``. ``attempt(gone, gone_epoch)`` is one conditional
    UPDATE that takes it when it is free, ours or lapsed, or (``gone``, ``gone_epoch``:
    the exact holder read) held by a process of this machine that has ended, and returns
    the new epoch (None: not taken). A condition on the values read, so that of two
    processes that both saw the holder gone, one takes the lease and the other matches
    nothing. ``read()``: the token and holder of the unexpired lease, (None, None)
    without one."""
    taken = attempt(None, None)
    if taken is not None:
        return LeaseOutcome(epoch=taken)
    token, holder = read()
    if holder is None or not lease.outlived(holder):
        return LeaseOutcome(holder=holder)  # None: it lapsed as we looked
    taken = attempt(token, holder.epoch)
    if taken is not None:
        return LeaseOutcome(epoch=taken, replaced=holder)
    return LeaseOutcome(holder=read()[1])  # another took it first
