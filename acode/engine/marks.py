"""Recording and reading marked checkpoints (:mod:`acode.domain.marks`).

A mark is a ``checkpoint_marked`` event, committed with its own signed checkpoint like
any other: it is in the hash chain, verified with the rest of the history, pushed to
the remote mirror and exported. A running session is marked by the program that runs
it (``Session.checkpoint``); one that no process runs, by
:func:`acode.operations.maintenance.mark_checkpoint`, which takes its lock for the one
commit (invariant 5, docs/invariants.md).
"""

from __future__ import annotations

import getpass

from acode.domain.events import EventType
from acode.domain.marks import Mark, check_label
from acode.engine.journal import Journal
from acode.store.base import EventStore
from acode.store.records import SessionRow

__all__ = ["record_mark", "session_marks"]


def session_marks(store: EventStore, row: SessionRow, after_seq: int = 0) -> list[Mark]:
    """The session's marks after event ``after_seq``, oldest first."""
    return [
        Mark.from_event(e.seq, e.ts_us, e.payload)
        for e in store.events_of_type(row, EventType.CHECKPOINT_MARKED, after_seq)
    ]


def record_mark(journal: Journal, label: str) -> tuple[Mark, bool]:
    """Mark the journal's session at its newest event with ``label`` (checked), unless
    a mark of that label exists: then that one. The journal's holder holds the lock."""
    text = check_label(label)
    for mark in session_marks(journal.store, journal.row):
        if mark.label == text:
            return mark, False
    payload = {"label": text, "by": getpass.getuser()}
    (event,) = journal.write([(EventType.CHECKPOINT_MARKED, payload)])
    return Mark.from_event(event.seq, event.ts_us, payload), True
