"""Every step kind against its bare equivalent, in-process: µs per step of acode's
``Session.read`` / ``write`` / ``edit`` / ``run`` / ``commit`` (durability full, the
default) against ``bench.bare_kinds``, which does the same system calls with the same
guarantees by hand.

In a round, each kind gets a fresh acode workspace and a fresh bare one, built alike
(the same files; a small git repository for the kinds that need one), and the two take
turns, a few steps each at a time, the order reversing every turn and every round, so
that the machine's drift hits both alike. A side's µs per step in a round is that of its
median turn; a round's ratio is the median of its turns' ratios, each acode turn over the
bare turn beside it; a kind's ratio is the median of its rounds'.

``python -m bench.step_kinds [--quick]`` prints this section alone (the whole report is
``python -m bench``; ``python -m bench --only step-kinds`` measures this section alone
and puts it into the report in place of the one there).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bare_kinds import BareKinds

__all__ = ["KINDS", "Kind", "StepKinds", "main", "run_step_kinds"]

_FILES = 20  # the files the file kinds take turns on
_REPO_FILES = 200  # a small repository: what `run` without paths snapshots
_TURNS = 8  # turns per kind and round, each side (half with --quick)


@dataclass(frozen=True)
class Kind:
    key: str
    label: str
    git: bool  # its workspace is a git repository
    turn: int  # steps per turn


KINDS = (
    Kind("read", "read", False, 25),
    Kind("write", "write", False, 25),
    Kind("edit", "edit", False, 25),
    Kind("run-paths", "run, `paths: [log.txt]`", False, 3),
    Kind("run-ghost", f"run without `paths`, git repository of {_REPO_FILES} files", True, 2),
    Kind("commit", "commit", True, 2),
)


@dataclass
class StepKinds:
    rounds: int
    steps: dict[str, int] = field(default_factory=dict)  # kind -> steps timed a round, a side
    # (kind, "acode" | "bare") -> µs per step, one value per round
    per_step_us: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    # kind -> one ratio a round: the median over its turns of acode's turn over the bare
    # turn beside it, so that a stall of the machine weighs on one pair, not on a round
    round_ratios: dict[str, list[float]] = field(default_factory=dict)
    # the disk's fsync of a 200-byte append before and after, for what the rounds saw
    fsync_us: tuple[float, float] = (0.0, 0.0)

    def ratios(self, kind: str) -> list[float]:
        return self.round_ratios[kind]

    def ratio(self, kind: str) -> float:
        return statistics.median(self.ratios(kind))


def _populate(workspace: Path, git: bool) -> None:
    workspace.mkdir(parents=True)
    for i in range(_FILES):
        (workspace / f"f{i}.txt").write_text(f"file {i}\nvalue = v0\n", encoding="utf-8")
    (workspace / "log.txt").write_text("", encoding="utf-8")
    if not git:
        return
    for i in range(_REPO_FILES - _FILES - 1):
        folder = workspace / "src" / f"pkg{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{i}.py").write_text(f"VALUE = {i}\n", encoding="utf-8")
    for args in (
        ["init", "--quiet"],
        ["config", "user.name", "bench"],
        ["config", "user.email", "bench@example.invalid"],
        ["add", "-A"],
        ["commit", "--quiet", "-m", "start"],
    ):
        subprocess.run(["git", *args], cwd=workspace, check=True, capture_output=True)


class _Sides:
    """One kind's two workspaces and what a step of the kind is on each side."""

    def __init__(self, kind: Kind, scratch: Path) -> None:
        import acode

        self.kind = kind
        self._acode_ws, bare_ws = scratch / "acode", scratch / "bare"
        _populate(self._acode_ws, kind.git)
        _populate(bare_ws, kind.git)
        self.session = acode.open_session(f"bench {kind.key}", self._acode_ws)
        self.bare = BareKinds(bare_ws, scratch / "bare.db")
        self._done = {"acode": 0, "bare": 0}

    def close(self) -> None:
        self.session.close()
        self.bare.close()

    def steps(self, side: str, count: int) -> float:
        """µs per step of ``count`` steps on ``side``."""
        step = self._acode_step if side == "acode" else self._bare_step
        first = self._done[side]
        gc.collect()
        started = time.perf_counter()
        for i in range(first, first + count):
            step(i)
        elapsed = time.perf_counter() - started
        self._done[side] = first + count
        return elapsed / count * 1e6

    def _acode_step(self, i: int) -> Any:
        s, key, name = self.session, f"s{i}", f"f{i % _FILES}.txt"
        match self.kind.key:
            case "read":
                return s.read(key, name)
            case "write":
                return s.write(key, name, f"file {i}\nvalue = w{i}\n")
            case "edit":
                return s.edit(key, name, *_edit(i))
            case "run-paths":
                return s.run(key, f"echo {i} >> log.txt", paths=["log.txt"])
            case "run-ghost":
                return s.run(key, f"echo {i} >> log.txt")
            case _:
                (self._acode_ws / "log.txt").write_text(f"{i}\n", encoding="utf-8")
                return s.commit(key, f"step {i}")

    def _bare_step(self, i: int) -> Any:
        b, key, name = self.bare, f"s{i}", f"f{i % _FILES}.txt"
        match self.kind.key:
            case "read":
                return b.read(key, name)
            case "write":
                return b.write(key, name, f"file {i}\nvalue = w{i}\n".encode())
            case "edit":
                return b.edit(key, name, *_edit(i))
            case "run-paths":
                return b.run(key, f"echo {i} >> log.txt", ("log.txt",))
            case "run-ghost":
                return b.run(key, f"echo {i} >> log.txt", ())
            case _:
                (b.workspace / "log.txt").write_text(f"{i}\n", encoding="utf-8")
                return b.commit(key, f"step {i}")


