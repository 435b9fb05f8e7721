"""UUIDv7 ids, event stamps that keep (timestamp, event_id) order equal to generation
order whatever the clock does, and the short ids people see."""

from __future__ import annotations

import re
import uuid
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acode.domain.ids import (
    SHORT_ID_LENGTH,
    EventStamp,
    abbreviations,
    next_event_stamp,
    uuid7,
    uuid7_ms,
)

UUID7 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
MAX_MS = (1 << 48) - 1
RAND_BITS = 74
MAX_EVENTS = 60

millis = st.integers(0, MAX_MS)
rand_bytes = st.binary(min_size=10, max_size=16)
# Random parts at or just below the top make the same-millisecond counter overflow.
any_rand = st.one_of(
    rand_bytes,
    st.integers((1 << RAND_BITS) - 4, (1 << RAND_BITS) - 1).map(lambda n: n.to_bytes(10, "big")),
)
# Small readings give equal values, same-millisecond runs and short backwards steps;
# large ones give jumps of years in either direction.
clock_readings = st.lists(
    # The last millisecond has no room to carry into: see the test below.
    st.one_of(st.integers(0, 5_000), st.integers(0, (MAX_MS - 1) * 1000)),
    min_size=1,
    max_size=MAX_EVENTS,
)


def stamps_for(readings: list[int], rands: list[bytes]) -> list[EventStamp]:
    stamps: list[EventStamp] = []
    previous: EventStamp | None = None
    for now_us, rand in zip(readings, rands, strict=False):
        previous = next_event_stamp(previous, now_us, rand)
        stamps.append(previous)
    return stamps


# -- uuid7 --------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(millis, rand_bytes)
def test_uuid7_is_a_version_7_rfc_uuid_carrying_its_millisecond(ms: int, rand: bytes) -> None:
    value = uuid7(ms, rand)
    assert UUID7.fullmatch(value)
    parsed = uuid.UUID(value)
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122
    assert str(parsed) == value
    assert uuid7_ms(value) == ms
    assert parsed.int >> 80 == ms
    # RFC 9562's layout: 12 random bits after the version, 62 after the variant.
    random = int.from_bytes(rand[:10], "big") & ((1 << RAND_BITS) - 1)
    assert parsed.int >> 64 & 0xFFF == random >> 62
    assert parsed.int & ((1 << 62) - 1) == random & ((1 << 62) - 1)


@settings(max_examples=100, deadline=None)
@given(millis, millis, rand_bytes, rand_bytes)
def test_uuid7_text_order_follows_the_millisecond(a: int, b: int, ra: bytes, rb: bytes) -> None:
    if a < b:
        assert uuid7(a, ra) < uuid7(b, rb)


@settings(max_examples=100, deadline=None)
@given(millis, st.binary(min_size=10, max_size=10), st.binary(max_size=6))
def test_uuid7_uses_the_first_ten_random_bytes(ms: int, rand: bytes, extra: bytes) -> None:
    assert uuid7(ms, rand + extra) == uuid7(ms, rand)


def test_uuid7_keeps_74_random_bits() -> None:
    ids = {uuid7(0, (1 << bit).to_bytes(10, "big")) for bit in range(RAND_BITS)}
    assert len(ids) == RAND_BITS
    assert uuid7(0, bytes(10)) not in ids


def test_uuid7_refuses_fewer_than_ten_random_bytes() -> None:
    with pytest.raises(ValueError, match="10 random bytes"):
        uuid7(0, bytes(9))


# -- event stamps -------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.data(), clock_readings)
def test_stamps_never_go_backwards_and_order_as_generated(
    data: st.DataObject, readings: list[int]
) -> None:
    rands = data.draw(st.lists(any_rand, min_size=len(readings), max_size=len(readings)))
    stamps = stamps_for(readings, rands)
    keys = [(s.ts_us, s.event_id) for s in stamps]
    for i, stamp in enumerate(stamps):
        assert stamp.ts_us == max(readings[: i + 1])
        assert UUID7.fullmatch(stamp.event_id)
        # An overflowing counter carries into the id's millisecond, never below the clock's.
        assert uuid7_ms(stamp.event_id) >= stamp.ts_us // 1000
    assert all(a < b for a, b in pairwise(keys))
    assert sorted(stamps, key=lambda s: (s.ts_us, s.event_id)) == stamps


