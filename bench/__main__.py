"""``python -m bench [--quick | --full] [--out PATH]``: measure and write docs/benchmarks.md."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.side_by_side import SideBySideSettings

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]


def _progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def _side_by_side_settings(quick: bool, full: bool) -> SideBySideSettings:
    from bench.side_by_side import SideBySideSettings

    sizes = (1_000,) if quick else (1_000, 10_000, 100_000) if full else (1_000, 10_000)
    return SideBySideSettings(
        step_sizes=sizes,
        step_runs=3,
        turns=20,
        recovery_sizes=(1_000,) if quick else (1_000, 10_000),
        recovery_runs=3,
        history_sizes=() if quick else (100_000,),
        history_samples=3,
        # A 50,000-step history takes DBOS and LangGraph minutes to build: --full only.
        history_peers=None if full else ("acode-full", "acode-skip", "bare-full"),
        cold_samples=5,
        budget_steps=10_000,
        snapshot_files=1_000,
        budget_samples=5,
        full=full,
    )


def _nfr_sections(quick: bool, root: Path) -> list[str]:
    """NFR-004 (a step after a resume) and NFR-002 with the model probe."""
    from bench.after_resume import run_after_resume
    from bench.model_probe import run_model_probe
    from bench.nfr_report import render_after_resume, render_model_probe

    scratch = Path(tempfile.mkdtemp(prefix="acode-bench-nfr-", dir=root))
    try:
        after = run_after_resume(
            sizes=(1_000,) if quick else (1_000, 10_000),
            steps=500 if quick else 1_000,
            runs=3 if quick else 5,
            scratch=scratch,
            progress=_progress,
        )
        probe = run_model_probe(3 if quick else 5, scratch, _progress)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [render_after_resume(after), render_model_probe(probe)]


def _big_repo_section(quick: bool, full: bool, root: Path) -> str:
    """Issue 19: a run step, a snapshot, a restore, environment validation and resume
    --dry-run in a repository of 50,000 files (200,000 too with --full), beside git."""
    from bench.big_repo import run_big_repo
    from bench.big_repo_report import render_big_repo

    sizes = (10_000,) if quick else (50_000, 200_000) if full else (50_000,)
    scratch = Path(tempfile.mkdtemp(prefix="acode-bench-big-", dir=root))
    try:
        runs = [run_big_repo(n, 3 if quick else 5, 4, scratch, _progress) for n in sizes]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return render_big_repo(runs)


def _step_kinds_section(quick: bool, root: Path) -> str:
    """Every step kind against the same system calls written by hand."""
    from bench.step_kinds import run_step_kinds
    from bench.step_kinds_report import render_step_kinds

    scratch = Path(tempfile.mkdtemp(prefix="acode-bench-kinds-", dir=root))
    try:
        results = run_step_kinds(3 if quick else 5, scratch, _progress, quick=quick)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return render_step_kinds(results)


def _pg_step_section(quick: bool, root: Path) -> str:
    """Issue 22: a step on the PostgreSQL store beside DBOS on the same server."""
    from bench.pg_side_by_side import pg_step_section

    return pg_step_section(root, _progress, quick=quick)


def _fleet_recovery_section(quick: bool, root: Path) -> str:
    """Issue 22: from a dead worker's lease lapsing to its session's first new step, run
    by another worker in a fresh clone."""
    from bench.fleet_recovery import fleet_recovery_section

    return fleet_recovery_section(root, _progress, quick=quick)


def _fleet_throughput_section(quick: bool, root: Path) -> str:
    """Issue 22: one worker running I/O-bound sessions at concurrency 1, 8 and 32."""
    from bench.fleet_bench import fleet_section

    return fleet_section(root, _progress, quick=quick)


# The sections ``--only`` measures alone.
_ONLY = {
    "step-kinds": _step_kinds_section,
    "pg-step": _pg_step_section,
    "fleet-recovery": _fleet_recovery_section,
    "fleet-throughput": _fleet_throughput_section,
}


def _splice(report: str, section: str) -> str:
    """``report`` with its section of the same heading as ``section`` replaced by it
    (appended when there is none): one section measured again, the rest kept."""
    heading = section.split("\n", 1)[0]
    start = report.find(f"\n{heading}\n")
    if start < 0:
        return report.rstrip("\n") + "\n\n" + section
    end = report.find("\n## ", start + 1)
    return report[: start + 1] + section + ("" if end < 0 else report[end:])


# The one section of the report written by hand: a full run keeps it from the page it
# replaces, since it explains choices in the code rather than measures this run.
HAND_WRITTEN = "## Figures behind design choices"


def _keep_hand_written(report: str, old: str) -> str:
    """``report`` with ``old``'s hand-written section, when it has one, at its end."""
    start = old.find(f"\n{HAND_WRITTEN}\n")
    if start < 0:
        return report
    end = old.find("\n## ", start + 1)
    return _splice(report, old[start + 1 : None if end < 0 else end].rstrip("\n") + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark acode against bare SQLite inserts, DBOS and LangGraph.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="sessions of 1,000 steps only, 3 rounds"
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="also 100,000-step workflows and histories, and a repository of 200,000 files "
        "(long: tens of minutes)",
    )
    parser.add_argument("--runs", type=int, default=None, help="rounds per size (default 3)")
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "docs" / "benchmarks.md",
        help="where to write the report (default docs/benchmarks.md)",
    )
    parser.add_argument(
        "--only",
        choices=sorted(_ONLY),
        help="measure this section alone and put it into the report in place of its own",
    )
    args = parser.parse_args(argv)
    if args.runs is not None and args.runs < 3:
        parser.error("--runs must be at least 3: a median needs several rounds")
    # Signing needs a key; a key file in the home directory is not the benchmark's to make.
    os.environ["ACODE_CHECKPOINT_SECRET"] = "acode-bench-not-a-secret"

    from bench.machine import bench_root, describe, fsync_latency_us

    if args.only:
        root = bench_root(REPO)
        commit = describe(REPO, root).commit
        section = _ONLY[args.only](args.quick, root)
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        section += (
            f"\nMeasured alone, by `python -m bench --only {args.only}"
            f"{' --quick' if args.quick else ''}` on {when} at `{commit}`: not in the run "
            "the header describes.\n"
        )
        old = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(_splice(old, section), encoding="utf-8")
        print(section)
        print(f"Written into {args.out}", file=sys.stderr)
        return 0
    from bench.report import Run, render
    from bench.side_by_side import run_side_by_side
    from bench.side_by_side_report import render_side_by_side
    from bench.suite import Settings, run_suite
    from bench.sync_bench import sync_section

    settings = Settings(
        sizes=(1_000,) if args.quick else (1_000, 10_000),
        # 3, not 5: the side-by-side part needs the rest of a ten-minute run.
        runs=args.runs or 3,
        # 50,000 takes about a minute to record: not with --quick.
        resume_sizes=(1_000, 10_000) if args.quick else (1_000, 10_000, 50_000),
        resume_samples=9,
        cli_samples=3,
    )
    root = bench_root(REPO)
    machine = describe(REPO, root)
    _progress(f"databases in {root} on {machine.filesystem}")
    started = time.monotonic()
    results = run_suite(settings, root, _progress)
    peers = run_side_by_side(_side_by_side_settings(args.quick, args.full), root, _progress)
    sync = sync_section(root, _progress)
    pg = [
        _pg_step_section(args.quick, root),
        _fleet_recovery_section(args.quick, root),
        _fleet_throughput_section(args.quick, root),
    ]
    nfr = _nfr_sections(args.quick, root)
    big = _big_repo_section(args.quick, args.full, root)
    kinds = _step_kinds_section(args.quick, root)
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
    text = render(run, results, extra=[render_side_by_side(peers), sync, *pg, *nfr, big, kinds])
    old = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
    text = _keep_hand_written(text, old)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    print(f"Written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
