"""The positions a session's step calls take: the next one, the step ids used so far,
and what the history recorded at a position (asked of the replay cursor)."""

from __future__ import annotations

from acode.domain.idempotency import STEP_ID_PATTERN
from acode.domain.kinds import StepKind
from acode.domain.reducer import StepRecord, StepStatus
from acode.engine.journal import Journal
from acode.engine.replay import NO_INPUT, ReplayCursor
from acode.errors import CheckpointError, ErrorCode, NonDeterminismError, UsageError

__all__ = ["StepPositions"]

# A seek in the step id ledger costs about as much as reading this many of its ids
# (docs/benchmarks.md, "Figures behind design choices").
_IDS_PER_SEEK = 5


def _seeks_before_reading(recorded: int) -> int:
    return recorded // _IDS_PER_SEEK


class StepPositions:
    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        summary = journal.summary
        assert summary is not None
        # Positions below this may have records; a fresh session never looks.
        self.recorded_until = summary.next_position
        self.replay = ReplayCursor(journal.history, self.recorded_until, self._edited)
        self.position = 0
        self.seen_ids: set[str] = set()
        # Set by skip_completed: the session whose step id ledger holds the skipped ids,
        # and how many new ids may still be looked up there one seek at a time.
        self._ledger_sid: int | None = None
        self._ledger_seeks_left = 0

    def skip_completed(self) -> int:
        """``Session.skip_completed``."""
        if self.position:
            raise UsageError(
                f"session {self._journal.short_id}: skip_completed() comes before the first "
                "step call"
            )
        unsettled = [
            r.step_id
            for r in self._journal.unfinished_steps()
            if r.status in (StepStatus.IN_PROGRESS, StepStatus.ROLLED_BACK)
        ]
        if unsettled:
            name = self._journal.short_id
            raise UsageError(
                f"session {name} has unfinished steps ({', '.join(unsettled)}); "
                "they cannot be skipped",
                hint="call the steps from the first one: completed steps return their "
                f"recorded results and acode settles the others (or: acode resume {name})",
            )
        # No step id may be used twice: a new one is looked up in the step id ledger,
        # one seek, and among the few recorded ids the ledger does not hold yet.
        self.seen_ids = set(self._journal.unledgered_step_ids)
        self._ledger_sid = self._journal.row.sid
        self._ledger_seeks_left = _seeks_before_reading(self.recorded_until)
        self.position = self.recorded_until
        return self.position

    def check_id(self, step_id: str) -> None:
        """Refuse an id that is not one, or that the session used before."""
        if not STEP_ID_PATTERN.fullmatch(step_id):
            raise UsageError(
                f"invalid step id {step_id!r}",
                hint="use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
            )
        if step_id in self.seen_ids or (self._ledger_sid is not None and self._in_ledger(step_id)):
            raise NonDeterminismError(
                f"step id {step_id!r} is used twice in session {self._journal.short_id}",
                hint="every step of a session needs its own id",
            )

    def _in_ledger(self, step_id: str) -> bool:
        """Whether the ledger of the skipped steps holds ``step_id``. A seek each, until
        the seeks have cost what reading the whole ledger once does: from then on its
        ids are in memory, so a long run after skip_completed() pays at most twice the
        cheaper of the two, and its steps cost what a fresh session's do (NFR-004,
        docs/requirements.md)."""
        assert self._ledger_sid is not None
        if self._ledger_seeks_left > 0:
            self._ledger_seeks_left -= 1
            return self._journal.store.has_step_id(self._ledger_sid, step_id)
        self.seen_ids |= self._journal.store.step_id_ledger(self._ledger_sid)
        self._ledger_sid = None
        return step_id in self.seen_ids

    def recorded(self, step_id: str, kind: StepKind, input_hash: str) -> StepRecord | None:
        """The record at the next position, if any, once the call is found to be the one
        recorded there; the position is not taken yet."""
        self.check_id(step_id)
        position = self.position
        # Calls take positions in order, so by the time a call reaches a position past
        # the recorded ones, every recorded id has been claimed again in seen_ids.
        record = self.replay.record(position)
        if record is not None and (
            record.step_id != step_id
            or record.kind != kind.value
            or (record.input_hash or NO_INPUT) != input_hash
        ):
            raise NonDeterminismError(
                f"session {self._journal.short_id}, position {position}: recorded step "
                f"{record.step_id!r} ({record.kind}), now called as {step_id!r} ({kind.value})"
                + (
                    ""
                    if record.step_id != step_id or record.kind != kind.value
                    else " with a different input"
                ),
                hint="the code or plan changed since the session was recorded; restore it, "
                "or start a new session",
            )
        return record

    def _edited(self, what: str, hint: str | None = None) -> CheckpointError:
        return CheckpointError(
            f"session {self._journal.short_id}: {what}: the database was edited",
            hint=hint or "inspect with `acode resume --verify`",
            code=ErrorCode.CHAIN_BROKEN,
        )
