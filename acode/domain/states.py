"""Session states and the one table that decides which transitions are allowed."""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "RESUMABLE",
    "TERMINAL",
    "SessionState",
    "can_transition",
    "is_resumable",
    "is_terminal",
]


class SessionState(StrEnum):
    CREATED = "CREATED"
    PLANNING = "PLANNING"
    EXECUTING = "EXECUTING"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


S = SessionState
TERMINAL = frozenset({S.COMPLETED, S.FAILED, S.CANCELLED})
RESUMABLE = frozenset(set(S) - TERMINAL)

_TRANSITIONS: dict[SessionState, frozenset[SessionState]] = {
    S.CREATED: frozenset({S.PLANNING, S.EXECUTING, S.PAUSED, S.CANCELLED}),
    # A plan the model cannot produce ends the session during planning.
    S.PLANNING: frozenset({S.EXECUTING, S.PAUSED, S.FAILED, S.CANCELLED}),
    S.EXECUTING: frozenset({S.AWAITING_APPROVAL, S.PAUSED, S.COMPLETED, S.FAILED, S.CANCELLED}),
    S.AWAITING_APPROVAL: frozenset({S.EXECUTING, S.PAUSED, S.CANCELLED}),
    # Resume returns a paused session to the state it left.
    S.PAUSED: frozenset({S.CREATED, S.PLANNING, S.EXECUTING, S.AWAITING_APPROVAL, S.CANCELLED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


def can_transition(current: SessionState, target: SessionState) -> bool:
    return target in _TRANSITIONS[current]


def is_terminal(state: SessionState) -> bool:
    return state in TERMINAL


def is_resumable(state: SessionState) -> bool:
    return state in RESUMABLE
