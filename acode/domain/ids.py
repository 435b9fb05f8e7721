"""UUIDv7 identifiers and per-session event stamps.

Pure: the caller supplies the time and the random bytes. Event stamps are built so
that ordering events by (timestamp, event_id) always agrees with their sequence
number, even when the wall clock steps backwards between two events.
"""

from __future__ import annotations

from dataclasses import dataclass

from acode.domain.frozen import build

__all__ = [
    "SHORT_ID_LENGTH",
    "EventStamp",
    "abbreviations",
    "next_event_stamp",
    "uuid7",
    "uuid7_ms",
    "uuid_bytes",
    "uuid_text",
]

_RAND_BITS = 74  # 12 bits rand_a + 62 bits rand_b
_RAND_MASK = (1 << _RAND_BITS) - 1


_MAX_MS = (1 << 48) - 1


def _pack(unix_ms: int, rand: int) -> str:
    rand_a = (rand >> 62) & 0xFFF
    rand_b = rand & ((1 << 62) - 1)
    value = (unix_ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _unpack(uuid: str) -> tuple[int, int]:
    value = int(uuid.replace("-", ""), 16)
    rand_a = (value >> 64) & 0xFFF
    rand_b = value & ((1 << 62) - 1)
    return value >> 80, rand_a << 62 | rand_b


def uuid7(unix_ms: int, rand: bytes) -> str:
    """A UUIDv7 string from a millisecond timestamp and at least 10 random bytes."""
    return _pack(unix_ms, _random(rand))


def _random(rand: bytes) -> int:
    if len(rand) < 10:
        raise ValueError("uuid7 needs at least 10 random bytes")
    return int.from_bytes(rand[:10], "big") & _RAND_MASK


def uuid7_ms(uuid: str) -> int:
    """The millisecond timestamp embedded in a UUIDv7."""
    return _unpack(uuid)[0]


def uuid_bytes(uuid: str) -> bytes:
    """A UUID's 16 bytes, the form the event log stores (schema 5)."""
    return bytes.fromhex(uuid.replace("-", ""))


def uuid_text(value: bytes) -> str:
    """The canonical text of a UUID stored as its 16 bytes."""
    h = value.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


SHORT_ID_LENGTH = 13


def abbreviations(ids: list[str], minimum: int = SHORT_ID_LENGTH) -> dict[str, str]:
    """The shortest unique prefix of each id, at least ``minimum`` characters.

    A UUIDv7 starts with its timestamp: its first 8 hex characters are shared by every
    session started in the same minute, so an 8-character id printed by one run would
    turn ambiguous when the next run starts. 13 characters (``01a2150c-1a2b``) carry the
    whole millisecond; beyond that, like git's abbreviated hashes, a short id grows
    until it is unique among its neighbours.
    """
    ordered = sorted(set(ids))
    shared = [0] * len(ordered)
    for i in range(1, len(ordered)):
        a, b = ordered[i - 1], ordered[i]
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        shared[i - 1] = max(shared[i - 1], n)
        shared[i] = max(shared[i], n)
    result = {}
    for uid, n in zip(ordered, shared, strict=True):
        length = max(minimum, n + 1)
        if length < len(uid) and uid[length - 1] == "-":
            length += 1  # never end a short id on a dash
        result[uid] = uid[:length]
    return result


@dataclass(frozen=True)  # without slots: ``_stamp`` builds one per event (acode.domain.frozen)
class EventStamp:
    """An event's time and UUIDv7, in step with the events before it."""

    ts_us: int
    event_id: str
    # The id's millisecond and random parts, kept so that the next stamp need not parse
    # the text (None: parse it, for a stamp made from a stored event).
    parts: tuple[int, int] | None = None


def next_event_stamp(previous: EventStamp | None, now_us: int, rand: bytes) -> EventStamp:
    """The stamp of the next event of a session.

    The timestamp is clamped so it never goes backwards; when it falls in the same
    millisecond as the previous event, the id is the previous id plus one, so ids
    stay strictly increasing within a session.
    """
    if previous is None:
        return _stamp(now_us, now_us // 1000, _random(rand))
    ts = max(now_us, previous.ts_us)
    prev_ms, prev_rand = previous.parts or _unpack(previous.event_id)
    ms = ts // 1000
    if ms > prev_ms:
        return _stamp(ts, ms, _random(rand))
    if prev_rand == _RAND_MASK:  # carry into the timestamp, as RFC 9562 does
        if prev_ms == _MAX_MS:
            # 48 bits of milliseconds end in the year 10889: there is no larger id.
            raise ValueError("no UUIDv7 is left after the last representable millisecond")
        return _stamp(ts, prev_ms + 1, 0)
    return _stamp(ts, prev_ms, prev_rand + 1)


def _stamp(ts_us: int, unix_ms: int, rand: int) -> EventStamp:
    return build(EventStamp, ts_us=ts_us, event_id=_pack(unix_ms, rand), parts=(unix_ms, rand))
