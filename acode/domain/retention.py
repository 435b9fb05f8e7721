"""Which ended sessions a prune removes (`acode session prune`, ``retention:``): pure
rules over the sessions' rows, the clock's time given.

A session may be pruned when it has ended (COMPLETED, FAILED, CANCELLED) or was
discarded; never one that resume may continue. A parent and its sub-sessions go
together or not at all (a sub-session names its parent and sends it its summary, the
parent lists its sub-sessions): a child is never left behind with its parent gone, nor a
parent with part of its children.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from acode.domain.states import SessionState, is_terminal
from acode.errors import UsageError

if TYPE_CHECKING:  # the store reads the record's message here, and lists load no config
    from acode.domain.config import RetentionSettings

__all__ = [
    "PRUNE_STATES",
    "Criteria",
    "Prunable",
    "category",
    "criteria_from_retention",
    "parse_age",
    "prune_record_message",
    "select",
    "whole_families",
]

DAY_US = 86_400 * 1_000_000
# What --state takes: the terminal states, and discarded sessions.
PRUNE_STATES = ("completed", "failed", "cancelled", "discarded")
_AGE = re.compile(r"(?P<n>[0-9]{1,6})(?P<unit>[dhw])")
_UNIT_US = {"h": 3_600 * 1_000_000, "d": DAY_US, "w": 7 * DAY_US}


def parse_age(text: str) -> int:
    """``30d``, ``12h``, ``2w`` as microseconds; a UsageError naming the value otherwise."""
    match = _AGE.fullmatch(text.strip())
    if match is None or int(match["n"]) == 0:
        raise UsageError(
            f"--older-than {text!r} is not an age acode reads",
            hint="give a whole number above 0 and a unit: h (hours), d (days) or w (weeks), "
            "e.g. acode session prune --older-than 30d",
        )
    return int(match["n"]) * _UNIT_US[match["unit"]]


def category(state: str, archived: bool) -> str | None:
    """What a prune calls a session (a value of PRUNE_STATES); None: it may be resumed,
    and is never pruned."""
    try:
        found = SessionState(state)
    except ValueError:  # a state acode never writes: not ours to remove
        return None
    if is_terminal(found):
        return found.value.lower()
    return "discarded" if archived else None


class Prunable(NamedTuple):
    """A session a prune may remove: ``kind`` one of PRUNE_STATES."""

    id: str
    kind: str
    updated_at: int
    parent_id: str | None


class Criteria(NamedTuple):
    """What to prune: sessions of each kind last updated before its cutoff (µs since the
    epoch; a kind absent from ``cutoffs`` is kept), and, with ``max_bytes``, the oldest
    others too until the state fits."""

    cutoffs: Mapping[str, int]
    max_bytes: int | None = None


def criteria_from_retention(retention: RetentionSettings, now_us: int) -> Criteria:
    days = {
        "completed": retention.completed_days,
        "failed": retention.failed_days,
        "cancelled": retention.cancelled_days,
        "discarded": retention.cancelled_days,
    }
    cutoffs = {kind: now_us - n * DAY_US for kind, n in days.items() if n is not None}
    return Criteria(cutoffs=cutoffs, max_bytes=retention.max_state_bytes)


def select(
    sessions: Sequence[Prunable],
    criteria: Criteria,
    sizes: Mapping[str, int],
    state_bytes: int,
) -> list[str]:
    """The ids to prune, oldest first: those past their kind's cutoff, then, while the
    state (``state_bytes``, less what the chosen ones free, ``sizes``) is over
    ``max_bytes``, the oldest of the rest."""
    oldest_first = sorted(sessions, key=lambda s: (s.updated_at, s.id))
    chosen = [
        s.id
        for s in oldest_first
        if s.kind in criteria.cutoffs and s.updated_at < criteria.cutoffs[s.kind]
    ]
    if criteria.max_bytes is not None:
        left = state_bytes - sum(sizes.get(i, 0) for i in chosen)
        for s in oldest_first:
            if left <= criteria.max_bytes:
                break
            if s.id not in chosen:
                chosen.append(s.id)
                left -= sizes.get(s.id, 0)
    return chosen


def whole_families(
    chosen: Iterable[str], parents: Mapping[str, str | None]
) -> tuple[list[str], dict[str, str]]:
    """``chosen`` without the sessions linked to one that stays: a parent and its
    sub-sessions (at any depth) go together or not at all. A sub-session names its parent
    and sends it its summary; the parent lists its sub-sessions. For each one left out,
    the session that keeps it. ``parents``: every session's parent id."""
    going = list(chosen)
    kept: dict[str, str] = {}
    while True:
        gone = set(going)
        keeping: dict[str, str] = {}
        for child, parent in parents.items():
            if parent is None or parent not in parents:
                continue  # no parent, or one already gone
            if parent in gone and child not in gone:
                keeping.setdefault(parent, child)
            elif child in gone and parent not in gone:
                keeping.setdefault(child, parent)
        if not keeping:
            return going, kept
        kept.update(keeping)
        going = [i for i in going if i not in keeping]


def prune_record_message(
    session_id: str, state: str, pruned_at: int, last_seq: int, last_hash: bytes
) -> bytes:
    """What the user's key signs for a pruned session's record: which session, in which
    state, when, and the last event it had (its number and hash)."""
    return b"\x00".join(
        (
            b"acode-pruned-v1",
            session_id.encode(),
            state.encode(),
            str(pruned_at).encode(),
            str(last_seq).encode(),
            last_hash.hex().encode(),
        )
    )
