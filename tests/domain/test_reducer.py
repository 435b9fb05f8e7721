"""The reducer: any valid history folds to one summary, however and how often it is folded,
and an impossible history is refused naming the event that breaks it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections import deque
from dataclasses import replace
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acode.domain.chain import event_hash, genesis_hash
from acode.domain.events import Event, EventType, canonical_json
from acode.domain.frozen import evolve
from acode.domain.idempotency import generate
from acode.domain.ids import EventStamp, next_event_stamp, uuid7
from acode.domain.reducer import (
    _COMPACT,
    SUMMARY_VERSION,
    SessionSummary,
    StepRecord,
    StepStatus,
    decode_summary,
    fold,
    fold_all,
    fold_step,
    payload_digest,
)
from acode.domain.states import SessionState, can_transition, is_terminal
from acode.errors import CheckpointError, ErrorCode

S = SessionState
T = EventType
SESSION = uuid7(1_700_000_000_000, bytes(range(10)))

STEP_TYPES = (
    T.STEP_STARTED,
    T.STEP_COMPLETED,
    T.STEP_FAILED,
    T.STEP_ROLLED_BACK,
    T.APPROVAL_REQUESTED,
)
STATUS_OF = {
    T.STEP_STARTED: StepStatus.IN_PROGRESS,
    T.APPROVAL_REQUESTED: StepStatus.IN_PROGRESS,
    T.STEP_COMPLETED: StepStatus.COMPLETED,
    T.STEP_FAILED: StepStatus.FAILED,
    T.STEP_ROLLED_BACK: StepStatus.ROLLED_BACK,
}


class History:
    """A real event history, built the way the journal builds one: seq from 1, stamps
    from ``next_event_stamp`` and hashes chained from the session's genesis. Other
    domain tests import it."""

    def __init__(
        self,
        session_id: str = SESSION,
        *,
        start_us: int = 1_700_000_000_000_000,
        step_us: int = 250,
    ) -> None:
        self.session_id = session_id
        self.events: list[Event] = []
        self.now_us = start_us
        # Less than a millisecond apart by default, so ids take the same-millisecond path too.
        self.step_us = step_us
        self._stamp: EventStamp | None = None
        self._hash = genesis_hash(session_id)

    def __repr__(self) -> str:
        return f"History({[f'{e.seq}:{e.type.value}' for e in self.events]})"

    def add(self, type_: EventType, payload: dict[str, Any], *, now_us: int | None = None) -> Event:
        """Append an event; ``now_us`` is the clock reading, which may go backwards."""
        if now_us is None:
            now_us = self.now_us
            self.now_us += self.step_us
        seq = len(self.events) + 1
        rand = hashlib.sha256(f"{self.session_id}:{seq}".encode()).digest()[:10]
        stamp = next_event_stamp(self._stamp, now_us, rand)
        payload_json = canonical_json(payload)
        self._hash = event_hash(
            self._hash, seq, stamp.event_id, stamp.ts_us, type_.value, payload_json
        )
        self._stamp = stamp
        event = Event(
            self.session_id, seq, stamp.event_id, stamp.ts_us, type_, payload_json, self._hash
        )
        self.events.append(event)
        return event

    def created(self, title: str = "Add input validation") -> Event:
        return self.add(T.SESSION_CREATED, {"title": title})

    def plan(self, total_steps: int) -> Event:
        plan = {"title": "p", "tasks": [{"id": "t", "title": "t", "steps": []}]}
        return self.add(T.PLAN_RECORDED, {"plan": plan, "total_steps": total_steps})

    def to(self, source: SessionState, target: SessionState, reason: str | None = "") -> Event:
        payload = {"from": source.value, "to": target.value, "reason": reason}
        return self.add(T.STATE_CHANGED, payload)

    def resumed(self) -> Event:
        return self.add(T.SESSION_RESUMED, {"mode": "continue"})

    def step(
        self,
        type_: EventType,
        step_id: str,
        position: int,
        *,
        kind: str = "python",
        attempt: int = 1,
        task: str | None = None,
    ) -> Event:
        payload: dict[str, Any] = {
            "step": step_id,
            "kind": kind,
            "position": position,
            "attempt": attempt,
            "key": generate(self.session_id, step_id, attempt),
            "input_hash": f"sha256:{step_id}",
        }
        if task is not None:
            payload["task"] = task
        return self.add(type_, payload)

    def decided(self, step_id: str, position: int, *, approved: bool = True) -> Event:
        payload = {"step": step_id, "position": position, "approved": approved, "by": "ann"}
        return self.add(T.APPROVAL_DECIDED, payload)


def path_to(target: SessionState) -> list[SessionState]:
    """The shortest walk of allowed transitions from CREATED to ``target``."""
    routes: dict[SessionState, list[SessionState]] = {S.CREATED: [S.CREATED]}
    queue = deque([S.CREATED])
    while queue:
        state = queue.popleft()
        for nxt in S:
            if nxt not in routes and can_transition(state, nxt):
                routes[nxt] = [*routes[state], nxt]
                queue.append(nxt)
    return routes[target]


def history_in(state: SessionState) -> History:
    h = History()
    h.created()
    route = path_to(state)
    for source, target in pairwise(route):
        h.to(source, target)
    return h


def names_event(error: CheckpointError, seq: int) -> bool:
    return re.search(rf"\bevent {seq}\b", str(error)) is not None


Generated = tuple[History, SessionSummary, dict[int, StepStatus]]


@st.composite
def histories(draw: st.DrawFn) -> Generated:
    """A valid history and, computed independently of the reducer, the summary and the
    step statuses it must fold to."""
    h = History(step_us=draw(st.integers(0, 2_000)))
    title = draw(st.text(max_size=20))
    h.created(title)
    want = SessionSummary(title=title, state=S.CREATED, seq=1)
    statuses: dict[int, StepStatus] = {}
    if draw(st.booleans()):
        total = draw(st.integers(0, 50))
        plan_event = h.plan(total)
        want = replace(want, total_steps=total, plan_hash=payload_digest(plan_event.payload_json))
    for _ in range(draw(st.integers(0, 40))):
        if is_terminal(want.state):
            break
        op = draw(st.sampled_from(["state", "resumed", "step", "step", "decided"]))
        if op == "state":
            allowed = [t for t in S if can_transition(want.state, t)]
            live = [t for t in allowed if not is_terminal(t)]
            # Ending is one choice in several, so that histories grow long before they end.
            ends = not live or draw(st.integers(0, 5)) == 0
            target = draw(st.sampled_from(allowed if ends else live))
            reason = draw(st.none() | st.text(max_size=10))
            h.to(want.state, target, reason)
            paused_from = want.state if target is S.PAUSED else None
            want = replace(want, state=target, resume_state=paused_from, reason=reason)
        elif op == "resumed":
            h.resumed()
            want = replace(want, resumes=want.resumes + 1)
        elif op == "decided":
            h.decided("ok", draw(st.integers(0, 6)))
            want = replace(want, pending_approval=None)
        else:
            type_ = draw(st.sampled_from(STEP_TYPES))
            position = draw(st.integers(0, 6))
            task = draw(st.none() | st.sampled_from(["analyze", "implement"]))
            step_id = f"step-{position}"
            h.step(type_, step_id, position, attempt=draw(st.integers(1, 3)), task=task)
            statuses[position] = STATUS_OF[type_]
            want = replace(
                want,
                current_step=step_id,
                current_task=task,
                next_position=max(want.next_position, position + 1),
                steps_completed=want.steps_completed + (type_ is T.STEP_COMPLETED),
                steps_failed=want.steps_failed + (type_ is T.STEP_FAILED),
                pending_approval=step_id
                if type_ is T.APPROVAL_REQUESTED
                # A failed approval step no longer waits (the caller went on without it).
                else None
                if type_ is T.STEP_FAILED and want.pending_approval == step_id
                else want.pending_approval,
            )
    return h, replace(want, seq=len(h.events)), statuses


def via_json(summary: SessionSummary) -> SessionSummary:
    """The summary as a checkpoint stores and reloads it."""
    return SessionSummary.from_dict(json.loads(canonical_json(summary.to_dict())))


# -- any valid history ------------------------------------------------------------------
# Generating a history costs more than checking it, so each property test checks several
# things about the one history it draws.


@settings(max_examples=100, deadline=None)
@given(histories())
def test_a_valid_history_folds_deterministically_to_the_summary_it_describes(
    generated: Generated,
) -> None:
    history, want, _ = generated
    first = fold_all(history.events)
    assert first == want
    assert fold_all(list(history.events)) == first
    assert fold_all(history.events).to_dict() == first.to_dict()


@settings(max_examples=100, deadline=None)
@given(histories())
def test_folding_on_from_any_checkpoint_equals_folding_everything(
    generated: Generated,
) -> None:
    history, _, _ = generated
    whole = fold_all(history.events)
    summary: SessionSummary | None = None
    for cut, event in enumerate(history.events, start=1):
        summary = fold(summary, event)
        assert summary.seq == event.seq
        data = summary.to_dict()
        assert data["v"] == 1
        assert SessionSummary.from_dict(data) == summary
        resumed = via_json(summary)
        assert resumed == summary
        # The form checkpoints store (version 2) leaves out the title and seq.
        stored = summary.encode()
        assert json.loads(stored)[0] == SUMMARY_VERSION
        assert decode_summary(stored, title="other", seq=7).title == "other"
        assert decode_summary(stored, title=summary.title, seq=summary.seq) == summary
        assert decode_summary(canonical_json(data), title="other", seq=0) == summary
        for later in history.events[cut:]:
            resumed = fold(resumed, later)
        assert resumed == whole
    assert summary == whole


@settings(max_examples=100, deadline=None)
@given(histories())
def test_fold_step_tracks_the_status_of_every_position(generated: Generated) -> None:
    history, _, want = generated
    records: dict[int, StepRecord] = {}
    for event in history.events:
        position = event.payload.get("position")
        current = records.get(position) if isinstance(position, int) else None
        record = fold_step(current, event)
        if event.type in STATUS_OF:
            assert record is not None
            assert record.event_seq == event.seq
            records[record.position] = record
        else:
            assert record is current
    assert {pos: rec.status for pos, rec in records.items()} == want


# -- examples ---------------------------------------------------------------------------


def test_a_typical_session_folds_to_its_summary() -> None:
    h = History()
    h.created("Add input validation")
    plan_event = h.plan(3)
    h.to(S.CREATED, S.EXECUTING, "started")
    h.step(T.STEP_COMPLETED, "read-login", 0, kind="read", task="analyze")
    h.step(T.STEP_STARTED, "validator", 1, kind="write", task="implement")
    h.to(S.EXECUTING, S.PAUSED, "interrupted")
    paused = fold_all(h.events)
    assert paused.state is S.PAUSED
    assert paused.resume_state is S.EXECUTING
    assert paused.reason == "interrupted"
    h.resumed()
    h.to(S.PAUSED, S.EXECUTING, "resumed")
    h.step(T.STEP_COMPLETED, "validator", 1, kind="write", task="implement")
    h.step(T.APPROVAL_REQUESTED, "ok", 2, kind="approve", task="implement")
    h.to(S.EXECUTING, S.AWAITING_APPROVAL, "step ok awaits approval")
    assert fold_all(h.events).pending_approval == "ok"
    h.decided("ok", 2)
    h.to(S.AWAITING_APPROVAL, S.EXECUTING, "approval decided")
    h.step(T.STEP_COMPLETED, "ok", 2, kind="approve", task="implement")
    h.to(S.EXECUTING, S.COMPLETED, "all steps done")

    assert fold_all(h.events) == SessionSummary(
        title="Add input validation",
        state=S.COMPLETED,
        seq=len(h.events),
        total_steps=3,
        plan_hash=payload_digest(plan_event.payload_json),
        steps_completed=3,
        next_position=3,
        current_task="implement",
        current_step="ok",
        resumes=1,
        reason="all steps done",
    )


def test_a_failed_step_is_counted() -> None:
    h = history_in(S.EXECUTING)
    h.step(T.STEP_STARTED, "tests", 0, kind="run")
    h.step(T.STEP_FAILED, "tests", 0, kind="run")
    h.to(S.EXECUTING, S.FAILED, "step tests failed")
    summary = fold_all(h.events)
    assert (summary.steps_failed, summary.steps_completed) == (1, 0)
    assert summary.state is S.FAILED


def test_a_step_earlier_in_the_plan_does_not_move_the_next_position_back() -> None:
    h = history_in(S.EXECUTING)
    h.step(T.STEP_COMPLETED, "b", 4)
    h.step(T.STEP_ROLLED_BACK, "a", 1)
    summary = fold_all(h.events)
    assert summary.next_position == 5
    assert summary.current_step == "a"


# -- impossible histories ---------------------------------------------------------------

FORBIDDEN = [(a, b) for a in S for b in S if not can_transition(a, b)]


@pytest.mark.parametrize(
    ("source", "target"), FORBIDDEN, ids=[f"{a.value}->{b.value}" for a, b in FORBIDDEN]
)
def test_a_forbidden_transition_is_refused_naming_its_event(
    source: SessionState, target: SessionState
) -> None:
    h = history_in(source)
    assert fold_all(h.events).state is source
    bad = h.to(source, target)
    with pytest.raises(CheckpointError) as info:
        fold_all(h.events)
    assert names_event(info.value, bad.seq)
    assert f"{source.value} -> {target.value}" in str(info.value)
    assert info.value.code is ErrorCode.CHAIN_BROKEN
    assert SESSION[:8] in str(info.value)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(-3, 1_000).filter(lambda n: n != 1))
def test_a_gap_or_repeat_in_the_sequence_is_refused_naming_its_event(
    length: int, jump: int
) -> None:
    h = history_in(S.EXECUTING)
    for position in range(length):
        h.step(T.STEP_COMPLETED, f"s{position}", position)
    last = h.events[-1]
    following = replace(h.step(T.STEP_COMPLETED, "next", length), seq=last.seq + jump)
    with pytest.raises(CheckpointError) as info:
        fold_all([*h.events[:-1], following])
    assert names_event(info.value, following.seq)
    assert names_event(info.value, last.seq)
    assert "gap" in str(info.value)


def test_a_history_must_start_with_session_created() -> None:
    h = History()
    first = h.to(S.CREATED, S.EXECUTING)
    with pytest.raises(CheckpointError) as info:
        fold_all(h.events)
    assert names_event(info.value, first.seq)
    assert "before the session was created" in str(info.value)


def test_a_second_session_created_is_refused() -> None:
    h = history_in(S.EXECUTING)
    again = h.created("again")
    with pytest.raises(CheckpointError) as info:
        fold_all(h.events)
    assert names_event(info.value, again.seq)


def test_an_empty_history_is_refused() -> None:
    with pytest.raises(CheckpointError) as info:
        fold_all([])
    assert info.value.code is ErrorCode.CHAIN_BROKEN


def test_a_history_that_does_not_start_at_seq_1_is_refused() -> None:
    h = history_in(S.EXECUTING)
    late_start = dataclasses.replace(h.events[0], seq=3)
    with pytest.raises(CheckpointError) as info:
        fold_all([late_start])
    assert names_event(info.value, 3)


# -- fold_step --------------------------------------------------------------------------


@pytest.mark.parametrize("type_", STEP_TYPES, ids=[t.value for t in STEP_TYPES])
def test_fold_step_records_the_step_an_event_is_about(type_: EventType) -> None:
    h = history_in(S.EXECUTING)
    event = h.step(type_, "validator", 3, kind="write", attempt=2, task="implement")
    assert fold_step(None, event) == StepRecord(
        position=3,
        step_id="validator",
        kind="write",
        status=STATUS_OF[type_],
        attempt=2,
        task_id="implement",
        input_hash="sha256:validator",
        event_seq=event.seq,
    )


def test_fold_step_leaves_the_record_alone_for_other_events() -> None:
    h = history_in(S.EXECUTING)
    record = fold_step(None, h.step(T.STEP_STARTED, "s", 0))
    assert record is not None
    others = [h.decided("s", 0), h.resumed(), h.to(S.EXECUTING, S.PAUSED), h.plan(2)]
    for event in [*h.events[:2], *others]:
        assert fold_step(record, event) is record
        assert fold_step(None, event) is None


def test_fold_step_follows_a_retried_step_through_its_attempts() -> None:
    h = history_in(S.EXECUTING)
    seen: list[tuple[StepStatus, int]] = []
    record: StepRecord | None = None
    for type_, attempt in [
        (T.STEP_STARTED, 1),
        (T.STEP_ROLLED_BACK, 1),
        (T.STEP_STARTED, 2),
        (T.STEP_COMPLETED, 2),
    ]:
        record = fold_step(record, h.step(type_, "log", 0, kind="run", attempt=attempt))
        assert record is not None
        seen.append((record.status, record.attempt))
    assert seen == [
        (StepStatus.IN_PROGRESS, 1),
        (StepStatus.ROLLED_BACK, 1),
        (StepStatus.IN_PROGRESS, 2),
        (StepStatus.COMPLETED, 2),
    ]


@given(
    st.text(),
    st.none() | st.text(),
    st.none() | st.integers(0, 2**40),
    st.booleans(),
)
def test_the_stored_summary_is_json_whatever_its_texts(
    text: str, other: str | None, total: int | None, discarded: bool
) -> None:
    summary = SessionSummary(
        title=text,
        state=S.PAUSED,
        seq=9,
        resume_state=S.EXECUTING,
        total_steps=total,
        current_task=other,
        current_step=text,
        reason=text,
        discarded=discarded,
        plan_hash=other,
    )
    stored = summary.encode()
    assert json.loads(stored)[:2] == [SUMMARY_VERSION, "PAUSED"]
    assert decode_summary(stored, title=text, seq=9) == summary


@pytest.mark.parametrize(
    ("summary", "text"),
    [
        (SessionSummary("t", SessionState.EXECUTING), '[2,"EXECUTING"]'),
        (
            SessionSummary(
                "t", SessionState.EXECUTING, seq=9, steps_completed=3, next_position=3,
                current_step="s2",
            ),
            '[2,"EXECUTING",3,3,"s2"]',
        ),
        (
            SessionSummary(
                "t", SessionState.PAUSED, seq=40, resume_state=SessionState.EXECUTING,
                total_steps=5, steps_completed=2, steps_failed=1, next_position=3,
                current_task="t1", current_step='a"b\\c', resumes=2,
                reason="paused: ü \n x", plan_hash="abc",
            ),
            '[2,"PAUSED",2,3,"a\\"b\\\\c","paused: ü \\n x","t1",5,"abc",2,1,"EXECUTING"]',
        ),
        (
            SessionSummary(
                "t", SessionState.AWAITING_APPROVAL, pending_approval="deploy", discarded=True
            ),
            '[2,"AWAITING_APPROVAL",0,0,null,null,null,null,null,0,0,null,"deploy",true]',
        ),
    ],
)  # fmt: skip
def test_a_summary_is_encoded_as_every_acode_version_wrote_it(
    summary: SessionSummary, text: str
) -> None:
    """Fixed texts: most checkpoints derive their summary by encoding a fold, and their
    signatures were made over the text an earlier version wrote."""
    assert summary.encode() == text
    assert decode_summary(text, title="t", seq=summary.seq) == summary


_TEXTS = st.none() | st.sampled_from(["", "0", "null", ",null", 'a",0', "false"]) | st.text()
_COUNTS = st.sampled_from([0, 1, 10]) | st.integers(0, 2**40)


@given(
    st.builds(
        SessionSummary,
        title=st.just("t"),
        state=st.sampled_from(S),
        seq=st.just(3),
        resume_state=st.none() | st.sampled_from(S),
        total_steps=st.none() | _COUNTS,
        steps_completed=_COUNTS,
        steps_failed=_COUNTS,
        next_position=_COUNTS,
        current_task=_TEXTS,
        current_step=_TEXTS,
        pending_approval=_TEXTS,
        resumes=_COUNTS,
        reason=_TEXTS,
        discarded=st.booleans(),
        plan_hash=_TEXTS,
    )
)
def test_the_stored_summary_leaves_out_exactly_the_trailing_defaults(
    summary: SessionSummary,
) -> None:
    # With the JSON's form fixed, that makes the stored text the one every version of
    # acode writes for this summary: checkpoints already written still compare equal.
    stored = summary.encode()
    assert decode_summary(stored, title="t", seq=3) == summary
    fields = json.loads(stored)[1:]
    defaults = SessionSummary("t", summary.state)
    last = _COMPACT[len(fields) - 1]
    assert last == "state" or fields[-1] != getattr(defaults, last)


def test_a_summary_evolved_from_an_encoded_one_encodes_as_a_new_one() -> None:
    first = SessionSummary("t", S.EXECUTING, reason="started", current_step="a")
    first.encode()  # keeps the text of its fields past the step, which evolve hands on
    for changes in (
        {"reason": "other"},
        {"reason": None},
        {"resumes": 1},
        {"current_task": "task"},
        {"steps_completed": 4, "current_step": "b"},
        {"discarded": True},
    ):
        assert evolve(first, **changes).encode() == replace(first, **changes).encode()
