"""The reducer: ``fold(summary, event)`` is the only way session state is derived.

The running session folds each event it appends; a checkpoint stores the result;
``verify`` folds the whole history again and must arrive at the same place.
The summary is O(1) in size: it never holds the history, only counters and the
position of the work. Per-step records are folded separately (``fold_step``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum
from json.encoder import encode_basestring
from typing import Any

from acode.domain.events import Event, EventType
from acode.domain.frozen import evolve
from acode.domain.ids import SHORT_ID_LENGTH
from acode.domain.states import SessionState, can_transition
from acode.errors import CheckpointError, ErrorCode

__all__ = [
    "DEFAULT_STEP_KIND",
    "FIRST_ATTEMPT",
    "STEP_EVENT_TYPES",
    "SUMMARY_VERSION",
    "SessionSummary",
    "StepRecord",
    "StepStatus",
    "decode_summary",
    "fold",
    "fold_all",
    "fold_completed",
    "fold_step",
    "payload_digest",
    "step_record",
    "step_status",
]

# 1: a JSON object of every field (checkpoints written before schema 4).
# 2: a JSON array: the version, then the fields in _COMPACT order, without the title
#    and the sequence number (the session and the checkpoint's own row hold them) and
#    without the trailing fields that have their default value. It is written with
#    every step, so each byte is paid once per step: the fields most often set first.
SUMMARY_VERSION = 2
# The fields in the order stored, each with its default as JSON (state has none). The
# round trip through ``encode`` and ``decode_summary`` is tested for any summary.
_COMPACT = (
    "state",
    "steps_completed",
    "next_position",
    "current_step",
    "reason",
    "current_task",
    "total_steps",
    "plan_hash",
    "resumes",
    "steps_failed",
    "resume_state",
    "pending_approval",
    "discarded",
)
_DEFAULTS = (
    "", "0", "0", "null", "null", "null", "null", "null", "0", "0", "null", "null", "false"
)  # fmt: skip
# The text of trailing fields all at their defaults, longest first, for ``_cut``: of
# every field past the state, of those past the current step, and of the first three.
_DEFAULT_TAILS = tuple("," + ",".join(_DEFAULTS[i:]) for i in range(1, len(_DEFAULTS)))
_REST_TAILS = _DEFAULT_TAILS[3:]
_HEAD_TAILS = tuple("," + ",".join(_DEFAULTS[i:4]) for i in range(1, 4))


def _cut(text: str, tails: tuple[str, ...]) -> str:
    """``text`` without the first of ``tails`` it ends with. Each tail starts at a comma
    between fields and holds no quote, so it can only match whole fields."""
    for tail in tails:
        if text.endswith(tail):
            return text[: -len(tail)]
    return text


def _text(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


def _number(value: int | None) -> str:
    return "null" if value is None else str(int(value))


class StepStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"
    SKIPPED = "skipped"


# Without slots: every step folds a new one, made by ``evolve`` (acode.domain.frozen).
@dataclass(frozen=True)
class SessionSummary:
    """The state a checkpoint signs: every event folded, in a few fields."""

    title: str
    state: SessionState
    seq: int = 0
    resume_state: SessionState | None = None
    total_steps: int | None = None
    steps_completed: int = 0
    steps_failed: int = 0
    next_position: int = 0
    current_task: str | None = None
    current_step: str | None = None
    pending_approval: str | None = None
    resumes: int = 0
    reason: str | None = None
    discarded: bool = False
    plan_hash: str | None = None  # binds the recorded plan to the signed checkpoints

    def to_dict(self) -> dict[str, Any]:
        """Every field (version 1): exports, and checkpoints written before schema 4."""
        return {
            "v": 1,
            "title": self.title,
            "state": self.state.value,
            "seq": self.seq,
            "resume_state": self.resume_state.value if self.resume_state else None,
            "total_steps": self.total_steps,
            "steps_completed": self.steps_completed,
            "steps_failed": self.steps_failed,
            "next_position": self.next_position,
            "current_task": self.current_task,
            "current_step": self.current_step,
            "pending_approval": self.pending_approval,
            "resumes": self.resumes,
            "reason": self.reason,
            "discarded": self.discarded,
            "plan_hash": self.plan_hash,
        }

    def encode(self) -> str:
        """The summary as a checkpoint stores it (version 2); ``decode_summary`` reverses it."""
        # Written by hand: this runs for every step, and the JSON encoder takes several
        # times as long for a list this small. The fields past the current step seldom
        # change: their text is kept with the values it was made from, in the instance
        # (as a cached_property would), and ``evolve`` hands it on to the next summary,
        # which uses it while the values are the same.
        rest = (
            self.reason,
            self.current_task,
            self.total_steps,
            self.plan_hash,
            self.resumes,
            self.steps_failed,
            self.resume_state,
            self.pending_approval,
            self.discarded,
        )
        known = self.__dict__.get("_rest_text")
        if known is None or known[0] != rest:
            known = self.__dict__["_rest_text"] = (rest, _rest_text(self))
        text = (
            f'[{SUMMARY_VERSION},"{self.state}",{self.steps_completed},{self.next_position},'
            f"{_text(self.current_step)}{known[1]}"
        )
        if not known[1]:
            text = _cut(text, _HEAD_TAILS)
        return f"{text}]"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionSummary:
        fields = {k: v for k, v in data.items() if k != "v"}
        fields["state"] = SessionState(fields["state"])
        if fields.get("resume_state"):
            fields["resume_state"] = SessionState(fields["resume_state"])
        return cls(**fields)


def _rest_text(s: SessionSummary) -> str:
    """The text of the fields past the current step, the trailing defaults cut."""
    text = (
        f",{_text(s.reason)},{_text(s.current_task)},{_number(s.total_steps)},"
        f"{_text(s.plan_hash)},{s.resumes},{s.steps_failed},{_text(s.resume_state)},"
        f"{_text(s.pending_approval)},{'true' if s.discarded else 'false'}"
    )
    return _cut(text, _REST_TAILS)


def decode_summary(text: str, *, title: str, seq: int) -> SessionSummary:
    """A stored summary of either version; ``title`` and ``seq`` fill in what version 2
    leaves to the session and the checkpoint. Raises ValueError on anything else."""
    data = json.loads(text)
    if isinstance(data, list):
        if not 2 <= len(data) <= len(_COMPACT) + 1 or data[0] != SUMMARY_VERSION:
            raise ValueError("not a version 2 session summary")
        # Fields left out had their defaults, which are the dataclass's own.
        fields = dict(zip(_COMPACT, data[1:], strict=False))
        fields["title"], fields["seq"] = title, seq
        return SessionSummary.from_dict(fields)
    if isinstance(data, dict) and data.get("v") == 1:
        return SessionSummary.from_dict(data)
    raise ValueError("not a session summary")


def payload_digest(payload_json: str) -> str:
    return hashlib.sha256(payload_json.encode()).hexdigest()[:32]


def _corrupt(event: Event, problem: str) -> CheckpointError:
    return CheckpointError(
        f"session {event.session_id[:SHORT_ID_LENGTH]}: "
        f"event {event.seq} ({event.type.value}) {problem}",
        hint="the event log does not replay; run `acode resume --verify` for a full report",
        code=ErrorCode.CHAIN_BROKEN,
    )


_COMPLETED = EventType.STEP_COMPLETED


def fold(summary: SessionSummary | None, event: Event) -> SessionSummary:
    """The summary after ``event``. Raises CheckpointError on an impossible history."""
    p = event.payload
    if summary is None:
        if event.type is not EventType.SESSION_CREATED:
            raise _corrupt(event, "comes before the session was created")
        if event.seq != 1:
            raise _corrupt(event, "starts the history, but the history starts at event 1")
        return SessionSummary(title=p["title"], state=SessionState.CREATED, seq=event.seq)
    if event.seq != summary.seq + 1:
        raise _corrupt(event, f"follows event {summary.seq}: the sequence has a gap")
    s = summary
    if event.type is _COMPLETED:  # most events; ahead of the match, which tries each case
        return fold_completed(s, event.seq, p)
    match event.type:
        case EventType.STATE_CHANGED:
            target = SessionState(p["to"])
            if not can_transition(s.state, target):
                raise _corrupt(event, f"moves {s.state.value} -> {target.value}, not allowed")
            paused_from = s.state if target is SessionState.PAUSED else None
            return evolve(
                s, seq=event.seq, state=target, resume_state=paused_from, reason=p.get("reason")
            )
        case EventType.PLAN_RECORDED:
            return evolve(
                s,
                seq=event.seq,
                total_steps=int(p["total_steps"]),
                plan_hash=payload_digest(event.payload_json),
            )
        case EventType.SESSION_RESUMED:
            return evolve(s, seq=event.seq, resumes=s.resumes + 1)
        case EventType.STEP_STARTED | EventType.STEP_ROLLED_BACK:
            return _at_step(s, event.seq, p)
        case EventType.STEP_COMPLETED:
            return fold_completed(s, event.seq, p)
        case EventType.STEP_FAILED:
            failed = _at_step(s, event.seq, p, steps_failed=s.steps_failed + 1)
            if s.pending_approval == p["step"]:  # an approval the session went on without
                return evolve(failed, pending_approval=None)
            return failed
        case EventType.APPROVAL_REQUESTED:
            return _at_step(s, event.seq, p, pending_approval=p["step"])
        case EventType.APPROVAL_DECIDED:
            return evolve(s, seq=event.seq, pending_approval=None)
        case EventType.SESSION_DISCARDED:
            return evolve(s, seq=event.seq, discarded=True)
        # A name for a point of the history; the commit that holds the work tree there.
        case EventType.CHECKPOINT_MARKED | EventType.WORKTREE_RECORDED:
            return evolve(s, seq=event.seq)
        case EventType.SESSION_CREATED:
            raise _corrupt(event, "creates a session that already exists")


def fold_completed(s: SessionSummary, seq: int, p: dict[str, Any]) -> SessionSummary:
    """``fold`` of the step_completed event ``seq`` after ``s``, with payload ``p``: for a
    writer that has the payload but no Event (``Journal.write_completion``)."""
    return _at_step(s, seq, p, steps_completed=s.steps_completed + 1)


def _at_step(
    s: SessionSummary, seq: int, p: dict[str, Any], **changes: int | str
) -> SessionSummary:
    """The summary after an event about the step ``p`` names, with ``changes`` besides."""
    return evolve(
        s,
        seq=seq,
        next_position=max(s.next_position, int(p["position"]) + 1),
        current_task=p.get("task"),
        current_step=p["step"],
        **changes,
    )


def fold_all(events: list[Event]) -> SessionSummary:
    summary: SessionSummary | None = None
    for event in events:
        summary = fold(summary, event)
    if summary is None:
        raise CheckpointError("the session has no events", code=ErrorCode.CHAIN_BROKEN)
    return summary


@dataclass(frozen=True, slots=True)
class StepRecord:
    """The projection of one step position: what the `steps` table holds."""

    position: int
    step_id: str
    kind: str
    status: StepStatus
    attempt: int
    task_id: str | None = None
    input_hash: str | None = None
    event_seq: int = 0


_STEP_STATUS: dict[str, StepStatus] = {
    EventType.STEP_STARTED: StepStatus.IN_PROGRESS,
    EventType.APPROVAL_REQUESTED: StepStatus.IN_PROGRESS,
    EventType.STEP_COMPLETED: StepStatus.COMPLETED,
    EventType.STEP_FAILED: StepStatus.FAILED,
    EventType.STEP_ROLLED_BACK: StepStatus.ROLLED_BACK,
}


STEP_EVENT_TYPES = frozenset(_STEP_STATUS)


def fold_step(record: StepRecord | None, event: Event) -> StepRecord | None:
    """The record of the step ``event`` is about, after it; None for other events."""
    status = _STEP_STATUS.get(event.type)
    if status is None:
        return record
    return step_record(status, event.seq, event.payload)


# An event about a step leaves out a field at its default (schema 5): most steps are a
# library's first attempt at a python step.
DEFAULT_STEP_KIND = "python"
FIRST_ATTEMPT = 1


def step_record(status: StepStatus, seq: int, p: dict[str, Any]) -> StepRecord:
    """The record a step event of ``status`` with payload ``p`` leaves (``fold_step``)."""
    return StepRecord(
        position=int(p["position"]),
        step_id=p["step"],
        kind=p.get("kind", DEFAULT_STEP_KIND),
        status=status,
        attempt=int(p.get("attempt", FIRST_ATTEMPT)),
        task_id=p.get("task"),
        input_hash=p.get("input_hash"),
        event_seq=seq,
    )


def step_status(event_type: str) -> StepStatus | None:
    """The status a step event of ``event_type`` leaves its step in; None for others."""
    return _STEP_STATUS.get(event_type)
