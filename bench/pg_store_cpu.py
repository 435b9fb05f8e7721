"""``python -m bench.pg_store_cpu URL [--steps N]``: the CPU a trivial step costs on the
PostgreSQL store at ``URL`` (a database this may write to) against the SQLite store.

A trivial step is a ``Session.step`` whose function returns a number: what is left is
the store's share. acode's CPU is this process's (``time.process_time``); the server's is
that of the processes of the server ``URL`` reaches (psutil), so it must run on this
machine, and be idle otherwise. Each figure is the median of three runs, each after 50 steps that
warm the connections and their prepared statements (docs/fleet.md, "What a step costs").
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from acode.domain.config import AcodeConfig

__all__ = ["main"]

_RUNS = 3
_WARM_UP = 50


def _server(url: str) -> int:
    """The pid of the PostgreSQL server (its postmaster) that ``url`` reaches."""
    import psutil
    import psycopg

    from acode.store.postgres.connection import parse_address

    with psycopg.connect(parse_address(url).conninfo) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        return psutil.Process(int(row[0])).ppid()  # while the backend runs


def _server_cpu(server: int | None) -> float:
    """The CPU seconds of the server's processes (its backends, its WAL writer...) so far."""
    import psutil

    if server is None:
        return 0.0
    total = 0.0
    for process in psutil.Process(server).children():
        try:
            times = process.cpu_times()
        except psutil.Error:  # ended meanwhile
            continue
        total += times.user + times.system
    return total


def _number(ctx: object) -> int:
    return 1


def _per_step(config: AcodeConfig, steps: int, server: int | None) -> tuple[float, float]:
    """(acode's, the server's) CPU per step in µs, medians of the runs."""
    import acode

    runs = []
    workspace = Path(tempfile.mkdtemp(prefix="acode-bench-pg-"))
    for run in range(_RUNS):
        with acode.open_session(f"cpu {run}", workspace=workspace, config=config) as s:
            for i in range(_WARM_UP):
                s.step(f"warm-{i}", _number)
            mine, theirs = time.process_time(), _server_cpu(server)
            for i in range(steps):
                s.step(f"step-{i}", _number)
            mine, theirs = time.process_time() - mine, _server_cpu(server) - theirs
        runs.append((mine / steps * 1e6, theirs / steps * 1e6))
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def main(argv: Sequence[str] | None = None) -> int:
    from acode.domain.config import AcodeConfig, StoreSettings

    parser = argparse.ArgumentParser(prog="python -m bench.pg_store_cpu")
    parser.add_argument("url", help="postgresql:// URL of a database to write to")
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args(argv)
    os.environ.setdefault("ACODE_CHECKPOINT_SECRET", "bench-pg-store-cpu")
    store = StoreSettings(url=args.url)
    cases = [
        ("SQLite, durability full", AcodeConfig()),
        ("SQLite, durability normal", AcodeConfig(durability="normal")),
        ("PostgreSQL, durability full", AcodeConfig(store=store)),
        ("PostgreSQL, durability normal", AcodeConfig(store=store, durability="normal")),
    ]
    server = _server(args.url)
    print("| store | acode's CPU per step | the server's CPU per step |")
    print("|---|---|---|")
    for label, config in cases:
        postgres = config.store.url is not None
        mine, theirs = _per_step(config, args.steps, server if postgres else None)
        shown = f"{theirs:.0f} µs" if postgres else "(none)"
        print(f"| {label} | {mine:.0f} µs | {shown} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