def test_a_backwards_clock_keeps_the_previous_timestamp() -> None:
    first = next_event_stamp(None, 9_000_500, bytes(10))
    second = next_event_stamp(first, 2_000_000, b"\xff" * 10)
    assert second.ts_us == first.ts_us
    assert second.event_id > first.event_id


def test_events_in_one_millisecond_count_up_from_the_previous_id() -> None:
    first = next_event_stamp(None, 7_000_100, bytes(9) + b"\x05")
    second = next_event_stamp(first, 7_000_900, b"\xff" * 10)
    assert uuid.UUID(second.event_id).int == uuid.UUID(first.event_id).int + 1


def test_a_new_millisecond_takes_fresh_random_bits() -> None:
    first = next_event_stamp(None, 7_000_100, bytes(10))
    second = next_event_stamp(first, 7_001_000, b"\x42" * 10)
    assert second.event_id == uuid7(7_001, b"\x42" * 10)


def test_an_overflowing_counter_carries_into_the_millisecond() -> None:
    first = next_event_stamp(None, 5_000_000, b"\xff" * 10)
    second = next_event_stamp(first, 5_000_000, bytes(10))
    third = next_event_stamp(second, 5_000_999, bytes(10))
    assert (first.ts_us, first.event_id) < (second.ts_us, second.event_id)
    assert (second.ts_us, second.event_id) < (third.ts_us, third.event_id)
    assert uuid7_ms(second.event_id) == 5_001
    assert uuid.UUID(second.event_id).int & ((1 << 62) - 1) == 0
    assert UUID7.fullmatch(second.event_id)
    assert second.ts_us == 5_000_000


# -- abbreviations ------------------------------------------------------------------------

BASE_MS = 1_732_000_000_000
# Milliseconds close together share the first 8 hex characters, and small random parts
# share most of the rest, so prefixes must grow past dashes to become unique.
near_ids = st.builds(
    uuid7,
    st.integers(BASE_MS, BASE_MS + 70_000),
    st.one_of(st.integers(0, 300), st.integers(0, (1 << 80) - 1)).map(
        lambda n: n.to_bytes(10, "big")
    ),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(near_ids, max_size=30))
def test_abbreviations_are_short_unique_prefixes(ids: list[str]) -> None:
    short = abbreviations(ids)
    assert set(short) == set(ids)
    assert len(set(short.values())) == len(short)
    for full, abbr in short.items():
        assert len(abbr) >= 8
        assert full.startswith(abbr)
        assert not abbr.endswith("-")
        assert [other for other in short if other.startswith(abbr)] == [full]


@settings(max_examples=100, deadline=None)
@given(st.lists(near_ids, min_size=1, max_size=30))
def test_abbreviations_are_as_short_as_they_can_be(ids: list[str]) -> None:
    for full, abbr in abbreviations(ids).items():
        if len(abbr) == SHORT_ID_LENGTH:
            continue
        # One character shorter (and never ending on a dash) must be ambiguous.
        cut = abbr[:-1].removesuffix("-")
        assert any(other != full and other.startswith(cut) for other in ids)


def test_a_lone_id_is_shown_by_its_millisecond() -> None:
    only = uuid7(BASE_MS, bytes(10))
    assert abbreviations([only]) == {only: only[:SHORT_ID_LENGTH]}
    assert abbreviations([only, only]) == {only: only[:SHORT_ID_LENGTH]}
    assert abbreviations([]) == {}


@pytest.mark.parametrize("minimum", range(1, 40))
def test_no_minimum_makes_a_short_id_end_on_a_dash(minimum: int) -> None:
    ids = [uuid7(BASE_MS, bytes(10)), uuid7(BASE_MS, bytes(9) + b"\x01")]
    for full, abbr in abbreviations(ids, minimum).items():
        assert not abbr.endswith("-")
        assert len(abbr) >= min(minimum, len(full))
        assert full.startswith(abbr)


def test_a_minimum_that_lands_on_a_dash_takes_one_more_character() -> None:
    only = uuid7(BASE_MS, bytes(10))
    assert only[8] == "-"
    assert abbreviations([only], minimum=9) == {only: only[:10]}


def test_the_last_millisecond_refuses_to_carry_rather_than_wrap_to_zero() -> None:
    last = EventStamp(MAX_MS * 1000, uuid7(MAX_MS, b"\xff" * 10))
    with pytest.raises(ValueError, match="last representable millisecond"):
        next_event_stamp(last, 0, bytes(10))
