"""Back-off: from 1 s, doubling, capped at 60 s, jittered within the upper half."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from acode.domain.backoff import Backoff


def test_delays_double_up_to_the_cap() -> None:
    policy = Backoff()
    assert [policy.delay(n, 1.0) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]


def test_the_ceiling_doubles_up_to_the_cap_without_jitter() -> None:
    busy = Backoff(first=1.0, cap=30.0)  # the model client's wait for a busy server
    assert [busy.ceiling(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert busy.ceiling(10**6) == 30.0
    assert busy.ceiling(0) == 1.0


def test_jitter_draws_from_the_upper_half_never_below_the_first_delay() -> None:
    policy = Backoff()
    assert policy.delay(1, 0.0) == 1.0
    assert policy.delay(5, 0.0) == 8.0
    assert policy.delay(10_000, 0.0) == 30.0


@settings(max_examples=200, derandomize=True)
@given(
    st.integers(min_value=0, max_value=10**6), st.floats(min_value=0, max_value=1, exclude_max=True)
)
def test_every_delay_lies_between_one_second_and_a_minute(failures: int, draw: float) -> None:
    assert 1.0 <= Backoff().delay(failures, draw) <= 60.0
