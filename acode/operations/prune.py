"""`acode session prune`: removing whole sessions that have ended, by age, state or the
state's size (``retention:``), as docs/retention.md describes.

Two steps, so that another can stand between them (archiving each session first):
:func:`select_sessions` reads which sessions go and which are kept and why, changing
nothing; :func:`prune_sessions` removes a selection. The store's part is one
transaction (acode.store.sqlite.pruning, acode.store.postgres.pruning); the files
outside it (progress file, staging folder, lock file, snapshot refs) go after its
commit, driven by each session's prune record, so a prune killed in between finishes at
the next one.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import NamedTuple

from acode.domain.retention import (
    Criteria,
    Prunable,
    category,
    criteria_from_retention,
    select,
    whole_families,
)
from acode.engine.lifecycle import (
    Workspace,
    existing_workspace,
    open_workspace_store,
    take_lock,
)
from acode.errors import AcodeError, UsageError
from acode.security.signing import Signer, load_signer
from acode.store.base import EventStore
from acode.store.records import PruneCost, SessionRow
from acode.system.clock import Clock, SystemClock

__all__ = [
    "PruneReport",
    "PruneRequest",
    "Removal",
    "Selection",
    "Skipped",
    "apply_retention",
    "prune_sessions",
    "select_sessions",
]


class PruneRequest(NamedTuple):
    """What a person asked for: ``older_than_us`` and ``states`` from the command line;
    neither given: the workspace's ``retention:`` settings."""

    older_than_us: int | None = None
    states: frozenset[str] | None = None


class Removal(NamedTuple):
    """A session a prune removes (or, in a dry run, would)."""

    id: str
    short_id: str
    state: str  # a value of PRUNE_STATES
    updated_at: int
    events: int
    bytes: int
    archive: Path | None = None  # where it was archived first (``--archive DIR``)


class Skipped(NamedTuple):
    """A session the criteria named that is kept, and why."""

    id: str
    short_id: str
    state: str
    reason: str


class Selection(NamedTuple):
    """What a prune would remove, what it keeps, and the state's size before and, by
    estimate, after (bytes; ``limit`` the retention's, if any)."""

    removals: tuple[Removal, ...]
    skipped: tuple[Skipped, ...]
    blobs: int  # file images no remaining session refers to
    blob_bytes: int
    state_bytes: int
    limit: int | None

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.removals)

    @property
    def freed(self) -> int:
        return sum(r.bytes for r in self.removals) + self.blob_bytes

    @property
    def over_limit(self) -> bool:
        """The state stays over its limit after this prune: only sessions that may not
        be pruned are left."""
        return self.limit is not None and self.state_bytes - self.freed > self.limit


class PruneReport(NamedTuple):
    """What a prune did."""

    selection: Selection  # the removals as done; those kept at the last check in skipped
    state_bytes_after: int
    converted: bool  # the database was converted to incremental auto-vacuum
    vacuum_error: str | None  # a VACUUM that failed (the prune stands)
    leftovers: int  # earlier prunes whose file removal this one finished


# The retention: settings are applied after a session ends at most this often: finding
# which stored file images are still used reads every remaining event.
RETENTION_INTERVAL_US = 24 * 3600 * 1_000_000
_RETENTION_STAMP = "retention-applied"
_RUNNING = "a process runs it (its lock is held)"  # the holder follows, where it is known
# A session id as acode makes it (a UUIDv7), the only name its files are looked up by.
_SESSION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def select_sessions(
    workspace: Path, request: PruneRequest, clock: Clock | None = None
) -> Selection:
    """Which sessions a prune removes, and which of those the criteria name are kept
    (and why), read without changing anything."""
    clock = clock or SystemClock()
    ws = existing_workspace(workspace)
    criteria = _criteria(ws, request, clock.now_us())
    store = open_workspace_store(ws)
    try:
        return _select(ws, store, criteria)
    finally:
        store.close()


