"""The hash chain: any edit, removal, insertion or reordering of an event changes the
head, and a chain belongs to one session."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from acode.domain.chain import LINK_BYTES, ChainKey, Mac, event_hash, genesis_hash
from acode.domain.events import Event, EventType
from acode.domain.ids import uuid7
from acode.domain.states import SessionState
from tests.domain.test_reducer import SESSION, History

T = EventType
FIELDS = ("seq", "event_id", "ts_us", "type", "payload_json")


def chain(session_id: str, events: list[Event]) -> list[bytes]:
    """The hash of each event, recomputed from its fields."""
    hashes: list[bytes] = []
    previous = genesis_hash(session_id)
    for e in events:
        previous = event_hash(previous, e.seq, e.event_id, e.ts_us, e.type.value, e.payload_json)
        hashes.append(previous)
    return hashes


def sample_history(length: int) -> list[Event]:
    h = History()
    h.created()
    h.to(SessionState.CREATED, SessionState.EXECUTING)
    for position in range(length):
        h.step(T.STEP_STARTED, f"s{position}", position, kind="write")
        h.step(T.STEP_COMPLETED, f"s{position}", position, kind="write")
    return h.events


@st.composite
def edits(draw: st.DrawFn, event: Event) -> Event:
    """``event`` with one field changed to a different value."""
    name = draw(st.sampled_from(FIELDS))
    if name == "seq":
        return replace(event, seq=draw(st.integers(0, 10**6).filter(lambda n: n != event.seq)))
    if name == "ts_us":
        return replace(event, ts_us=draw(st.integers(0, 2**62).filter(lambda n: n != event.ts_us)))
    if name == "event_id":
        other = st.builds(uuid7, st.integers(0, 2**48 - 1), st.binary(min_size=10, max_size=10))
        return replace(event, event_id=draw(other.filter(lambda u: u != event.event_id)))
    if name == "type":
        return replace(event, type=draw(st.sampled_from([t for t in T if t is not event.type])))
    text = st.text(max_size=40).filter(lambda t: t != event.payload_json)
    return replace(event, payload_json=draw(text))


def test_the_builder_chains_like_the_journal() -> None:
    events = sample_history(3)
    assert [e.hash for e in events] == chain(SESSION, events)


@settings(max_examples=100, deadline=None)
@given(st.data(), st.integers(1, 5))
def test_editing_any_field_of_any_event_changes_its_hash_and_the_head(
    data: st.DataObject, length: int
) -> None:
    events = sample_history(length)
    index = data.draw(st.integers(0, len(events) - 1))
    edited = list(events)
    edited[index] = data.draw(edits(events[index]))
    before, after = chain(SESSION, events), chain(SESSION, edited)
    assert after[:index] == before[:index]
    assert after[index] != before[index]
    assert all(a != b for a, b in zip(after[index:], before[index:], strict=True))
    assert after[-1] != events[-1].hash


@settings(max_examples=100, deadline=None)
@given(st.data(), st.integers(1, 5))
def test_removing_inserting_or_reordering_events_changes_the_head(
    data: st.DataObject, length: int
) -> None:
    events = sample_history(length)
    head = events[-1].hash
    i = data.draw(st.integers(0, len(events) - 1))
    j = data.draw(st.integers(0, len(events) - 1).filter(lambda k: k != i))
    removed = events[:i] + events[i + 1 :]
    inserted = [*events[: i + 1], events[j], *events[i + 1 :]]
    swapped = list(events)
    swapped[i], swapped[j] = events[j], events[i]
    for tampered in (removed, inserted, swapped):
        assert chain(SESSION, tampered)[-1] != head


def test_the_genesis_binds_a_chain_to_its_session() -> None:
    a = uuid7(1_732_000_000_000, bytes(10))
    b = uuid7(1_732_000_000_000, bytes(9) + b"\x01")
    assert genesis_hash(a) == genesis_hash(a)
    assert genesis_hash(a) != genesis_hash(b)
    assert len(genesis_hash(a)) == 32


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1), st.text(min_size=1))
def test_genesis_differs_by_session(a: str, b: str) -> None:
    assert (genesis_hash(a) == genesis_hash(b)) == (a == b)


def test_the_same_events_in_another_session_give_another_chain() -> None:
    events = sample_history(2)
    other = uuid7(1_732_000_000_001, bytes(10))
    theirs = chain(other, events)
    assert all(a != b for a, b in zip(theirs, chain(SESSION, events), strict=True))


def test_event_hash_is_a_pure_function_of_its_inputs() -> None:
    args = (genesis_hash(SESSION), 1, uuid7(5, bytes(10)), 5_000, "session_created", "{}")
    assert event_hash(*args) == event_hash(*args)
    assert len(event_hash(*args)) == 32


def test_the_hash_of_an_event_is_what_every_acode_version_wrote() -> None:
    """Fixed values: a database written by an earlier version must verify in this one, so
    a faster way of hashing may never change the bytes hashed."""
    genesis = genesis_hash("01a21687-de37-7000-8000-000000000001")
    assert genesis.hex() == "9a63d4c3b1648f314c7973e73189e97f69ae6a48d01780b7dcac19cddd626dcb"
    head = event_hash(
        genesis,
        7,
        "01a21687-de37-7001-8000-0000000000aa",
        1795673288517327,
        "step_completed",
        '{"position":6,"result":{"ok":true},"step":"s6"}',
    )
    assert head.hex() == "e4609979dae229465c1e5b2266ef0579d2b9f10c8a5a61e2f2ae771098e4c61e"


# -- version 2: the keyed chain --------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=150), st.binary(max_size=300))
def test_the_mac_is_hmac_sha256(key: bytes, message: bytes) -> None:
    """Against the standard library's HMAC as the oracle, keys longer than a block too."""
    import hashlib
    import hmac

    assert Mac(key).digest(message) == hmac.new(key, message, hashlib.sha256).digest()


