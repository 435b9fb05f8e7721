"""Runs the workloads in an interleaved order and gathers the numbers.

The disk's fsync latency drifts by milliseconds from one second to the next on virtual
machines. So acode and its baseline run side by side, alternating every few steps,
each round on fresh databases; medians over the rounds keep one bad round from
deciding the result.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.chain_cost import ChainCost, measure_chain
from bench.workloads import (
    DB_RELATIVE,
    AcodeRecorder,
    BareRecorder,
    Durability,
    ResumeSample,
    cli_seconds,
    database_bytes,
    empty_session_bytes,
    interleaved,
    preview_seconds,
    resume_once,
    table_bytes,
)

__all__ = ["CHAIN_STEPS", "CHUNK", "VARIANTS", "Results", "Settings", "Variant", "run_suite"]

# The session whose events the chain's cost is measured on: the resume target's size.
CHAIN_STEPS = 10_000
CHAIN_ROUNDS = 5
# Steps each side records before the other takes its turn: at a few milliseconds a
# step, turns of a fraction of a second, shorter than the drift they are meant to share.
CHUNK = 50


@dataclass(frozen=True)
class Variant:
    key: str
    label: str
    durability: Durability


VARIANTS = (
    Variant("acode-full", "acode, durability full (default)", "full"),
    Variant("bare-full", "bare SQLite insert, synchronous=FULL", "full"),
    Variant("acode-normal", "acode, durability normal", "normal"),
    Variant("bare-normal", "bare SQLite insert, synchronous=NORMAL", "normal"),
)


@dataclass(frozen=True)
class Settings:
    sizes: tuple[int, ...]
    runs: int
    resume_sizes: tuple[int, ...]
    resume_samples: int
    cli_samples: int


@dataclass
class Results:
    # (steps, variant key) -> microseconds per step, one value per round, in round order
    per_step_us: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    # (steps, variant key) -> database bytes per step, one value per round
    bytes_per_step: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    # bytes per table (indexes included) of the largest acode durability-full session
    tables: dict[str, int] = field(default_factory=dict)
    tables_steps: int = 0
    session_overhead_bytes: int = 0
    resume: dict[int, list[ResumeSample]] = field(default_factory=dict)
    dry_run_seconds: dict[int, list[float]] = field(default_factory=dict)
    # (steps, whether the whole history was verified) -> preview_resume() seconds
    preview_seconds: dict[tuple[int, bool], list[float]] = field(default_factory=dict)
    chain: ChainCost | None = None
    startup_seconds: list[float] = field(default_factory=list)

    def median_us(self, steps: int, key: str) -> float:
        return statistics.median(self.per_step_us[(steps, key)])

    def ratio(self, steps: int, key: str, base: str = "bare-full") -> float:
        return statistics.median(self.ratios(steps, key, base))

    def ratios(self, steps: int, key: str, base: str = "bare-full") -> list[float]:
        """Per-round ratios: each round's value over the baseline it ran beside."""
        pairs = zip(self.per_step_us[(steps, key)], self.per_step_us[(steps, base)], strict=True)
        return [value / baseline for value, baseline in pairs]


def run_suite(settings: Settings, root: Path, progress: Callable[[str], None]) -> Results:
    results = Results()
    scratch = Path(tempfile.mkdtemp(prefix="acode-bench-", dir=root))
    try:
        results.session_overhead_bytes = empty_session_bytes(scratch / "empty")
        for r in range(settings.runs):
            for n in settings.sizes:
                for durability in ("full", "normal"):
                    _round(n, durability, scratch / f"round-{r}-{n}-{durability}", results)
                    acode_us = results.per_step_us[(n, f"acode-{durability}")][-1]
                    bare_us = results.per_step_us[(n, f"bare-{durability}")][-1]
                    progress(
                        f"round {r + 1}/{settings.runs}  {n:>6,} steps  {durability:<6}  "
                        f"acode {acode_us:8.1f} us/step   bare {bare_us:8.1f} us/step"
                    )
        _measure_resume(settings, scratch, results, progress)
        results.startup_seconds = [cli_seconds("--help") for _ in range(settings.cli_samples)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def _round(n: int, durability: Durability, directory: Path, results: Results) -> None:
    """acode and the bare baseline side by side, ``n`` steps each, on fresh databases."""
    engine = AcodeRecorder(directory / "acode", durability)
    try:
        bare = BareRecorder(directory / "bare", durability)
        try:
            acode_seconds, bare_seconds = interleaved((engine, bare), n, CHUNK)
        finally:
            bare.close()
    finally:
        engine.close()
    acode_bytes = database_bytes(engine.database) - results.session_overhead_bytes
    for key, seconds, size in (
        (f"acode-{durability}", acode_seconds, acode_bytes),
        (f"bare-{durability}", bare_seconds, database_bytes(bare.database)),
    ):
        results.per_step_us.setdefault((n, key), []).append(seconds / n * 1e6)
        results.bytes_per_step.setdefault((n, key), []).append(size / n)
    if durability == "full" and n >= results.tables_steps:
        results.tables, results.tables_steps = table_bytes(engine.database), n
    shutil.rmtree(directory)


def _measure_resume(
    settings: Settings, scratch: Path, results: Results, progress: Callable[[str], None]
) -> None:
    """Resume sessions of each size in turns, so that drift hits every size alike."""
    subjects: dict[int, tuple[Path, str]] = {}
    for n in settings.resume_sizes:
        progress(f"building a resumable session of {n:,} steps")
        workspace = scratch / f"resume-{n}"
        engine = AcodeRecorder(workspace, "full")
        try:
            for i in range(n):
                engine.record(i)
        finally:
            engine.close()
        subjects[n] = (workspace, engine.session_id)
    if CHAIN_STEPS in subjects:
        workspace, session_id = subjects[CHAIN_STEPS]
        database = workspace / DB_RELATIVE
        results.chain = measure_chain(database, session_id, CHAIN_STEPS, CHAIN_ROUNDS)
        progress(
            f"chain links per event: keyed {results.chain.keyed_us:.2f} us, "
            f"plain SHA-256 {results.chain.plain_us:.2f} us"
        )
    for _ in range(settings.resume_samples):
        for n, (workspace, session_id) in subjects.items():
            results.resume.setdefault(n, []).append(resume_once(workspace, session_id, n))
    for _ in range(settings.cli_samples):
        for n, (workspace, session_id) in subjects.items():
            command = ("resume", session_id, "--dry-run", "-w", str(workspace))
            results.dry_run_seconds.setdefault(n, []).append(cli_seconds(*command))
            for verify in (False, True):
                seconds = preview_seconds(workspace, session_id, verify=verify)
                results.preview_seconds.setdefault((n, verify), []).append(seconds)
    for n, samples in results.resume.items():
        load = statistics.median(s.load_seconds for s in samples) * 1e3
        progress(f"resume of {n:>6,} steps: load {load:.2f} ms (median of {len(samples)})")
