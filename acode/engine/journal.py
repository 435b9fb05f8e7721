"""The journal of one session: builds chained events, folds them, writes commits.

It is the only writer of a session's events. It keeps the chain head, the last
stamp and the folded summary in memory, so appending an event costs no read.
Loading a journal verifies the newest valid signed checkpoint and the chain of
the events after it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from acode.domain.chain import CHAIN_VERSION
from acode.domain.events import Event, EventType, canonical_json
from acode.domain.frozen import build
from acode.domain.ids import SHORT_ID_LENGTH, EventStamp, next_event_stamp
from acode.domain.reducer import (
    STEP_EVENT_TYPES,
    SessionSummary,
    StepRecord,
    StepStatus,
    decode_summary,
    fold,
    fold_all,
    fold_completed,
    fold_step,
    step_record,
    step_status,
)
from acode.domain.states import SessionState
from acode.engine.history import History, key_changed_error, messages_digest
from acode.errors import CheckpointError, ErrorCode
from acode.security.signing import Signer
from acode.store.base import EventStore
from acode.store.records import CheckpointRow, Commit, FileRow, MessageRow, SessionRow
from acode.system.clock import Clock, SystemClock

__all__ = [
    "Journal",
    "checkpoint_message",
    "new_session_journal",
    "stored_summary",
    "verify_history",
]

# A checkpoint writes its summary out when the newest one this journal wrote is this many
# events old, and at the journal's first checkpoint; the others leave it out, about a
# tenth of a step's bytes, and readers fold it back from the newest one written
# (the store derives it, see EventStore.checkpoints), at most this many events.
SUMMARY_EVERY = 32


def checkpoint_message(session_id: str, title: str, cp: CheckpointRow) -> bytes:
    """The bytes a checkpoint's signature covers: everything in it but the signature."""
    if cp.summary.startswith("{"):
        # Version 1 (written before schema 4): the summary holds the title itself.
        return (
            f"acode-checkpoint:v1\n{session_id}\n{cp.id}\n{cp.seq}\n{cp.head.hex()}\n"
            f"{cp.created_at}\n{cp.summary}"
        ).encode()
    return _v2_message(_v2_prefix(session_id, title), cp.seq, cp.head, cp.created_at, cp.summary)


def _v2_prefix(session_id: str, title: str) -> str:
    # Version 2: the summary leaves the title to the session row, so the signature covers
    # it here, length-prefixed; the id is the seq.
    return f"acode-checkpoint:v2\n{session_id}\n{len(title)}:{title}\n"


def _v2_message(prefix: str, seq: int, head: bytes, created_at: int, summary: str) -> bytes:
    # The summary (JSON, any characters) comes last: unambiguous.
    return f"{prefix}{seq}\n{head.hex()}\n{created_at}\n{summary}".encode()


class _Tail(NamedTuple):
    """What the next event chains onto."""

    stamp: EventStamp | None
    hash: bytes
    seq: int