def apply_retention(
    workspace: Path, *, ended: str, clock: Clock | None = None
) -> PruneReport | None:
    """The workspace's ``retention:`` settings applied after session ``ended`` ended (it
    stays, whatever the settings say: its output is still on the screen), at most once
    every RETENTION_INTERVAL_US; None when there are no settings or it is not time yet.
    The person asked for it by setting them: nothing is asked."""
    clock = clock or SystemClock()
    ws = existing_workspace(workspace)
    if not ws.config.retention.configured:
        return None
    now_us = clock.now_us()
    stamp = ws.paths.state_dir / _RETENTION_STAMP
    try:
        if now_us - stamp.stat(follow_symlinks=False).st_mtime_ns // 1000 < RETENTION_INTERVAL_US:
            return None
    except FileNotFoundError:
        pass
    # The day is claimed first: a stamp that cannot be written (replaced by a symlink,
    # say: never followed) leaves nothing pruned, and a prune that fails is tried again
    # the next day.
    fd = os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.utime(fd, ns=(now_us * 1000, now_us * 1000))
    finally:
        os.close(fd)
    selection = select_sessions(workspace, PruneRequest(), clock)
    return prune_sessions(workspace, [i for i in selection.ids if i != ended], clock=clock)


def _state_bytes(ws: Workspace, store: EventStore) -> int:
    """The state's size as retention weighs it: the SQLite file and the progress files.
    With the sessions in PostgreSQL there is no file of the workspace's to weigh: its
    progress files and what pruning every session of the workspace would free in the
    database (its rows, and the images no other session uses), the measure a prune's
    freed bytes are told in."""
    local = ws.paths.state_bytes()
    if ws.config.store.url is None:
        return local
    cost = store.prune_cost(store.sessions())
    return local + sum(cost.bytes.values()) + cost.blob_bytes


def _criteria(ws: Workspace, request: PruneRequest, now_us: int) -> Criteria:
    if request.older_than_us is None and request.states is None:
        if not ws.config.retention.configured:
            raise UsageError(
                "nothing says which sessions to prune: no --older-than or --state was given "
                "and .agent/config.yml sets no retention:",
                hint="say which, e.g. acode session prune --older-than 30d --dry-run, or set "
                "retention: in .agent/config.yml (docs/retention.md)",
            )
        return criteria_from_retention(ws.config.retention, now_us)
    states = request.states or frozenset({"completed", "failed", "cancelled", "discarded"})
    # Without --older-than, every age: a cutoff past now.
    older_than = request.older_than_us
    cutoff = now_us - older_than if older_than is not None else now_us + 1
    return Criteria(cutoffs=dict.fromkeys(states, cutoff))


def _select(ws: Workspace, store: EventStore, criteria: Criteria) -> Selection:
    rows = {r.id: r for r in store.sessions()}
    prunable = [
        Prunable(r.id, kind, r.updated_at, r.parent_id)
        for r in rows.values()
        if (kind := category(r.state, r.archived)) is not None
    ]
    state_bytes = _state_bytes(ws, store)
    sizes: dict[str, int] = {}
    if criteria.max_bytes is not None:
        each = store.prune_cost([rows[p.id] for p in prunable])
        sizes = {i: size + each.own_images[i] for i, size in each.bytes.items()}
    chosen = select(prunable, criteria, sizes, state_bytes)
    going, skipped = _keep_refused(ws, store, rows, chosen)
    cost = store.prune_cost([rows[i] for i in going])
    return Selection(
        removals=_removals(rows, going, cost),
        skipped=tuple(skipped),
        blobs=cost.blobs,
        blob_bytes=cost.blob_bytes,
        state_bytes=state_bytes,
        limit=criteria.max_bytes,
    )


