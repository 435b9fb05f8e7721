"""Usage totals: a running total added to call by call equals the sum of all the calls."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from acode.domain.usage import Usage, total_usage

_TOKENS = st.integers(-5, 10**6)  # a negative count is not counted
_RESULTS = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "cost_usd": st.integers(0, 10**6).map(lambda n: n / 10**8),
            "usage": st.fixed_dictionaries(
                {}, optional={"prompt_tokens": _TOKENS, "completion_tokens": _TOKENS}
            ),
        },
    ),
    max_size=30,
)


@given(results=_RESULTS, cut=st.integers(0, 30))
def test_a_running_total_equals_the_sum_at_once(results: list[dict[str, Any]], cut: int) -> None:
    running = total_usage(results[:cut]) + total_usage(results[cut:])
    whole = total_usage(results)
    assert (running.calls, running.prompt_tokens, running.completion_tokens) == (
        whole.calls,
        whole.prompt_tokens,
        whole.completion_tokens,
    )
    if whole.cost_usd is None:
        assert running.cost_usd is None
    else:
        assert running.cost_usd is not None
        assert abs(running.cost_usd - whole.cost_usd) <= 1e-8


def test_unknown_cost_stays_unknown_and_zero_is_not_unknown() -> None:
    assert (Usage() + Usage()).cost_usd is None
    assert (Usage(cost_usd=0.0) + Usage()).cost_usd == 0.0
    assert (Usage(1, 2, 3, 0.25) + Usage(1, 1, 1, None)) == Usage(2, 3, 4, 0.25)