def keyed(key: ChainKey, events: list[Event]) -> list[bytes]:
    hashes: list[bytes] = []
    previous = key.genesis
    for e in events:
        previous = key.link(previous, e.seq, e.event_id, e.ts_us, e.type.value, e.payload_json)
        hashes.append(previous)
    return hashes


@settings(max_examples=100, deadline=None)
@given(st.data(), st.integers(1, 5))
def test_editing_any_field_of_any_event_changes_its_keyed_link(
    data: st.DataObject, length: int
) -> None:
    key = ChainKey(Mac(b"k" * 32), SESSION)
    events = sample_history(length)
    index = data.draw(st.integers(0, len(events) - 1))
    edited = list(events)
    edited[index] = data.draw(edits(events[index]))
    before, after = keyed(key, events), keyed(key, edited)
    assert after[:index] == before[:index]
    assert all(a != b for a, b in zip(after[index:], before[index:], strict=True))


def test_a_link_is_what_this_version_writes() -> None:
    """Fixed values: histories written with this version must verify in later ones."""
    key = ChainKey(Mac(b"fixture-key-not-a-key"), "01a21687-de37-7000-8000-000000000001")
    link = key.link(
        key.genesis,
        1,
        "01a21687-de37-7001-8000-0000000000aa",
        1795673288517327,
        "session_created",
        '{"title":"t","v":1}',
    )
    assert len(link) == LINK_BYTES
    assert link.hex() == "a572eabaeeb2e933ee46450bbe843264"


@settings(max_examples=100, deadline=None)
@given(st.data(), st.integers(1, 6))
def test_a_window_holds_up_to_its_first_edited_event(data: st.DataObject, length: int) -> None:
    """``ChainKey.linked``, the replay's check of a window at a time, finds what ``link``
    finds one event at a time: the rows hold up to the first edited one."""
    key = ChainKey(Mac(b"k" * 32), SESSION)
    events = sample_history(length)
    links = keyed(key, events)

    def rows(of: list[Event]) -> list[tuple[int, str, int, str, str, bytes]]:
        return [
            (e.seq, e.event_id, e.ts_us, e.type.value, e.payload_json, link)
            for e, link in zip(of, links, strict=True)
        ]

    assert key.linked(key.genesis, rows(events)) == len(events)
    assert key.linked(links[0], rows(events)[1:]) == len(events) - 1
    assert key.linked(links[0], rows(events)) == 0  # a window read from the wrong place
    index = data.draw(st.integers(0, len(events) - 1))
    edited = list(events)
    edited[index] = data.draw(edits(events[index]))
    assert key.linked(key.genesis, rows(edited)) == index