def _keep_refused(
    ws: Workspace,
    store: EventStore,
    rows: dict[str, SessionRow],
    chosen: Iterable[str],
    *,
    locked: bool = False,
) -> tuple[list[str], list[Skipped]]:
    """``chosen`` without the sessions that must stay: one a process runs (unless this
    one holds their locks, ``locked``), one whose events the remote has not received
    yet, one of a family (a parent and its sub-sessions) part of which stays."""
    from acode.system.locks import holder

    skipped: list[Skipped] = []
    pending = _unsynced(ws, store)
    going = []
    for i in chosen:
        held_by = None if locked else holder(ws.paths.locks, i)
        reason = f"{_RUNNING}: {held_by}" if held_by is not None else pending.get(i)
        if reason is None:
            going.append(i)
        else:
            skipped.append(_skipped(rows[i], reason))
    going, kept = whole_families(going, {i: r.parent_id for i, r in rows.items()})
    for session_id, other in kept.items():
        row = rows[session_id]
        link = "parent" if row.parent_id == other else "sub-session"
        reason = f"its {link} {rows[other].short_id} stays, and they go together"
        skipped.append(_skipped(row, reason))
    return going, skipped


def _archive_each(
    store: EventStore,
    rows: dict[str, SessionRow],
    going: list[str],
    directory: Path,
    signer: Signer,
    archives: dict[str, Path],
) -> dict[str, str]:
    """Archive each of ``going`` into ``directory`` (into ``archives``), a directory the
    caller checked is outside acode's state; why each that could not be archived (a full
    disk, a history that does not verify) stays."""
    from acode.operations.archive import write_archive

    unarchived: dict[str, str] = {}
    for i in going:
        target = directory / f"{i}.acode.gz"
        try:
            write_archive(store, rows[i], target, signer)
        except OSError as exc:
            unarchived[i] = f"its archive could not be written: {exc.strerror or exc}"
        except AcodeError as error:
            unarchived[i] = f"its archive could not be written: {error.message}"
        else:
            archives[i] = target
    return unarchived


def _removals(
    rows: dict[str, SessionRow],
    going: list[str],
    cost: PruneCost,
    archives: dict[str, Path] | None = None,
) -> tuple[Removal, ...]:
    return tuple(
        Removal(
            id=i,
            short_id=rows[i].short_id,
            state=category(rows[i].state, rows[i].archived) or "",
            updated_at=rows[i].updated_at,
            events=cost.events[i],
            bytes=cost.bytes[i],
            archive=(archives or {}).get(i),
        )
        for i in going
    )


def _skipped(row: SessionRow, reason: str) -> Skipped:
    state = category(row.state, row.archived) or row.state.lower()
    return Skipped(id=row.id, short_id=row.short_id, state=state, reason=reason)


def _unsynced(ws: Workspace, store: EventStore) -> dict[str, str]:
    """Why each session whose events the configured remote lacks, or whose work tree the
    hand-off remote lacks, is kept."""
    unsynced: dict[str, str] = {}
    if ws.config.handoff.remote is not None:
        from acode.system.git import is_work_tree
        from acode.system.handoff_push import refs_to_push

        if is_work_tree(ws.root):
            for session_id in refs_to_push(ws.root, ws.paths, conflicts=True):
                unsynced[session_id] = (
                    f"its work tree is not pushed to {ws.config.handoff.remote} yet: "
                    "run `acode sync` first"
                )
    if ws.config.sync.remote is not None:
        unsynced.update(
            (
                b.session_id,
                f"the remote mirror lacks {pending} of its events: run `acode sync` first",
            )
            for b in store.sync_backlog()
            if (pending := b.pending_for()) > 0
        )
    return unsynced


