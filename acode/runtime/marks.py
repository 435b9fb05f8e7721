"""Recording and reading marked checkpoints (:mod:`acode.domain.marks`).

A mark is a ``checkpoint_marked`` event, committed with its own signed checkpoint like
any other: it is in the hash chain, verified with the rest of the history, pushed to
the remote mirror and exported. Marking a session that no process runs takes its lock
for the one commit (invariant 5, docs/invariants.md); a running session is marked by the program
that runs it (``Session.checkpoint``).
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import NamedTuple

from acode.domain.events import EventType
from acode.domain.marks import Mark, check_label
from acode.runtime.journal import Journal
from acode.runtime.maintenance import locked_session
from acode.security.signing import load_signer
from acode.store.base import EventStore
from acode.store.records import SessionRow

__all__ = ["Marked", "mark_checkpoint", "record_mark", "session_marks"]


class Marked(NamedTuple):
    """The mark a label names in a session, and whether this call recorded it."""

    mark: Mark
    new: bool
    row: SessionRow


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


def mark_checkpoint(workspace: Path, id_or_prefix: str, label: str) -> Marked:
    """Mark a session no process is running (``acode session checkpoint``); any state,
    terminal ones included: a mark names a point and changes nothing else."""
    check_label(label)  # a bad label is refused before anything is opened or locked
    with locked_session(workspace, id_or_prefix) as (ws, store, row, clock):
        journal = Journal.load(store, row, clock, load_signer())
        mark, new = record_mark(journal, label)
        if new:
            from acode.runtime.progress_file import ProgressFile  # it reads marks too

            ProgressFile(ws.paths).update(journal, final=True)
        return Marked(mark, new, store.session(row.id))
