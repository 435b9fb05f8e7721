"""The floor: hand-rolled SQLite, one single-row transaction per step (WAL), and plain
Python that records nothing at all.

Variants: ``full`` and ``normal`` (SQLite's ``synchronous``), and ``plain`` (no database:
a crash loses everything, so recovery runs every step again).
"""

from __future__ import annotations

import gc
import json
import sqlite3
import sys
from pathlib import Path

from bench.peers.protocol import Args, SideEffects, Turns, emit, kill_self, parse_args, payload

__all__ = ["main"]


class _Log:
    """A one-table WAL database; the step's position is the row's sequence number."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.path = path
        self._conn = sqlite3.connect(path, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS steps (seq INTEGER PRIMARY KEY, result TEXT NOT NULL)"
        )

    def done(self) -> int:
        """How many steps are recorded: where a recovery starts."""
        row = self._conn.execute("SELECT MAX(seq) FROM steps").fetchone()
        return 0 if row[0] is None else int(row[0])

    def record(self, position: int) -> None:
        self._conn.execute("BEGIN IMMEDIATE")
        self._conn.execute(
            "INSERT INTO steps (seq, result) VALUES (?, ?)",
            (position + 1, json.dumps(payload(position), separators=(",", ":"))),
        )
        self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()


class _Plain:
    """No persistence: the results live in a list and die with the process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._results: list[str] = []

    def done(self) -> int:
        return 0

    def record(self, position: int) -> None:
        self._results.append(json.dumps(payload(position), separators=(",", ":")))

    def close(self) -> None:
        self._results.clear()


def _open(args: Args) -> _Log | _Plain:
    args.directory.mkdir(parents=True, exist_ok=True)
    path = args.directory / "bare.db"
    return _Plain(path) if args.variant == "plain" else _Log(path, args.variant)


def _steps(args: Args) -> None:
    log = _open(args)
    turns = Turns(args.chunk)
    gc.collect()
    turns.ready(log.path)
    for i in range(args.n):
        turns.before(i)
        log.record(i)
    turns.end()
    log.close()


def _workflow(args: Args) -> None:
    side = SideEffects(args.side, probe=args.mode == "probe")
    log = _open(args)
    start = log.done() if args.mode != "crash" else 0
    side.mark_loaded()
    for i in range(start, args.n):
        if i == args.kill_after and args.mode == "crash":
            kill_self()
        side.record(i)
        log.record(i)
    log.close()
    side.report()


def main() -> int:
    args = parse_args()
    if args.mode == "steps":
        _steps(args)
    else:
        _workflow(args)
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
