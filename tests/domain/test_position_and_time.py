"""Where a step is in its plan ("Task 2/3, Step 3/5 (implement > build)") and what the
recorded time of the completed steps says about the rest: pure, so tried on any plan and
any recorded times."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from acode.domain.plan import Plan
from acode.domain.position import Position, position_in
from acode.domain.timing import WorkTime

__all__: list[str] = []


def _plan(sizes: list[int]) -> Plan:
    return Plan.from_dict(
        {
            "title": "t",
            "tasks": [
                {
                    "id": f"t{t}",
                    "title": f"Task {t}",
                    "steps": [{"id": f"s{t}-{s}", "read": "a.txt"} for s in range(size)],
                }
                for t, size in enumerate(sizes)
            ],
        }
    )


@given(st.lists(st.integers(1, 6), min_size=1, max_size=6))
def test_every_step_is_placed_by_its_numbers_in_its_plan(sizes: list[int]) -> None:
    plan = _plan(sizes)
    for t, size in enumerate(sizes):
        for s in range(size):
            at = position_in(plan, f"s{t}-{s}")
            assert at == Position(f"s{t}-{s}", f"t{t}", t + 1, len(sizes), s + 1, size)
            assert at.describe() == (
                f"Task {t + 1}/{len(sizes)}, Step {s + 1}/{size} (t{t} > s{t}-{s})"
            )


def test_without_a_plan_or_outside_it_a_position_is_its_ids() -> None:
    assert position_in(None, "build", "implement").describe() == "implement > build"
    assert position_in(None, "build").describe() == "build"
    assert position_in(_plan([2]), "elsewhere", "x").to_dict() == {
        "task": "x",
        "step": "elsewhere",
        "task_number": None,
        "task_count": None,
        "step_number": None,
        "step_count": None,
    }


@given(
    st.integers(0, 10_000),
    st.integers(0, 10**12),
    st.one_of(st.none(), st.integers(0, 10_000)),
)
def test_the_estimate_is_the_mean_of_what_was_recorded_or_unknown(
    done: int, took_us: int, remaining: int | None
) -> None:
    work = WorkTime(done, took_us, remaining)
    estimate = work.remaining_estimate_us
    if done == 0 or remaining is None:
        assert estimate is None  # never made up
    else:
        assert estimate == remaining * (took_us // done)
        assert estimate <= remaining * took_us
    data = work.to_dict()
    assert data["completed_seconds"] == took_us / 1e6
    assert data["remaining_estimate_seconds"] == (None if estimate is None else estimate / 1e6)