def _edit(i: int) -> tuple[str, str]:
    """The i-th edit: each file's value goes v0 -> v1 -> v2 ... one step at a time."""
    turn = i // _FILES
    return f"value = v{turn}\n", f"value = v{turn + 1}\n"


def run_step_kinds(
    rounds: int,
    scratch: Path,
    progress: Callable[[str], None],
    *,
    quick: bool = False,
    kinds: Sequence[Kind] = KINDS,
) -> StepKinds:
    from bench.machine import fsync_latency_us

    results = StepKinds(rounds)
    turns = _TURNS // 2 if quick else _TURNS
    before = fsync_latency_us(scratch)
    for kind in kinds:
        results.steps[kind.key] = kind.turn * turns
    for round_ in range(rounds):
        progress(f"step kinds: round {round_ + 1} of {rounds}")
        for index, kind in enumerate(kinds):
            directory = Path(tempfile.mkdtemp(prefix=f"kind-{kind.key}-", dir=scratch))
            sides = _Sides(kind, directory)
            timed: dict[str, list[float]] = {"acode": [], "bare": []}
            try:
                for turn in range(turns):
                    order = ("acode", "bare") if (turn + round_ + index) % 2 else ("bare", "acode")
                    for side in order:
                        timed[side].append(sides.steps(side, kind.turn))
            finally:
                sides.close()
                shutil.rmtree(directory, ignore_errors=True)
            for side, values in timed.items():
                results.per_step_us.setdefault((kind.key, side), []).append(
                    statistics.median(values)
                )
            pairs = zip(timed["acode"], timed["bare"], strict=True)
            results.round_ratios.setdefault(kind.key, []).append(
                statistics.median(mine / theirs for mine, theirs in pairs)
            )
    results.fsync_us = (before, fsync_latency_us(scratch))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.step_kinds",
        description="Every step kind against its bare equivalent; prints the section.",
    )
    parser.add_argument("--quick", action="store_true", help="3 rounds of half the turns")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5; 3 quick)")
    parser.add_argument(
        "--kind",
        action="append",
        choices=[k.key for k in KINDS],
        help="measure this kind only (again for more than one)",
    )
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 3:
        parser.error("--rounds must be at least 3: a median needs several rounds")
    os.environ.setdefault("ACODE_CHECKPOINT_SECRET", "acode-bench-not-a-secret")
    from bench.machine import bench_root
    from bench.step_kinds_report import render_step_kinds

    root = bench_root(Path(__file__).resolve().parents[1])
    scratch = Path(tempfile.mkdtemp(prefix="acode-bench-kinds-", dir=root))
    kinds = [k for k in KINDS if not args.kind or k.key in args.kind]
    try:
        results = run_step_kinds(
            args.rounds or (3 if args.quick else 5),
            scratch,
            lambda message: print(f"  {message}", file=sys.stderr, flush=True),
            quick=args.quick,
            kinds=kinds,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(render_step_kinds(results, kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