class Journal:
    def __init__(
        self,
        store: EventStore,
        row: SessionRow,
        summary: SessionSummary | None,
        tail: _Tail,
        checkpoint_id: int,
        clock: Clock,
        signer: Signer,
        unledgered: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.row = row
        self.summary = summary
        self._tail = tail
        self.checkpoint_id = checkpoint_id
        self._clock = clock
        self._signer = signer
        self._chain = signer.chain_key(row.id)
        # What the engine reads of the history, each event checked as it is read.
        self.history = History(
            store, row, self._chain, key_changed=row.key_id not in (None, signer.key_id)
        )
        self._message_count: int | None = None
        self._message_prefix = _v2_prefix(row.id, row.title)
        self._summary_seq: int | None = None  # where this journal last wrote a summary out
        # The step ids of the events since the newest summary written out, which the step
        # id ledger does not hold yet: the next commit that writes a summary adds them.
        self._unledgered = list(unledgered)
        # Called after every commit; the sync worker's wake-up when a remote is set.
        self.on_write: Callable[[], None] | None = None

    @property
    def session_id(self) -> str:
        return self.row.id

    @property
    def short_id(self) -> str:
        """How people see this session: its shortest unique id prefix."""
        if not self.row.short_id:
            return self.store.short_id(self.row.id)
        return self.row.short_id

    @property
    def unledgered_step_ids(self) -> frozenset[str]:
        """The step ids the store's ledger does not hold yet (``EventStore.has_step_id``)."""
        return frozenset(self._unledgered)

    @property
    def state(self) -> SessionState:
        assert self.summary is not None
        return self.summary.state

    def build(
        self, entries: Sequence[tuple[EventType, dict[str, Any]]]
    ) -> tuple[list[Event], _Tail]:
        """Chained events for ``entries``, and the tail they leave; nothing changes until
        ``write`` commits them."""
        events: list[Event] = []
        tail = self._tail
        stamp, previous, seq = tail.stamp, tail.hash, tail.seq
        for type_, payload in entries:
            seq += 1
            stamp, payload_json, previous = self._link(stamp, previous, seq, type_, payload)
            # Built by acode.domain.frozen, with the payload the fold reads in place of
            # parsing it back.
            event = build(
                Event,
                session_id=self.row.id,
                seq=seq,
                event_id=stamp.event_id,
                ts_us=stamp.ts_us,
                type=type_,
                payload_json=payload_json,
                hash=previous,
                payload=payload,
            )
            events.append(event)
        return events, _Tail(stamp=stamp, hash=previous, seq=seq)

    def _link(
        self,
        stamp: EventStamp | None,
        previous: bytes,
        seq: int,
        type_: EventType,
        payload: dict[str, Any],
    ) -> tuple[EventStamp, str, bytes]:
        """The stamp, payload text and chain hash of event ``seq``, after ``stamp`` and
        ``previous``."""
        stamp = next_event_stamp(stamp, self._clock.now_us(), self._clock.random_bytes(10))
        payload_json = canonical_json(payload)
        # The type as it is, a StrEnum: formatted, it is its value.
        return (
            stamp,
            payload_json,
            self._chain.link(previous, seq, stamp.event_id, stamp.ts_us, type_, payload_json),
        )

    def write(
        self,
        entries: Sequence[tuple[EventType, dict[str, Any]]],
        *,
        steps: Sequence[StepRecord] = (),
        messages: Sequence[tuple[str, dict[str, Any]]] = (),
        blobs: Sequence[tuple[str, bytes]] = (),
        files: Sequence[FileRow] = (),
        checkpoint: bool = True,
        archive: bool = False,
    ) -> list[Event]:
        """Append events (and what they project to) in one transaction. Each step row
        is pointed at the newest event of the write about its step, whose sequence
        number is only known here. The last event records a digest of ``messages``,
        which authenticates them when a conversation is read back (History.messages)."""
        if self.history.refused is not None:
            raise self.history.refused
        message_rows = self._message_rows(messages, self._tail.seq + len(entries))
        if message_rows:
            type_, payload = entries[-1]
            entries = [
                *entries[:-1],
                (type_, {**payload, "messages": messages_digest(message_rows)}),
            ]
        events, tail = self.build(entries)
        summary = self.summary
        for event in events:
            summary = fold(summary, event)
        assert summary is not None
        last = events[-1]
        now = last.ts_us
        cp = self._checkpoint(summary, last, now) if checkpoint else None
        rows = [_resolve(s, events) for s in steps]
        assert self.summary is not None
        changed = summary.state is not self.summary.state
        written = cp is not None and self._summary_due(last.seq)
        step_ids = _step_ids(entries)
        self.store.commit(
            self.row.sid,
            Commit(
                events=events,
                updated_at=now,
                state=summary.state.value if changed else None,
                steps=rows,
                checkpoint=cp,
                summary_written=written,
                step_ids=[*self._unledgered, *step_ids] if written else (),
                messages=message_rows,
                blobs=blobs,
                files=files,
                archive=archive,
            ),
        )
        if messages:
            self._message_count = (self._message_count or 0) + len(messages)
        self._committed(summary, tail, cp is not None, written, step_ids)
        return events

    def write_completion(self, payload: dict[str, Any]) -> None:
        """``write([(EventType.STEP_COMPLETED, payload)])`` for a step whose completion is
        its only record. Most steps of a session are one: they take the shortest way to
        the same row, but for the one in SUMMARY_EVERY whose commit writes the summary
        and the step id ledger out, which ``write`` makes."""
        tail = self._tail
        seq = tail.seq + 1
        if self._summary_due(seq) or self.history.refused is not None:
            self.write([(EventType.STEP_COMPLETED, payload)])
            return
        type_ = EventType.STEP_COMPLETED
        stamp, payload_json, head = self._link(tail.stamp, tail.hash, seq, type_, payload)
        assert self.summary is not None
        summary = fold_completed(self.summary, seq, payload)
        tag = self._sign(summary.encode(), seq, head, stamp.ts_us)
        self.store.append_completion(
            self.row.sid, seq, stamp.event_id, stamp.ts_us, payload_json, head, tag
        )
        self._committed(
            summary, _Tail(stamp=stamp, hash=head, seq=seq), True, False, [payload["step"]]
        )

    def unfinished_steps(self) -> list[StepRecord]:
        """The steps that did not complete (in progress, rolled back, failed), from their
        `steps` rows, each held to its event, and as many as the signed summary counts:
        a row taken out cannot hide a step, an approval among them, from a reader."""
        summary = self.summary
        assert summary is not None
        rows = self.store.unfinished_steps(self.row.sid)
        for row in rows:
            event = self.history.event(row.event_seq)
            status = step_status(event.type)
            if status is None or step_record(status, event.seq, event.payload) != row:
                raise _tampered(
                    self.row, f"the steps table's row of step {row.step_id!r} is not its record"
                )
        still = sum(1 for r in rows if r.status is not StepStatus.FAILED)
        unfinished = summary.next_position - summary.steps_completed - summary.steps_failed
        if still != unfinished:
            raise _tampered(
                self.row,
                f"its signed state counts {unfinished} unfinished step(s), the steps table {still}",
            )
        return rows

    def _summary_due(self, seq: int) -> bool:
        """Whether a checkpoint at event ``seq`` writes its summary out."""
        return self._summary_seq is None or seq - self._summary_seq >= SUMMARY_EVERY

    def _committed(
        self,
        summary: SessionSummary,
        tail: _Tail,
        checkpoint: bool,
        written: bool,
        step_ids: list[str],
    ) -> None:
        """Take on what a commit that ended at ``tail`` wrote."""
        self.summary = summary
        self._tail = tail
        if checkpoint:
            self.checkpoint_id = tail.seq
        if written:
            self._summary_seq = tail.seq
            self._unledgered.clear()
        else:
            self._unledgered.extend(step_ids)
        if self.on_write is not None:
            self.on_write()

    def _message_rows(
        self, messages: Sequence[tuple[str, dict[str, Any]]], seq: int
    ) -> list[MessageRow]:
        if not messages:
            return []
        if self._message_count is None:
            self._message_count = len(self.store.messages(self.row.sid))
        start = self._message_count
        return [
            MessageRow(idx=start + i, role=role, content=canonical_json(content), seq=seq)
            for i, (role, content) in enumerate(messages)
        ]

    def _checkpoint(self, summary: SessionSummary, last: Event, now: int) -> CheckpointRow:
        text = summary.encode()
        tag = self._sign(text, last.seq, last.hash, now).hex()
        return CheckpointRow(
            id=last.seq, seq=last.seq, summary=text, head=last.hash, signature=tag, created_at=now
        )

    def _sign(self, summary_text: str, seq: int, head: bytes, now: int) -> bytes:
        """The tag of the checkpoint at event ``seq`` (``checkpoint_message``)."""
        return self._signer.tag(_v2_message(self._message_prefix, seq, head, now, summary_text))

    # -- loading -------------------------------------------------------------------

    @classmethod
    def load(cls, store: EventStore, row: SessionRow, clock: Clock, signer: Signer) -> Journal:
        """The journal as of the session's newest checkpoint, plus the events after it.
        The checkpoint's signature must verify and its event must hold its link, and so
        must every event after it: a checkpoint that does not verify is the database
        edited (or another key), never passed over for an older one. A session recorded
        before chains were keyed is chained again under the key first (rechain)."""
        if row.chain != CHAIN_VERSION:
            from acode.engine.rechain import rechain

            row = rechain(store, row, signer)
        if row.key_id not in (None, signer.key_id):
            raise key_changed_error(row)
        cp = store.newest_checkpoint(row)
        if cp is None:
            raise CheckpointError(
                f"session {_name(row)} has no checkpoint: it cannot be verified",
                hint="the database was edited or damaged; its history is kept unchanged for "
                f"inspection (`acode session history {_name(row)}`)",
                code=ErrorCode.CHECKPOINT_NOT_FOUND,
            )
        if not signer.verify(checkpoint_message(row.id, row.title, cp), cp.signature):
            raise _tampered(row, f"its newest checkpoint (event {cp.seq}) is not signed by the key")
        journal = cls(store, row, None, _Tail(stamp=None, hash=b"", seq=0), cp.id, clock, signer)
        anchor = journal.history.event(cp.seq)
        if anchor.hash != cp.head:
            raise _tampered(row, f"event {cp.seq} is not the event its checkpoint was signed over")
        try:
            summary = decode_summary(cp.summary, title=row.title, seq=cp.seq)
        except (ValueError, TypeError, KeyError):
            # Signed yet unreadable: written by a newer acode, or a bug; not trusted.
            raise _tampered(
                row, f"the summary of its checkpoint (event {cp.seq}) is unreadable"
            ) from None
        tail = _Tail(
            stamp=EventStamp(ts_us=anchor.ts_us, event_id=anchor.event_id),
            hash=anchor.hash,
            seq=anchor.seq,
        )
        for event in journal.history.events(after=cp.seq):
            _check_order(row, tail, event)
            summary = fold(summary, event)
            tail = _Tail(
                stamp=EventStamp(ts_us=event.ts_us, event_id=event.event_id),
                hash=event.hash,
                seq=event.seq,
            )
        journal.summary, journal._tail = summary, tail
        journal._unledgered = store.unledgered_step_ids(row)
        return journal


def verify_history(store: EventStore, row: SessionRow, signer: Signer) -> SessionSummary:
    """Fold the whole history from the first event, checking every link of the chain,
    the newest checkpoints, the messages and the rows of the `steps` table; the first
    divergence is reported as non-determinism, never papered over."""
    journal = Journal.load(store, row, SystemClock(), signer)
    row = journal.row
    checkpoints = {}
    for kept in store.checkpoints(row):
        if not signer.verify(checkpoint_message(row.id, row.title, kept), kept.signature):
            raise _tampered(
                row, f"checkpoint {kept.id} (event {kept.seq}) is not signed by the key"
            )
        checkpoints[kept.seq] = kept
    tail = _Tail(stamp=None, hash=b"", seq=0)
    summary: SessionSummary | None = None
    steps: dict[int, StepRecord] = {}
    # A step needs a row unless its completion is its only event (StepExecutor._finish).
    needs_row: set[int] = set()
    for event in journal.history.events():
        _check_order(row, tail, event)
        tail = _Tail(
            stamp=EventStamp(ts_us=event.ts_us, event_id=event.event_id),
            hash=event.hash,
            seq=event.seq,
        )
        summary = fold(summary, event)
        earlier = steps.get(event.payload.get("position", -1))
        projected = fold_step(earlier, event)
        if projected is not None:
            steps[projected.position] = projected
            if earlier is not None or event.type is not EventType.STEP_COMPLETED:
                needs_row.add(projected.position)
        cp = checkpoints.get(event.seq)
        if cp is not None and stored_summary(summary, cp.summary) != cp.summary:
            raise _diverged(row, event, f"checkpoint {cp.id} recorded a different state")
    if summary is None:
        raise CheckpointError(
            f"session {row.short_id} has no events", code=ErrorCode.CHECKPOINT_NOT_FOUND
        )
    journal.history.messages()
    recorded_rows = store.step_rows(row.sid)
    missing = sorted(needs_row - {r.position for r in recorded_rows})
    if missing:
        lost = steps[missing[0]]
        raise _diverged(
            row,
            store.event(row, lost.event_seq),
            f"step {lost.step_id!r} (position {lost.position}) has no row in the steps table",
        )
    for recorded in recorded_rows:
        if steps.get(recorded.position) != recorded:
            raise _diverged(
                row,
                store.event(row, recorded.event_seq),
                f"the steps table says step {recorded.step_id!r} is {recorded.status.value}, "
                "the events say otherwise",
            )
    _verify_ledger(store, row, steps)
    return summary


def _verify_ledger(store: EventStore, row: SessionRow, steps: dict[int, StepRecord]) -> None:
    """The step id ledger holds exactly the ids the events name, but for those of the
    newest events, which it may not hold yet."""
    named = {record.step_id: record for record in steps.values()}
    ledger = store.step_id_ledger(row.sid)
    unknown = sorted(ledger - named.keys())
    if unknown:
        raise CheckpointError(
            f"session {row.short_id}: the step id ledger holds {unknown[0]!r}, "
            "which no event names",
            hint="the database was edited; the history is kept unchanged (`acode session history`)",
            code=ErrorCode.CHAIN_BROKEN,
        )
    missing = sorted(named.keys() - ledger - set(store.unledgered_step_ids(row)))
    if missing:
        lost = named[missing[0]]
        raise _diverged(
            row,
            store.event(row, lost.event_seq),
            f"step id {lost.step_id!r} (position {lost.position}) is missing from the "
            "step id ledger, so a new step could use it again",
        )


def _diverged(row: SessionRow, event: Event, what: str) -> CheckpointError:
    return CheckpointError(
        f"session {row.short_id}: replaying the history diverges at event {event.seq} "
        f"({event.type.value}): {what}",
        hint="the database was edited or acode has a bug; the history is kept unchanged "
        "(`acode session history`); please report it",
        code=ErrorCode.CHAIN_BROKEN,
    )


def _name(row: SessionRow) -> str:
    return row.short_id or row.id[:SHORT_ID_LENGTH]


def _tampered(row: SessionRow, what: str) -> CheckpointError:
    return CheckpointError(
        f"session {_name(row)} cannot be trusted: {what}: the database was edited or damaged",
        hint="refusing to use it; its history is kept unchanged for inspection "
        f"(`acode session history {_name(row)}`); start a new session to continue",
        code=ErrorCode.CHECKPOINT_INVALID,
    )


def _check_order(row: SessionRow, tail: _Tail, event: Event) -> None:
    """Events follow each other by number and by (timestamp, event_id) alike."""
    if event.seq != tail.seq + 1:
        raise CheckpointError(
            f"session {_name(row)}: event {event.seq} follows event {tail.seq}: the history "
            "has a gap: the database was edited",
            hint="the history is kept unchanged for inspection (`acode session history`)",
            code=ErrorCode.CHAIN_BROKEN,
        )
    if tail.stamp is not None and (event.ts_us, event.event_id) <= (
        tail.stamp.ts_us,
        tail.stamp.event_id,
    ):
        raise CheckpointError(
            f"session {_name(row)}: event {event.seq} is ordered before event "
            f"{tail.seq} by (timestamp, event_id); the replay order is not deterministic",
            code=ErrorCode.CHAIN_BROKEN,
        )


def stored_summary(summary: SessionSummary, stored: str) -> str:
    """``summary`` as a checkpoint that stored ``stored`` would store it, in the version
    it was written in."""
    if stored.startswith("{"):
        return canonical_json(summary.to_dict())
    return summary.encode()


def _step_ids(entries: Sequence[tuple[EventType, dict[str, Any]]]) -> list[str]:
    return [payload["step"] for type_, payload in entries if type_ in STEP_EVENT_TYPES]


def _resolve(step: StepRecord, events: list[Event]) -> StepRecord:
    """Point a step row at the newest event of this write about that step."""
    for event in reversed(events):
        p = event.payload
        if p.get("step") == step.step_id and p.get("position") == step.position:
            return StepRecord(
                position=step.position,
                step_id=step.step_id,
                kind=step.kind,
                status=step.status,
                attempt=step.attempt,
                task_id=step.task_id,
                input_hash=step.input_hash,
                event_seq=event.seq,
            )
    raise AssertionError(f"no event of this write is about step {step.step_id!r}")


def new_session_journal(
    store: EventStore,
    *,
    session_id: str,
    title: str,
    workspace: str,
    kind: str,
    config_json: str,
    config_hash: str,
    parent_id: str | None,
    entries: Sequence[tuple[EventType, dict[str, Any]]],
    clock: Clock,
    signer: Signer,
) -> Journal:
    """Create a session row with its first events and first checkpoint, atomically."""
    placeholder = SessionRow(
        sid=0,
        id=session_id,
        title=title,
        state="",
        workspace=workspace,
        parent_id=parent_id,
        kind=kind,
        config=config_json,
        config_hash=config_hash,
        created_at=0,
        updated_at=0,
        current_task=None,
        current_step=None,
        archived=False,
        chain=CHAIN_VERSION,
        key_id=signer.key_id,
    )
    journal = Journal(
        store, placeholder, None, _Tail(stamp=None, hash=b"", seq=0), 0, clock, signer
    )
    journal._tail = _Tail(stamp=None, hash=journal.history.chain.genesis, seq=0)
    events, tail = journal.build(entries)
    summary = fold_all(events)
    last = events[-1]
    cp = journal._checkpoint(summary, last, last.ts_us)
    row = store.create_session(
        session_id=session_id,
        title=title,
        workspace=workspace,
        kind=kind,
        config_json=config_json,
        config_hash=config_hash,
        parent_id=parent_id,
        created_at=events[0].ts_us,
        key_id=signer.key_id,
        first=Commit(
            events=events,
            state=summary.state.value,
            updated_at=last.ts_us,
            checkpoint=cp,
            step_ids=_step_ids(entries),
        ),
    )
    return Journal(store, row, summary, tail, cp.id, clock, signer)
