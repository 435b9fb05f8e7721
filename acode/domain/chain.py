"""The per-session hash chain: each event's hash covers the previous hash and the
event's own fields, so editing, removing or inserting any event changes the head."""

from __future__ import annotations

import hashlib

__all__ = ["event_hash", "genesis_hash"]


def genesis_hash(session_id: str) -> bytes:
    """What the first event chains to; binds a chain to its session."""
    return hashlib.sha256(f"acode-chain:v1:{session_id}".encode()).digest()


def event_hash(
    previous: bytes, seq: int, event_id: str, ts_us: int, type_: str, payload_json: str
) -> bytes:
    # One piece, hashed in one call: this runs for every event.
    fields = f"\n{seq}\n{event_id}\n{ts_us}\n{type_}\n{payload_json}"
    return hashlib.sha256(previous + fields.encode()).digest()
