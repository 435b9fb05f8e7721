"""``python -m bench [--quick] [--out PATH]``: measure and write docs/benchmarks.md."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]


def _progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Benchmark acode against bare SQLite inserts."
    )
    parser.add_argument(
        "--quick", action="store_true", help="sessions of 1,000 steps only, 3 rounds"
    )
    parser.add_argument(
        "--runs", type=int, default=None, help="rounds per size (default 3 quick, 5 full)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "docs" / "benchmarks.md",
        help="where to write the report (default docs/benchmarks.md)",
    )
    args = parser.parse_args(argv)
    if args.runs is not None and args.runs < 3:
        parser.error("--runs must be at least 3: a median needs several rounds")
    # Signing needs a key; a key file in the home directory is not the benchmark's to make.
    os.environ["ACODE_CHECKPOINT_SECRET"] = "acode-bench-not-a-secret"

    from bench.machine import bench_root, describe, fsync_latency_us
    from bench.report import Run, render
    from bench.suite import Settings, run_suite

    settings = Settings(
        sizes=(1_000,) if args.quick else (1_000, 10_000),
        runs=args.runs or (3 if args.quick else 5),
        resume_sizes=(1_000, 10_000),
        resume_samples=9,
        cli_samples=3,
    )
    root = bench_root(REPO)
    machine = describe(REPO, root)
    _progress(f"databases in {root} on {machine.filesystem}")
    started = time.monotonic()
    results = run_suite(settings, root, _progress)
    minutes = (time.monotonic() - started) / 60
    machine = replace(machine, fsync_after_us=fsync_latency_us(root))
    command = " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])])
    run = Run(
        command=command,
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        minutes=minutes,
        machine=machine,
        settings=settings,
    )
    text = render(run, results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    print(f"Written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
