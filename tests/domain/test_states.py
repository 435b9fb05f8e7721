"""The transition table: the one place that decides which state changes are allowed."""

from __future__ import annotations

import pytest

from acode.domain.states import (
    RESUMABLE,
    TERMINAL,
    SessionState,
    can_transition,
    is_resumable,
    is_terminal,
)

S = SessionState
ALL = list(S)
NON_TERMINAL = [s for s in S if s not in TERMINAL]


def exits(state: SessionState) -> set[SessionState]:
    return {target for target in S if can_transition(state, target)}


def entries(state: SessionState) -> set[SessionState]:
    return {source for source in S if can_transition(source, state)}


def test_the_terminal_states_are_completed_failed_and_cancelled() -> None:
    assert {S.COMPLETED, S.FAILED, S.CANCELLED} == TERMINAL


@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_a_terminal_state_has_no_exit(state: SessionState) -> None:
    assert exits(state) == set()


@pytest.mark.parametrize("state", ALL)
def test_terminal_and_resumable_partition_the_states(state: SessionState) -> None:
    assert is_terminal(state) != is_resumable(state)
    assert (state in TERMINAL) == is_terminal(state)
    assert (state in RESUMABLE) == is_resumable(state)


def test_terminal_and_resumable_cover_every_state_once() -> None:
    assert set(S) == TERMINAL | RESUMABLE
    assert not TERMINAL & RESUMABLE


@pytest.mark.parametrize("state", [s for s in NON_TERMINAL if s is not S.PAUSED])
def test_pausing_returns_to_the_state_it_left(state: SessionState) -> None:
    assert can_transition(state, S.PAUSED)
    assert can_transition(S.PAUSED, state)


@pytest.mark.parametrize("state", NON_TERMINAL)
def test_any_live_state_can_be_cancelled(state: SessionState) -> None:
    assert can_transition(state, S.CANCELLED)


def test_paused_leads_only_back_to_work_or_to_cancellation() -> None:
    assert exits(S.PAUSED) == (set(NON_TERMINAL) - {S.PAUSED}) | {S.CANCELLED}


def test_only_a_paused_session_goes_back_to_created() -> None:
    assert entries(S.CREATED) == {S.PAUSED}


def test_only_an_executing_session_completes() -> None:
    assert entries(S.COMPLETED) == {S.EXECUTING}


def test_executing_and_awaiting_approval_go_both_ways() -> None:
    assert can_transition(S.EXECUTING, S.AWAITING_APPROVAL)
    assert can_transition(S.AWAITING_APPROVAL, S.EXECUTING)


def test_a_session_created_can_start_with_or_without_planning() -> None:
    assert can_transition(S.CREATED, S.PLANNING)
    assert can_transition(S.CREATED, S.EXECUTING)
    assert can_transition(S.PLANNING, S.EXECUTING)


@pytest.mark.parametrize("state", ALL)
def test_no_state_transitions_to_itself(state: SessionState) -> None:
    assert not can_transition(state, state)


def test_every_live_state_is_reachable_and_can_finish() -> None:
    reached = {S.CREATED}
    frontier = [S.CREATED]
    while frontier:
        for target in exits(frontier.pop()) - reached:
            reached.add(target)
            frontier.append(target)
    assert reached == set(S)
    for state in NON_TERMINAL:
        assert exits(state) & TERMINAL, state


def test_states_are_stored_by_their_names() -> None:
    assert all(state.value == state.name for state in S)
    assert S("AWAITING_APPROVAL") is S.AWAITING_APPROVAL
