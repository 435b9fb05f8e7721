"""How old an interruption is, and what that suggests (docs/resume.md, "Age of an interruption")."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Age", "AgeJudgement", "ago_text", "judge_age"]


class Age(StrEnum):
    FRESH = "fresh"  # under an hour
    RECENT = "recent"  # under a day
    MODERATE = "moderate"  # under a week
    STALE = "stale"  # a week or more


@dataclass(frozen=True)
class AgeJudgement:
    age: Age
    seconds: int
    advice: str | None


_HOUR, _DAY = 3600, 86400


def judge_age(seconds: int) -> AgeJudgement:
    if seconds < _HOUR:
        return AgeJudgement(age=Age.FRESH, seconds=seconds, advice=None)
    if seconds < _DAY:
        return AgeJudgement(age=Age.RECENT, seconds=seconds, advice=None)
    if seconds < 7 * _DAY:
        return AgeJudgement(
            age=Age.MODERATE,
            seconds=seconds,
            advice="the workspace may have moved on; check the environment report",
        )
    return AgeJudgement(
        age=Age.STALE,
        seconds=seconds,
        advice="interrupted over a week ago: consider starting over (`acode session discard ID`, "
        "then `acode run`)",
    )


def ago_text(seconds: int) -> str:
    """ "1 second ago", "3 days ago": an interruption's age as a sentence says it."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = seconds // size
            return f"{n} {unit}{'' if n == 1 else 's'} ago"
    return f"{seconds} second{'' if seconds == 1 else 's'} ago"