def prune_sessions(
    workspace: Path,
    session_ids: Sequence[str],
    *,
    include_backups: bool = False,
    archive_dir: Path | None = None,
    clock: Clock | None = None,
) -> PruneReport:
    """Remove the sessions ``session_ids`` (a :func:`select_sessions`'s ids) whole. Each
    is checked again under its lock, held until its removal is committed: one that was
    resumed, taken or given events the remote lacks since is kept (``skipped``). With
    ``archive_dir``, each is archived there first (``<id>.acode.gz``, verified as it is
    written); one whose archive cannot be written is kept, and its family with it."""
    clock = clock or SystemClock()
    ws = existing_workspace(workspace)
    signer = load_signer()
    store = open_workspace_store(ws)
    try:
        before = _state_bytes(ws, store)
        leftovers = _finish_file_removals(ws, store, signer)
        with ExitStack() as locks:
            rows = {r.id: r for r in store.sessions()}
            ready: list[str] = []
            refused: list[Skipped] = []
            for i in session_ids:
                row = rows.get(i)
                if row is None:
                    continue  # gone since: another prune took it
                if category(row.state, row.archived) is None:
                    refused.append(_skipped(row, "it can be resumed now"))
                    continue
                try:
                    lock = take_lock(ws, i, clock, label=row.short_id)
                except AcodeError:
                    refused.append(_skipped(row, _RUNNING))
                    continue
                locks.enter_context(lock)
                ready.append(i)
            going, skipped = _keep_refused(ws, store, rows, ready, locked=True)
            archives: dict[str, Path] = {}
            if archive_dir is not None:
                unarchived = _archive_each(store, rows, going, archive_dir, signer, archives)
                if unarchived:
                    skipped += [_skipped(rows[i], why) for i, why in unarchived.items()]
                    going, family = _keep_refused(
                        ws, store, rows, [i for i in going if i not in unarchived], locked=True
                    )
                    skipped += family
            cost = store.prune_cost([rows[i] for i in going])
            store.prune(
                [rows[i] for i in going],
                now_us=clock.now_us(),
                key_id=signer.key_id,
                sign=signer.tag,
                files_left=2 if include_backups else 1,
            )
            for i in going:
                _remove_files(ws, i, include_backups=include_backups)
                store.files_removed(i)
        reclaimed = store.reclaim_space() if going else None
        selection = Selection(
            removals=_removals(rows, going, cost, archives),
            skipped=tuple(refused + skipped),
            blobs=cost.blobs,
            blob_bytes=cost.blob_bytes,
            state_bytes=before,
            limit=ws.config.retention.max_state_bytes,
        )
        return PruneReport(
            selection=selection,
            state_bytes_after=_state_bytes(ws, store),
            converted=reclaimed is not None and reclaimed.converted,
            vacuum_error=reclaimed.error if reclaimed is not None else None,
            leftovers=leftovers,
        )
    finally:
        store.close()


def _finish_file_removals(ws: Workspace, store: EventStore, signer: Signer) -> int:
    """Remove what earlier prunes, killed after their commit, left of their sessions'
    files; how many sessions that was. Only a record signed with the user's key is acted
    on: one written by someone else, naming a session that still runs or a path of
    their choosing, removes nothing (and reads as tampering where its id is used)."""
    from acode.engine.pruned import is_authentic

    left = [r for r in store.pending_file_removals() if is_authentic(r, signer)]
    live = {row.id for row in store.sessions()}
    for record in left:
        # A session of that id is back (`acode session import`): the files are its own.
        if record.id not in live:
            _remove_files(ws, record.id, include_backups=record.files_left == 2)
        store.files_removed(record.id)
    return len(left)


def _remove_files(ws: Workspace, session_id: str, *, include_backups: bool) -> None:
    """A pruned session's files outside the database: its progress file's folder, its
    staging folder, its snapshot refs (the ``-before-rollback`` backups only when asked),
    its hand-off ref and push record, and its lock file. Each removal may be repeated: a
    prune killed half-way through them is finished by the next."""
    from acode.system.git import is_work_tree
    from acode.system.handoff_push import forget_session
    from acode.system.locks import force_unlock
    from acode.system.snapshot import prune_snapshots

    if not _SESSION_ID.fullmatch(session_id):
        return  # a name acode never gives a session (an edited database): not a path to use
    shutil.rmtree(ws.paths.session_dir(session_id), ignore_errors=True)
    ws.paths.clear_temp(session_id)
    if is_work_tree(ws.root):
        prune_snapshots(ws.root, session_id, keep_backups=not include_backups)
        forget_session(ws.root, ws.paths, session_id)
    # Held by this prune, or left by one that was killed: nobody runs the session.
    force_unlock(ws.paths.locks, session_id)
