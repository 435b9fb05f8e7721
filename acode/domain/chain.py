"""The per-session hash chain: each event's hash covers the previous hash and the
event's own fields, so editing, removing or inserting any event changes the head.

Version 2 (schema 7) keys the chain: each link is an HMAC-SHA256, truncated to 16
bytes, under a key derived from the user's key and the session's id (``ChainKey``). An
event is authenticated by its own link, the previous event's stored hash and its own
fields: a reader checks what it reads, at the cost of what it reads, and someone who
can write the database but not read the key can neither edit an event nor forge one,
nor move one from another session. Version 1 (plain SHA-256, ``event_hash``) is only
read, to verify an old history before it is chained again under the key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

__all__ = ["CHAIN_VERSION", "LINK_BYTES", "ChainKey", "Mac", "event_hash", "genesis_hash"]

CHAIN_VERSION = 2
# Half of HMAC-SHA256, which RFC 2104 allows: forging a link still takes 2^128 tries.
LINK_BYTES = 16
_BLOCK = 64  # SHA-256's block size, which HMAC pads its key to


class Mac:
    """HMAC-SHA256 under one key. RFC 2104 section 4: the hash states after the key's two
    padded blocks are the same for every message, so they are computed once and copied;
    a step computes two (its event's link and its checkpoint's tag), and hmac.digest
    spent more on setting up OpenSSL's MAC and hashing the key again than on them."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > _BLOCK:
            key = hashlib.sha256(key).digest()
        key = key.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))

    @property
    def states(self) -> tuple[Any, Any]:
        """The inner and outer hash states after the key's blocks, never to be updated
        (copy them): for ``ChainKey.linked``'s loop."""
        return self._inner, self._outer

    def digest(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


def genesis_hash(session_id: str) -> bytes:
    """What the first event chains to; binds a chain to its session."""
    return hashlib.sha256(f"acode-chain:v1:{session_id}".encode()).digest()


class ChainKey:
    """The links of one session's keyed chain (version 2). Made by the key's holder
    (``Signer.chain_key``): the key stays there, this holds only its padded states."""

    __slots__ = ("_mac", "genesis")

    def __init__(self, mac: Mac, session_id: str) -> None:
        self._mac = mac
        self.genesis = genesis_hash(session_id)

    def link(
        self, previous: bytes, seq: int, event_id: str, ts_us: int, type_: str, payload_json: str
    ) -> bytes:
        """The hash of event ``seq``, which follows the event whose hash is ``previous``."""
        # One piece, hashed in one call: this runs for every event written and read.
        fields = f"\n{seq}\n{event_id}\n{ts_us}\n{type_}\n{payload_json}"
        return self._mac.digest(previous + fields.encode())[:LINK_BYTES]

    def linked(self, previous: bytes, rows: Sequence[tuple[int, str, int, str, str, bytes]]) -> int:
        """How many of ``rows`` (seq, event id, time, type, payload JSON, stored hash),
        from the first on, hold their links, the first following the event whose hash is
        ``previous`` and each the one before it: ``len(rows)`` when all of them do. A
        replay checks every event it reads here, a window at a time: ``link`` and
        ``Mac.digest`` spelled out in one loop, without their calls per event."""
        inner_key, outer_key = self._mac.states
        for index, (seq, event_id, ts_us, type_, payload_json, stored) in enumerate(rows):
            fields = f"\n{seq}\n{event_id}\n{ts_us}\n{type_}\n{payload_json}"
            inner = inner_key.copy()
            inner.update(previous + fields.encode())
            outer = outer_key.copy()
            outer.update(inner.digest())
            if outer.digest()[:LINK_BYTES] != stored:
                return index
            previous = stored
        return len(rows)


def event_hash(
    previous: bytes, seq: int, event_id: str, ts_us: int, type_: str, payload_json: str
) -> bytes:
    """A link of a version 1 chain: plain SHA-256, which anyone can recompute."""
    fields = f"\n{seq}\n{event_id}\n{ts_us}\n{type_}\n{payload_json}"
    return hashlib.sha256(previous + fields.encode()).digest()
