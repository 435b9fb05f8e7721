"""Frozen dataclasses made without their __init__ equal those made with it, and stay frozen."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from acode.domain.frozen import build, evolve
from acode.domain.ids import next_event_stamp
from acode.domain.reducer import SessionSummary
from acode.domain.states import SessionState


def test_build_equals_the_constructor() -> None:
    made = SessionSummary("t", SessionState.PAUSED, seq=3, resume_state=SessionState.EXECUTING)
    fields: dict[str, Any] = {f.name: getattr(made, f.name) for f in dataclasses.fields(made)}
    assert build(SessionSummary, **fields) == made


def test_evolve_equals_replace_and_leaves_both_frozen() -> None:
    summary = SessionSummary("t", SessionState.EXECUTING, seq=4, current_step="a")
    changed = evolve(summary, seq=5, current_step="b")
    assert changed == dataclasses.replace(summary, seq=5, current_step="b")
    assert (summary.seq, summary.current_step) == (4, "a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        changed.seq = 6  # type: ignore[misc]


def test_an_event_stamp_names_every_field() -> None:
    first = next_event_stamp(None, 1_700_000_000_000_000, bytes(range(10)))
    for stamp in (first, next_event_stamp(first, 1_700_000_000_000_001, bytes(10))):
        fields = {f.name: vars(stamp)[f.name] for f in dataclasses.fields(stamp)}
        assert type(stamp)(**fields) == stamp
