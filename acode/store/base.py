"""The store contract: what the engine needs from storage, and the factory that opens one.

``EventStore`` is every operation the engine, resume, sync, agent and work layers use,
typed with the domain's values and the rows of ``acode.store.records``; none of them
names a backend, a connection or SQL. ``open_store`` picks the backend from a URL:
``sqlite:///path`` (or a plain path, the default), or ``postgresql://...``. A backend
keeps its own layout (row keys, SQL, transactions) in its own folder, ``store/sqlite/``
for SQLite, ``store/postgres/`` for PostgreSQL, and runs
``tests/store/contract.py`` (docs/architecture.md, "How to add a store backend").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from acode.errors import StoreUrlError

if TYPE_CHECKING:
    from acode.domain.events import Event, EventType
    from acode.domain.reducer import StepRecord
    from acode.store.archive_records import ArchivedEvent, ArchivedFile, SessionImport
    from acode.store.postgres.health import StoreHealth
    from acode.store.records import (
        Backlog,
        CheckpointRow,
        Commit,
        FileFields,
        FileRow,
        FileTouch,
        MessageRow,
        PruneCost,
        PrunedRow,
        SessionRow,
        SyncStateRow,
    )
    from acode.store.sqlite.health import DatabaseHealth
    from acode.store.sqlite.pruning import Reclaimed

__all__ = [
    "SCOPE_PARAMETER",
    "Durability",
    "EventStore",
    "database_health",
    "open_store",
    "schema_version",
    "store_health",
    "workspace_url",
]

# ``full``: every commit survives power loss; ``normal``: the last ones may not (never a
# process crash), for writes that can be lost, such as the sync bookkeeping.
Durability = Literal["full", "normal"]


class EventStore(Protocol):
    """A session store. Every read and write is of one session (its row's ``sid``, the
    store's own key for it) but for the session lists and blobs. Writes are all-or-
    nothing; a write the store cannot take raises ``StorageError`` and keeps nothing."""

    @property
    def location(self) -> str:
        """What messages name the store by: its file, or its URL without a password."""

    @property
    def url(self) -> str:
        """The URL that ``open_store`` opens this store again with (another connection)."""

    def close(self) -> None: ...

    # -- sessions -------------------------------------------------------------------

    def create_session(
        self,
        *,
        session_id: str,
        title: str,
        workspace: str,
        kind: str,
        config_json: str,
        config_hash: str,
        parent_id: str | None,
        created_at: int,
        key_id: str,
        first: Commit,
    ) -> SessionRow:
        """A new session with its first events, in one transaction."""

    def session(self, session_id: str) -> SessionRow:
        """The session with this full id; ``StorageError`` when there is none."""

    def sessions(self) -> list[SessionRow]:
        """All sessions, most recently updated first."""

    def sessions_with_prefix(self, prefix: str) -> list[SessionRow]:
        """Sessions whose id starts with ``prefix``, in id order (at most 11)."""

    def short_id(self, session_id: str) -> str:
        """The session's shortest unique id prefix (at least 8 characters)."""

    # -- writes ---------------------------------------------------------------------

    def commit(self, sid: int, commit: Commit) -> None:
        """Everything of ``commit`` in one transaction, or nothing. An event whose seq
        the session holds already is refused (``StorageError``): the log is append-only."""

    def append_completion(
        self,
        sid: int,
        seq: int,
        event_id: str,
        ts_us: int,
        payload_json: str,
        hash_: bytes,
        signature: bytes,
    ) -> None:
        """A ``step_completed`` event and nothing else, with the checkpoint it carries
        (its ``signature``; its summary derived): a ``commit`` of that one event, on the
        path most steps take, built without a Commit or an Event."""

    def rechain(
        self,
        session: SessionRow,
        events: Sequence[tuple[int, str, bytes, bytes | None]],
        old_checkpoints: Sequence[tuple[int, bytes, str]],
        chain: int,
        key_id: str,
    ) -> bool:
        """The history chained again (acode/engine/rechain.py): False when another
        process did it first."""

    # -- events ---------------------------------------------------------------------

    def events(self, session: SessionRow, after_seq: int = 0, limit: int = -1) -> list[Event]:
        """The events after ``after_seq``, in seq order; ``limit`` -1: all of them."""

    def event(self, session: SessionRow, seq: int) -> Event:
        """Event ``seq``; ``StorageError`` when there is none."""

    def events_at(self, session: SessionRow, seqs: Sequence[int]) -> dict[int, Event]:
        """The events numbered ``seqs``, by number; ``StorageError`` when one is missing."""

    def events_of_type(
        self, session: SessionRow, type_: EventType, after_seq: int = 0
    ) -> list[Event]: ...

    def event_rows(
        self, session: SessionRow, after_seq: int, limit: int
    ) -> list[tuple[int, str, int, str, str, bytes]]:
        """Up to ``limit`` events after ``after_seq`` as (seq, event id, time, type,
        payload JSON, hash): what a replay reads, with no Event built."""

    def hashes(self, session: SessionRow, seqs: Sequence[int]) -> dict[int, bytes]:
        """The stored hashes of those of events ``seqs`` that exist."""

    def model_results(
        self, session: SessionRow, after_seq: int = 0, upto_seq: int = ...
    ) -> list[dict[str, Any]]:
        """The results of the answered model calls in (after_seq, upto_seq], in order."""

    def step_times(self, session: SessionRow) -> tuple[int, int]:
        """The number of completed steps and the sum of their durations (µs)."""

    # -- checkpoints ----------------------------------------------------------------

    def checkpoints(self, session: SessionRow) -> list[CheckpointRow]:
        """The checkpoints to load from, newest first (unverified)."""

    def newest_checkpoint(self, session: SessionRow) -> CheckpointRow | None: ...

    def checkpoint_rows(
        self, session: SessionRow
    ) -> list[tuple[int, str | None, bytes | None, int]]:
        """Every checkpoint in an event, in order, as stored: (seq, summary or None
        where it is derived, signature, time)."""

    def old_checkpoints(self, session: SessionRow) -> list[CheckpointRow]:
        """The checkpoints written before schema 4, newest first."""

    # -- steps and the step id ledger -----------------------------------------------

    def steps(self, sid: int) -> list[StepRecord]:
        """Every step's record, by position."""

    def step_rows(self, sid: int, first: int = 0, last: int = ...) -> list[StepRecord]:
        """The step rows kept at positions [first, last] (steps with more than a
        completion: started, retried, failed, awaiting an approval)."""

    def unfinished_steps(self, sid: int) -> list[StepRecord]: ...

    def newest_steps(self, session: SessionRow, count: int) -> list[StepRecord]: ...

    def has_step_id(self, sid: int, step_id: str) -> bool: ...

    def step_id_ledger(self, sid: int) -> set[str]: ...

    def unledgered_step_ids(self, session: SessionRow) -> list[str]:
        """The step ids of the events after the newest checkpoint that wrote its
        summary out, which the ledger does not hold yet."""

    # -- messages, files, blobs -----------------------------------------------------

    def messages(self, sid: int) -> list[MessageRow]: ...

    def has_messages(self, sid: int) -> bool: ...

    def files(self, sid: int) -> list[FileRow]: ...

    def file_fields(self, sid: int) -> list[FileFields]: ...

    def touches(self, sid: int, paths: Sequence[str]) -> list[FileTouch]: ...

    def touches_since(self, sid: int, paths: Sequence[str], after_us: int) -> list[FileTouch]: ...

    def blob(self, sha256: str) -> bytes:
        """A stored file image; ``StorageError`` when it is missing or damaged."""

    # -- the remote mirror's bookkeeping (acode/sync) -------------------------------

    def sync_state(self, sid: int) -> SyncStateRow: ...

    def last_seq(self, sid: int) -> int:
        """The session's last event's seq; 0 when it has none."""

    def sync_backlog(self) -> list[Backlog]:
        """Every session's position, in id order."""

    def mark_synced(self, sid: int, remote_id: str, seq: int, now_us: int) -> None:
        """The remote committed every event up to ``seq``: never moves back."""

    def record_failure(self, sid: int, reason: str, now_us: int, next_retry_us: int) -> None: ...

    # -- a whole session as stored, for archives (acode/operations/archive.py) --------

    def stored_session(self, session_id: str) -> SessionRow | None:
        """The session's row exactly as stored (its own ``updated_at``, no checkpoint's,
        no current task or step, no short id); None when there is none."""

    def stored_events(self, sid: int, after_seq: int, limit: int) -> list[ArchivedEvent]:
        """Up to ``limit`` events after ``after_seq``, in order, as stored: with the
        checkpoint each carries (its summary where it was written out, its signature)."""

    def stored_files(self, sid: int) -> list[ArchivedFile]:
        """The session's ``files`` rows with the event that recorded each, by path."""

    def stored_old_checkpoints(self, sid: int) -> list[tuple[int, CheckpointRow]]:
        """The checkpoints an acode before schema 4 kept in their own table, with their
        slots, by slot."""

    def held_blobs(self, shas: Sequence[str]) -> list[str]:
        """Those of the file images ``shas`` the store holds, sorted."""

    def import_session(self, imported: SessionImport) -> SessionRow:
        """A whole session, exactly as an archive holds it, in one transaction: under a
        new ``sid`` of the store's own, every other value as given. Blobs held already
        are shared. A session id the store holds already is refused (``StorageError``),
        as is anything the store cannot take: nothing is kept then. The caller has
        verified the session (acode/operations/archive_import.py): the store does not."""

    # -- pruning whole sessions (acode.operations.prune) ----------------------------

    def prune_cost(self, sessions: Sequence[SessionRow]) -> PruneCost:
        """What pruning ``sessions`` would remove: events, bytes, unshared file images."""

    def prune(
        self,
        sessions: Sequence[SessionRow],
        *,
        now_us: int,
        key_id: str,
        sign: Callable[[bytes], bytes],
        files_left: int,
    ) -> list[PrunedRow]:
        """Remove ``sessions`` whole and record each (signed), in one transaction."""

    def pruned_with_prefix(self, prefix: str) -> list[PrunedRow]:
        """The records of pruned sessions whose id starts with ``prefix``."""

    def pending_file_removals(self) -> list[PrunedRow]:
        """Pruned sessions whose files outside the store are still to remove."""

    def files_removed(self, session_id: str) -> None: ...

    def reclaim_space(self) -> Reclaimed:
        """Give the space pruned rows held back to the file system."""


# The query parameter of a shared store's URL that narrows it to one workspace's sessions
# (acode's own: the PostgreSQL store takes it out before the URL reaches libpq).
SCOPE_PARAMETER = "acode_workspace"


def workspace_url(url: str, workspace: str) -> str:
    """The URL of the store that many workspaces share at ``url``, as ``workspace`` sees
    it: its own sessions alone, as in a SQLite file of its own. The parameter is acode's
    alone: one already in ``url`` is replaced, never trusted."""
    import re
    from urllib.parse import quote

    url = re.sub(rf"(?<=[?&]){SCOPE_PARAMETER}=[^&]*&?", "", url).rstrip("?&")
    return f"{url}{'&' if '?' in url else '?'}{SCOPE_PARAMETER}={quote(workspace, safe='')}"


def open_store(url: str | os.PathLike[str], durability: Durability = "full") -> EventStore:
    """The store at ``url``: ``sqlite:///path/to/acode.db``, or a path, which is SQLite
    (the default); or ``postgresql://USER@HOST:PORT/DATABASE`` (acode.store.postgres),
    whose ``acode_workspace`` parameter, when given, names the one workspace whose
    sessions the store serves. ``StoreUrlError`` names a URL no backend takes. Each
    backend is imported here, when it is asked for."""
    if isinstance(url, os.PathLike) or "://" not in url:
        return _sqlite(Path(url), durability)
    # Before the URL is taken apart: the PostgreSQL store tells a URL of its kind that
    # cannot be read without acode's own parameter, and with its own hint.
    if url.partition("://")[0].lower() in ("postgresql", "postgres"):
        from acode.store.postgres.store import PostgresStore

        return PostgresStore.open(url, durability)
    from urllib.parse import unquote, urlsplit

    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise StoreUrlError(
            f"the store URL {_shown(url)!r} cannot be read: {exc}", hint=_HINT
        ) from None
    if parts.scheme == "sqlite":
        if parts.netloc or not parts.path or parts.query or parts.fragment:
            raise StoreUrlError(
                f"the store URL {_shown(url)!r} is not a SQLite URL acode takes", hint=_HINT
            )
        return _sqlite(Path(unquote(parts.path)), durability)
    kind = f"{parts.scheme}://" if parts.scheme else "no scheme"
    raise StoreUrlError(
        f"the store URL {_shown(url)!r} names a kind of store acode does not know ({kind})",
        hint=_HINT,
    )


_HINT = (
    "give the SQLite file as sqlite:/// and its absolute path "
    "(sqlite:///home/me/project/.agent/state/acode.db), or as a plain path; "
    "a PostgreSQL store as postgresql://USER@HOST:PORT/DATABASE"
)


def _shown(url: str) -> str:
    """``url`` as a message may show it: what stands between :// and @ masked, where
    a password would be."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    return f"{scheme}{sep}***@{host}" if at and credentials else url


def _sqlite(path: Path, durability: Durability) -> EventStore:
    from acode.store.sqlite.store import SqliteStore

    return SqliteStore.open(path, durability)


def database_health(path: Path) -> DatabaseHealth:
    """What `acode doctor` reads of the database file at ``path``, read-only: its
    integrity, its schema version and its sync backlog (acode.store.sqlite.health)."""
    from acode.store.sqlite.health import database_health as sqlite_health

    return sqlite_health(path)


def store_health(url: str) -> StoreHealth:
    """What `acode doctor` reads of the PostgreSQL store at ``url``, changing nothing: its
    schema version and its sessions (acode.store.postgres.health)."""
    from acode.store.postgres.health import store_health as postgres_health

    return postgres_health(url)


def schema_version() -> int:
    """The schema version this acode's store is at (the SQLite migrations it runs): what
    an archive's header names (acode/operations/archive.py)."""
    from acode.store.sqlite.migrations import available_migrations

    return available_migrations()[-1].number
