"""Choosing what to resume and how much to ask (specification 002).

autopilot never asks: it takes the most recent resumable session and stops (exit 17)
on anything that would need a person. interactive (the default on a terminal) lets the
person choose among several sessions and decide about changed files. preflight shows the
full validation report and the whole remaining plan, and goes on only when the person
types "proceed".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from acode.domain.age import AgeJudgement, judge_age
from acode.runtime.catalog import resumable_sessions
from acode.store.records import SessionRow
from acode.store.sqlite_store import SqliteStore

__all__ = ["Candidate", "Mode", "candidates", "default_mode"]


class Mode(StrEnum):
    AUTOPILOT = "autopilot"
    INTERACTIVE = "interactive"
    PREFLIGHT = "preflight"


def default_mode(on_terminal: bool) -> Mode:
    return Mode.INTERACTIVE if on_terminal else Mode.AUTOPILOT


@dataclass(frozen=True)
class Candidate:
    row: SessionRow
    age: AgeJudgement

    @property
    def where(self) -> str:
        if self.row.current_step is None:
            return "the start"
        task = f"{self.row.current_task} > " if self.row.current_task else ""
        return f"{task}{self.row.current_step}"


def candidates(store: SqliteStore, now_us: int) -> list[Candidate]:
    """The sessions `acode resume` can continue, most recent first, with their age."""
    return [
        Candidate(row, judge_age(max(0, now_us - row.updated_at) // 1_000_000))
        for row in resumable_sessions(store)
        if row.kind in ("plan", "agent")  # the library's sessions resume in their program
    ]
