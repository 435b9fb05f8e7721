"""Token usage and cost of model calls, added up across calls and resumes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from acode.domain.config import Price

__all__ = ["Usage", "call_cost", "total_usage"]


@dataclass(frozen=True)
class Usage:
    """Model calls, their tokens and their cost, summed."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # None while no call had a price: "unknown" is not "free"
    cost_usd: float | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        """Both sums together: a running total, added to as calls are recorded."""
        costs = [c for c in (self.cost_usd, other.cost_usd) if c is not None]
        return Usage(
            calls=self.calls + other.calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=round(sum(costs), 8) if costs else None,
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "cost_usd": self.cost_usd,
        }


def call_cost(
    pricing: Mapping[str, Price], models: Iterable[str], usage: Mapping[str, int]
) -> float | None:
    """The cost of one call in US dollars, priced by the first of ``models`` (the name
    configured, then the one the server answered with) that has a price; None when none has."""
    price = next((pricing[m] for m in models if m in pricing), None)
    if price is None:
        return None
    prompt = usage.get("prompt_tokens", 0)
    completion = usage.get("completion_tokens", 0)
    return round((prompt * price.input + completion * price.output) / 1_000_000, 8)


def total_usage(results: Iterable[Mapping[str, object]]) -> Usage:
    """The sum over recorded model-call results (each with ``usage``, maybe ``cost_usd``)."""
    calls = prompt = completion = 0
    cost: float | None = None
    for result in results:
        calls += 1
        usage = result.get("usage")
        if isinstance(usage, Mapping):
            prompt += _count(usage.get("prompt_tokens"))
            completion += _count(usage.get("completion_tokens"))
        spent = result.get("cost_usd")
        if isinstance(spent, int | float) and not isinstance(spent, bool):
            cost = (cost or 0.0) + float(spent)
    return Usage(
        calls=calls,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_usd=None if cost is None else round(cost, 8),
    )


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
