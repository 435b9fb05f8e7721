"""What the keyed chain costs per event: since schema 7 each event's link is an
HMAC-SHA256 under the session's chain key, where it was a plain SHA-256. The engine
computes one link when it writes an event and one for every event it reads, so this is
measured on the events of a recorded session, in-process, with nothing else timed: the
plain SHA-256 of chain version 1, acode's HMAC (its key's padded states computed once,
``acode.domain.chain.Mac``), and the standard library's ``hmac.digest`` for comparison."""

from __future__ import annotations

import hmac
import sqlite3
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from acode.domain.chain import ChainKey, Mac, event_hash
from acode.security.signing import load_signer

__all__ = ["ChainCost", "measure_chain"]

_Row = tuple[int, str, int, str, str]
_Link = Callable[[bytes, int, str, int, str, str], bytes]

_EVENTS = "SELECT e.seq, e.event_id, e.ts, e.type, e.payload FROM events e "
_OF_SESSION = "JOIN sessions s ON s.sid = e.sid WHERE s.id = ? ORDER BY e.seq"


@dataclass(frozen=True)
class ChainCost:
    events: int  # events in the measured session
    steps: int  # its completed steps
    # microseconds per event, the median of the rounds, by what computes the link
    plain_us: float
    keyed_us: float
    stdlib_us: float

    @property
    def events_per_step(self) -> float:
        return self.events / self.steps

    @property
    def added_us_per_step(self) -> float:
        """What keying adds to writing a step (its events' links), and again to reading it."""
        return (self.keyed_us - self.plain_us) * self.events_per_step


class _StdlibMac(Mac):
    """The same HMAC, computed by ``hmac.digest``, which sets the key up at every call."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        super().__init__(key)
        self._key = key

    def digest(self, message: bytes) -> bytes:
        return hmac.digest(self._key, message, "sha256")


def _rows(database: Path, session_id: str) -> list[_Row]:
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        return conn.execute(_EVENTS + _OF_SESSION, (session_id,)).fetchall()
    finally:
        conn.close()


def _seconds(link: _Link, genesis: bytes, rows: Sequence[_Row]) -> float:
    previous = genesis
    start = time.perf_counter()
    for seq, event_id, ts_us, type_, payload in rows:
        previous = link(previous, seq, event_id, ts_us, type_, payload)
    return time.perf_counter() - start


def measure_chain(database: Path, session_id: str, steps: int, rounds: int) -> ChainCost:
    """Chain every event of session ``session_id`` ``rounds`` times with each link, taking
    turns so that the machine's drift hits all three alike."""
    rows = _rows(database, session_id)
    keyed = load_signer().chain_key(session_id)
    # The session's derived key is the signer's secret; the comparison needs only some key.
    stdlib = ChainKey(_StdlibMac(b"k" * 32), session_id)
    links: dict[str, _Link] = {"plain": event_hash, "keyed": keyed.link, "stdlib": stdlib.link}
    seconds: dict[str, list[float]] = {name: [] for name in links}
    for _ in range(rounds):
        for name, link in links.items():
            seconds[name].append(_seconds(link, keyed.genesis, rows))

    def per_event(name: str) -> float:
        return statistics.median(seconds[name]) / len(rows) * 1e6

    return ChainCost(
        events=len(rows),
        steps=steps,
        plain_us=per_event("plain"),
        keyed_us=per_event("keyed"),
        stdlib_us=per_event("stdlib"),
    )
