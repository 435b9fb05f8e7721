"""Choosing what to resume and how much to ask (docs/resume.md, "Choosing the session: modes").

autopilot never asks: it takes the most recent resumable session and resumes it at once
only when that is safe (interrupted under 24 hours ago, nothing blocking changed); otherwise it
hands over to interactive on a terminal, and stops with its reason without one.
interactive (the default on a terminal) shows the plan and offers resume, start over,
details or abort. preflight shows the full validation report, age and risks, and the
whole remaining plan, and goes on only when the person types "proceed".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from acode.domain.age import AgeJudgement, ago_text, judge_age
from acode.engine.catalog import resumable_sessions
from acode.store.base import EventStore
from acode.store.records import SessionRow
from acode.system.log import log_event
from acode.system.workspace import StatePaths

if TYPE_CHECKING:
    from acode.resume.environment import ChangedFile
    from acode.resume.service import ResumePreview

__all__ = [
    "AUTOPILOT_MAX_AGE_S",
    "AutopilotVerdict",
    "Candidate",
    "Mode",
    "StartMode",
    "candidates",
    "default_mode",
    "judge_for_autopilot",
    "log_autopilot",
    "start_mode",
]


class Mode(StrEnum):
    AUTOPILOT = "autopilot"
    INTERACTIVE = "interactive"
    PREFLIGHT = "preflight"


def default_mode(on_terminal: bool) -> Mode:
    return Mode.INTERACTIVE if on_terminal else Mode.AUTOPILOT


class StartMode(NamedTuple):
    """The mode a new session runs in, and whether it was chosen (`acode run --mode`)
    rather than taken by default: both are recorded, and only a chosen one is its
    resume's default."""

    mode: Mode
    chosen: bool


def start_mode(given: Mode | None, on_terminal: bool) -> StartMode:
    return StartMode(mode=given or default_mode(on_terminal), chosen=given is not None)


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


def candidates(store: EventStore, now_us: int) -> list[Candidate]:
    """The sessions `acode resume` can continue, most recent first, with their age."""
    return [
        Candidate(row=row, age=judge_age(max(0, now_us - row.updated_at) // 1_000_000))
        for row in resumable_sessions(store)
        if row.kind in ("plan", "agent")  # the library's sessions resume in their program
    ]


AUTOPILOT_MAX_AGE_S = 24 * 3600  # autopilot resumes on its own under a day (docs/resume.md)


@dataclass(frozen=True)
class AutopilotVerdict:
    """Whether autopilot may resume on its own, and why (it is logged either way)."""

    safe: bool
    too_old: bool
    conflicts: tuple[str, ...]  # changed files, changed configuration
    reasons: tuple[str, ...]  # what was found, in words, the age first: why it is safe or not

    @property
    def problems(self) -> tuple[str, ...]:
        """Why it is not safe."""
        return (*self.reasons[:1], *self.conflicts) if self.too_old else self.conflicts


def judge_for_autopilot(
    preview: ResumePreview, *, any_age: bool, continue_on_changes: bool, force: bool
) -> AutopilotVerdict:
    """Safe: interrupted under 24 hours ago (or ``any_age``), no blocking change to the
    files the session touched (or ``continue_on_changes``), the configuration unchanged
    (or ``force``).
    What those flags waive a person decided on the command line."""
    seconds = preview.interrupted_s or 0
    age = judge_age(seconds)
    too_old = seconds >= AUTOPILOT_MAX_AGE_S and not any_age
    reasons = [
        f"interrupted {ago_text(seconds)} ({age.age.value}"
        + (", under 24 hours)" if seconds < AUTOPILOT_MAX_AGE_S else ", 24 hours or more)")
        + (" (--any-age)" if any_age and seconds >= AUTOPILOT_MAX_AGE_S else "")
    ]
    conflicts: list[str] = []
    env = preview.environment
    if env is None:
        reasons.append("environment validation off")
    else:
        # A change only completed steps saw cannot alter the rest: it informs, never stops.
        informing = [c for c in env.changed if not c.blocking]
        if env.blocking:
            what = f"{len(env.blocking)} changed file(s): {_listed(env.blocking)}"
            if continue_on_changes:
                reasons.append(f"{what} (kept: the command line says go on)")
            else:
                conflicts.append(what)
        elif not informing:
            reasons.append(f"{env.files_checked} file(s) the session touched unchanged")
        if informing:
            reasons.append(
                f"{len(informing)} changed file(s) no step still to run touches: "
                f"{_listed(informing)} (informational)"
            )
        if env.config:
            what = "configuration changed: " + ", ".join(c.key for c in env.config)
            if force:
                reasons.append(f"{what} (--force)")
            else:
                conflicts.append(what)
        else:
            reasons.append("configuration unchanged")
    return AutopilotVerdict(
        safe=not too_old and not conflicts,
        too_old=too_old,
        conflicts=tuple(conflicts),
        reasons=(*reasons, *conflicts),
    )


def _listed(changes: Sequence[ChangedFile]) -> str:
    shown = ", ".join(c.path for c in changes[:5])
    return shown + (f" and {len(changes) - 5} more" if len(changes) > 5 else "")


def log_autopilot(
    workspace: Path, preview: ResumePreview, verdict: AutopilotVerdict, decision: str
) -> None:
    """The decision in `.agent/state/logs/acode.jsonl`: "resume" (and why that was
    safe), "interactive" (handed over to a person) or "stopped"."""
    log_event(
        StatePaths(workspace),
        "autopilot_decision",
        session_id=preview.row.id,
        decision=decision,
        safe=verdict.safe,
        interrupted_seconds=preview.interrupted_s,
        too_old=verdict.too_old,
        conflicts=list(verdict.conflicts),
        reasons=list(verdict.reasons),
    )
