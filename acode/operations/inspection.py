"""Read-only views of a workspace's sessions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from acode.store.base import EventStore, open_store
from acode.system.workspace import StatePaths

# Reading the store (``read_store``, what `acode session list` does) loads nothing more;
# the journal, the locks and the key load with the views that verify a history.
if TYPE_CHECKING:
    from acode.domain.events import Event
    from acode.domain.reducer import SessionSummary, StepRecord
    from acode.domain.usage import Usage
    from acode.store.records import SessionRow

__all__ = [
    "SessionDetail",
    "chosen_session",
    "lock_holder",
    "read_store",
    "session_detail",
    "session_events",
]


@contextmanager
def read_store(workspace: Path) -> Iterator[EventStore | None]:
    """The workspace's store, or None when no session was ever recorded there
    (reading must not create acode's state in a directory). With ``store.url`` set, the
    workspace's sessions in that PostgreSQL database."""
    from acode.engine.store_choice import scoped_store_url

    paths = StatePaths(workspace)
    url = scoped_store_url(workspace)
    if url is not None:
        store = open_store(url)
    elif not paths.db.exists():
        yield None
        return
    else:
        paths.check_database()
        store = open_store(paths.db)
    try:
        yield store
    finally:
        store.close()


class SessionDetail(NamedTuple):
    """What ``acode status`` shows of one session."""

    row: SessionRow
    summary: SessionSummary
    steps: list[StepRecord]
    lock_holder: str | None
    usage: Usage
    # The commit of the work tree the history names last (hand-off); None: it names none.
    worktree: str | None = None


def lock_holder(workspace: Path, session_id: str) -> str | None:
    from acode.system.locks import holder

    return holder(StatePaths(workspace).locks, session_id)


def session_detail(
    store: EventStore, workspace: Path, id_or_prefix: str | None, *, worktree: bool = False
) -> SessionDetail:
    """``worktree``: read the commit of the work tree the history names last (hand-off)."""
    from acode.domain.events import EventType
    from acode.engine.catalog import model_usage
    from acode.engine.journal import Journal
    from acode.security.signing import load_signer
    from acode.system.clock import SystemClock

    row = chosen_session(store, id_or_prefix)
    journal = Journal.load(store, row, SystemClock(), load_signer())
    assert journal.summary is not None
    recorded = journal.history.of_type(EventType.WORKTREE_RECORDED) if worktree else []
    return SessionDetail(
        row=row,
        summary=journal.summary,
        steps=store.steps(row.sid),
        lock_holder=lock_holder(workspace, row.id),
        usage=model_usage(store, row),
        worktree=str(recorded[-1].payload["commit"]) if recorded else None,
    )


def chosen_session(store: EventStore, id_or_prefix: str | None) -> SessionRow:
    """The session an id or prefix names; with none, the most recent one not discarded
    (what `acode status` and `acode session history` show without an id)."""
    from acode.engine.catalog import find_session
    from acode.errors import NothingToResumeError

    if id_or_prefix is not None:
        return find_session(store, id_or_prefix)
    rows = [r for r in store.sessions() if not r.archived]
    if not rows:
        raise NothingToResumeError(
            "no sessions in this workspace",
            hint='start one with `acode run PLAN.yaml` or `acode run "TASK"`',
        )
    return rows[0]


def session_events(store: EventStore, id_or_prefix: str | None) -> list[Event]:
    """The session's events in replay order (the most recent session's without an id); a
    disagreement with their sequence numbers is corruption and is reported, never hidden."""
    from acode.domain.events import replay_order
    from acode.errors import CheckpointError, ErrorCode

    row = chosen_session(store, id_or_prefix)
    ordered, first_bad = replay_order(store.events(row))
    if first_bad is not None:
        raise CheckpointError(
            f"session {row.short_id}: event {first_bad.seq} is out of order by "
            "(timestamp, event_id); the log was edited or damaged",
            code=ErrorCode.CHAIN_BROKEN,
        )
    return ordered
