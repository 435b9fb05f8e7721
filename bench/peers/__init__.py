"""The engines measured side by side with acode, each driven in its own process.

Every driver (``bench/peers/*_driver.py``, ``bare.py``) runs one engine's workflow of
trivial steps through that engine's public API, and speaks the small protocol of
``bench.peers.protocol`` with the parent (``bench.peers.launch``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

__all__ = ["PEERS", "Peer", "available", "fits"]


@dataclass(frozen=True)
class Peer:
    key: str
    label: str
    module: str  # the driver, run as ``python -m``
    variant: str
    requires: str | None = None  # the package it needs, absent from acode's own environment
    max_steps: int | None = None  # in a default run: beyond it, minutes and gigabytes
    full_max_steps: int | None = None  # the same with --full
    recovers: bool = True  # whether it takes part in the crash-recovery runs
    steps: bool = True  # whether it takes part in the per-step runs
    # Whether it waits for the disk at every commit. The others run in turns of their own:
    # a neighbour's fsyncs stall their writes (ext4 journal commits) even between turns.
    durable: bool = True


_LG = "bench.peers.langgraph_driver"

PEERS = (
    Peer("acode-full", "acode, durability full (default)", "bench.peers.acode_driver", "full"),
    Peer(
        "acode-skip",
        "acode, durability full, recovering with skip_completed()",
        "bench.peers.acode_driver",
        "full-skip",
        steps=False,  # its steps are acode-full's
    ),
    Peer(
        "acode-normal",
        "acode, durability normal",
        "bench.peers.acode_driver",
        "normal",
        recovers=False,
        durable=False,
    ),
    Peer("bare-full", "bare SQLite insert, WAL, synchronous=FULL", "bench.peers.bare", "full"),
    Peer(
        "bare-normal",
        "bare SQLite insert, WAL, synchronous=NORMAL",
        "bench.peers.bare",
        "normal",
        durable=False,
    ),
    Peer(
        "dbos",
        "DBOS on SQLite (its default: rollback journal)",
        "bench.peers.dbos_driver",
        "default",
        requires="dbos",
    ),
    Peer("dbos-wal", "DBOS on SQLite, WAL", "bench.peers.dbos_driver", "wal", requires="dbos"),
    Peer(
        "lg-counter",
        "LangGraph + SqliteSaver, state = a counter (durability async, its default)",
        _LG,
        "counter",
        requires="langgraph",
    ),
    Peer(
        "lg-counter-sync",
        "LangGraph + SqliteSaver, state = a counter, durability sync",
        _LG,
        "counter-sync",
        requires="langgraph",
    ),
    Peer(
        "lg-accumulate",
        "LangGraph + SqliteSaver, state accumulates every result (async)",
        _LG,
        "accumulate",
        requires="langgraph",
        max_steps=1_000,
        full_max_steps=10_000,
    ),
    Peer("plain", "plain Python, no persistence", "bench.peers.bare", "plain", durable=False),
)


def fits(peer: Peer, steps: int, *, full: bool) -> bool:
    """Whether the peer runs workflows of ``steps`` steps in this run."""
    limit = peer.full_max_steps if full else peer.max_steps
    return limit is None or steps <= limit


def available(peer: Peer) -> bool:
    """Whether this interpreter can run the peer (``make bench`` installs them all into
    .venv-bench; acode's own .venv has none)."""
    return peer.requires is None or importlib.util.find_spec(peer.requires) is not None
