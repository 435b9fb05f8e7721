"""Frozen dataclasses made without their __init__ equal those made with it, and stay frozen."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from acode.domain.frozen import build, evolve
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
