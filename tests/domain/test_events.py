"""Replay order: events sort by (timestamp, event_id), and a history where that order
and the sequence numbers disagree is reported, naming the first event out of place."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from acode.domain import events
from acode.domain.events import Event, EventType, canonical_json, replay_order
from acode.domain.ids import uuid7
from tests.domain.test_reducer import History

T = EventType
TS = 1_732_000_000_123_456

# Readings that repeat, stay in one millisecond, step backwards, or leap.
clock_readings = st.lists(
    st.one_of(
        st.integers(TS, TS + 3_000),
        st.integers(TS - 10**9, TS + 10**9),
    ),
    min_size=1,
    max_size=40,
)


def history_from(readings: list[int]) -> list[Event]:
    h = History()
    for i, now_us in enumerate(readings):
        h.add(T.STEP_COMPLETED, {"step": f"s{i}", "position": i}, now_us=now_us)
    return h.events


def at(seq: int, ts_us: int, event_id: str) -> Event:
    return Event("session", seq, event_id, ts_us, T.SESSION_RESUMED, "{}", b"")


def ids(n: int) -> list[str]:
    """n ids of one millisecond, in increasing order."""
    return [uuid7(TS // 1000, i.to_bytes(10, "big")) for i in range(n)]


@settings(max_examples=100, deadline=None)
@given(clock_readings, st.randoms(use_true_random=False))
def test_a_shuffled_consistent_history_replays_in_seq_order(
    readings: list[int], rnd: random.Random
) -> None:
    events = history_from(readings)
    shuffled = list(events)
    rnd.shuffle(shuffled)
    ordered, bad = replay_order(shuffled)
    assert bad is None
    assert ordered == events
    assert [e.seq for e in ordered] == list(range(1, len(events) + 1))


@settings(max_examples=100, deadline=None)
@given(st.data(), clock_readings)
def test_swapping_two_timestamps_is_found(data: st.DataObject, readings: list[int]) -> None:
    events = history_from(readings)
    latest = events[-1].ts_us
    assume(events[0].ts_us != latest)
    i = data.draw(st.sampled_from([k for k, e in enumerate(events) if e.ts_us != latest]))
    j = data.draw(
        st.sampled_from([k for k, e in enumerate(events) if e.ts_us != events[i].ts_us and k > i])
    )
    tampered = list(events)
    tampered[i] = replace(events[i], ts_us=events[j].ts_us)
    tampered[j] = replace(events[j], ts_us=events[i].ts_us)
    ordered, bad = replay_order(data.draw(st.permutations(tampered)))
    # Everything before the earlier of the two keeps its place, so that one is reported.
    assert bad == tampered[i]
    assert [e.seq for e in ordered] != [e.seq for e in tampered]


def test_ties_on_timestamp_are_broken_by_event_id() -> None:
    events = [at(seq, TS, eid) for seq, eid in enumerate(ids(5), start=1)]
    ordered, bad = replay_order([events[3], events[0], events[4], events[2], events[1]])
    assert ordered == events
    assert bad is None


def test_an_event_id_order_that_contradicts_seq_is_found() -> None:
    low, high = ids(2)
    first, second = at(1, TS, high), at(2, TS, low)
    ordered, bad = replay_order([first, second])
    assert ordered == [second, first]
    assert bad is first


def test_the_timestamp_decides_before_the_event_id() -> None:
    low, high = ids(2)
    first, second = at(1, TS, high), at(2, TS + 1, low)
    ordered, bad = replay_order([second, first])
    assert ordered == [first, second]
    assert bad is None


def test_the_first_event_out_of_place_is_reported() -> None:
    a, b, c, d = ids(4)
    events = [at(1, TS, a), at(2, TS + 5, b), at(3, TS + 2, c), at(4, TS + 9, d)]
    ordered, bad = replay_order(events)
    assert [e.seq for e in ordered] == [1, 3, 2, 4]
    assert bad is events[1]


def test_an_empty_history_is_in_order() -> None:
    assert replay_order([]) == ([], None)


# -- the event value --------------------------------------------------------------------


def test_the_payload_is_read_from_the_stored_json_text() -> None:
    event = replace(at(7, TS, ids(1)[0]), payload_json='{"b": [1, 2], "a": "\u00e9"}')
    assert event.payload == {"a": "\u00e9", "b": [1, 2]}
    assert event.payload is event.payload


@pytest.mark.parametrize("text", ["[]", "3", '"x"', "null"])
def test_a_payload_that_is_not_an_object_is_refused_naming_the_event(text: str) -> None:
    event = replace(at(7, TS, ids(1)[0]), payload_json=text)
    with pytest.raises(ValueError, match=r"event 7 payload is not an object"):
        _ = event.payload


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
        max_leaves=10,
    )
)
def test_canonical_json_is_one_compact_sorted_encoding(value: object) -> None:
    text = canonical_json(value)
    assert json.loads(text) == value
    assert text == json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_json(json.loads(text)) == text


def test_canonical_json_keeps_text_as_utf8_without_spaces() -> None:
    assert canonical_json({"b": 1, "a": ["é", None]}) == '{"a":["é",null],"b":1}'


# Beyond JSON's own values: tuples, integer and float keys, floats, deep nesting.
_encodable = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3).map(tuple)
        | st.lists(inner, max_size=3)
        | st.dictionaries(st.text(), inner, max_size=3)
        | st.dictionaries(st.integers(), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(_encodable)
def test_the_encoder_made_once_writes_what_json_dumps_writes(value: object) -> None:
    expected = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    assert canonical_json(value) == expected


@pytest.fixture(params=["made once", "json.dumps's way"])
def encoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways canonical_json encodes: CPython's C encoder made once, and, where that
    is missing, the JSONEncoder."""
    if request.param != "made once":
        monkeypatch.setattr(events, "_C_ENCODER", None)
    else:
        assert events._C_ENCODER is not None  # CPython has it
    return str(request.param)


def test_either_way_encodes_alike(encoder: str) -> None:
    assert canonical_json({"b": (1, 2.5), "é": "é", "a": None}) == '{"a":null,"b":[1,2.5],"é":"é"}'
    assert canonical_json({10: True, 9: 1e100}) == '{"9":1e+100,"10":true}'
    assert canonical_json("x") == '"x"'


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_either_way_refuses_what_json_cannot_hold(encoder: str, number: float) -> None:
    with pytest.raises(ValueError, match="Out of range float"):
        canonical_json({"x": [number]})
    with pytest.raises(TypeError, match="not JSON serializable"):
        canonical_json({"x": object()})


def test_either_way_names_a_cycle(encoder: str) -> None:
    loop: list[object] = []
    loop.append({"again": loop})
    with pytest.raises(ValueError, match="Circular reference detected"):
        canonical_json(loop)
