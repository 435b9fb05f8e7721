"""How long the completed steps took, and what that says about the rest.

The time of the work done is what the history recorded; the estimate of what remains is
the remaining steps at the mean of the completed ones, and there is none when no step
completed or the number of remaining steps is not known (an agent's grow as it works):
an estimate is never made up.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WorkTime"]


@dataclass(frozen=True, slots=True)
class WorkTime:
    completed_steps: int  # the completed steps whose time the history recorded
    completed_us: int  # the sum of their recorded durations
    remaining_steps: int | None  # None: not known

    @property
    def mean_us(self) -> int | None:
        """The mean recorded duration of a completed step; None before the first."""
        if self.completed_steps <= 0:
            return None
        return self.completed_us // self.completed_steps

    @property
    def remaining_estimate_us(self) -> int | None:
        """The remaining steps at the mean of the completed ones; None: unknown."""
        mean = self.mean_us
        if mean is None or self.remaining_steps is None:
            return None
        return self.remaining_steps * mean

    def to_dict(self) -> dict[str, object]:
        estimate = self.remaining_estimate_us
        return {
            "completed_steps": self.completed_steps,
            "completed_seconds": self.completed_us / 1e6,
            "remaining_steps": self.remaining_steps,
            "remaining_estimate_seconds": None if estimate is None else estimate / 1e6,
        }
