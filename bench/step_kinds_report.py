"""The section of docs/benchmarks.md on every step kind against its bare equivalent."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from bench.step_kinds import KINDS, Kind, StepKinds

__all__ = ["HEADING", "KIND_TARGET", "render_step_kinds"]

HEADING = "## Every step kind against its bare equivalent"
# Issue 19: every kind within 1.5x the same system calls written by hand.
KIND_TARGET = 1.5

# What the bare loop of each kind does (bench.bare_kinds), as the table says it.
_BARE = {
    "read": "open, fstat, read, SHA-256; 1 FULL commit (content blob, file row)",
    "write": "read the pre-image; FULL commit (pre, post); temp file outside the workspace, "
    "fsync, rename, directory fsync; stat; FULL commit",
    "edit": "as write, the post-image made by replacing the text once",
    "run-paths": "read the declared file; FULL commit (its snapshot); `sh -c` in a new "
    "session noting its group, output captured (no time-out); the file hashed again; "
    "FULL commit",
    "run-ghost": "copy of the index, `git add -A`, `write-tree`, `commit-tree`, "
    "`update-ref`; FULL commit; `sh -c` as above; FULL commit",
    "commit": "`git add -A`, `git commit` with the trailer, `git rev-parse HEAD`; FULL commit",
}


def _us(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def render_step_kinds(results: StepKinds, kinds: Sequence[Kind] = KINDS) -> str:
    lines = [
        HEADING,
        "",
        "A coding session is mostly reads, writes, edits, commands and commits. Each kind, "
        "in-process through the library (`acode.open_session`, durability full, the "
        "default), against `bench/bare_kinds.py`: the same system calls with the same "
        "guarantees written by hand (what each kind must fsync, and why, is in "
        'docs/architecture.md, "What a step kind fsyncs"). In a round each kind gets '
        "fresh workspaces alike on both sides (20 small files; for the git kinds a "
        "repository of 200 files), and the two sides take turns: 8 turns a round each "
        "(4 with `--quick`), the order alternating, each turn a few steps (25 of the file "
        "kinds, 3 of a run with paths, 2 of the git kinds). "
        "A side's µs per step in a round are its median turn's; a round's ratio is the "
        "median of its turns' ratios, each acode turn over the bare turn beside it (a "
        "stall of the machine weighs on one pair, not on the round); medians of "
        f"{results.rounds} rounds, and x bare the median of the rounds' ratios. "
        "The disk's fsync of a 200-byte append took "
        f"{_us(results.fsync_us[0])} µs before the rounds and {_us(results.fsync_us[1])} "
        "µs after (medians of 200): where it is slow, or the machine busy, the system "
        "calls both sides share weigh more and the ratios come closer to 1.",
        "",
        "| kind | steps a round | acode µs per step | bare µs per step | x bare "
        "| per-round ratios | the bare loop does | |",
        "|---|---:|---:|---:|---:|---|---|---|",
    ]
    for kind in kinds:
        acode = results.per_step_us[(kind.key, "acode")]
        bare = results.per_step_us[(kind.key, "bare")]
        ratio = results.ratio(kind.key)
        spread = ", ".join(f"{r:.2f}" for r in results.ratios(kind.key))
        verdict = "met" if ratio <= KIND_TARGET else "**missed**"
        lines.append(
            f"| {kind.label} | {results.steps[kind.key]} | {_us(statistics.median(acode))} "
            f"| {_us(statistics.median(bare))} | {ratio:.2f} | {spread} "
            f"| {_BARE[kind.key]} | {verdict} |"
        )
    lines += [
        "",
        f"Target: every kind within {KIND_TARGET:g}x its bare equivalent.",
    ]
    return "\n".join(lines) + "\n"
