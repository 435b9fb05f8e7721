"""Crash recovery side by side: a workflow of N trivial steps SIGKILLs itself once N/2
are done; a new process picks it up. Measured from the new process's start (Python
start-up and imports included): until the engine has loaded its state, until the first
step that had not run before runs, and until the last step is done; and, from a file
each step appends its position to, how many steps ran twice (or never)."""

from __future__ import annotations

import shutil
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.peers import PEERS, Peer, available, fits
from bench.peers.launch import run_driver

__all__ = ["Recovery", "RecoveryResults", "run_history", "run_recovery"]


@dataclass(frozen=True)
class Recovery:
    loaded_s: float  # process start -> the engine has its state (acode: resume_session returned)
    first_new_s: float  # process start -> the first step that had not run before starts
    finished_s: float | None  # process start -> the last step done (None: probed only)
    duplicates: int | None  # steps whose side effect happened twice (None: probed only)
    missing: int | None  # steps whose side effect never happened


@dataclass
class RecoveryResults:
    peers: tuple[Peer, ...] = ()
    # (steps in the workflow, peer key) -> one sample per round
    samples: dict[tuple[int, str], list[Recovery]] = field(default_factory=dict)

    def has(self, steps: int, key: str) -> bool:
        return (steps, key) in self.samples

    def median(self, steps: int, key: str, what: str) -> float:
        values = [getattr(s, what) for s in self.samples[(steps, key)]]
        return float(statistics.median(v for v in values if v is not None))

    def worst_duplicates(self, steps: int, key: str) -> int | None:
        counts = [s.duplicates for s in self.samples[(steps, key)] if s.duplicates is not None]
        return max(counts) if counts else None

    def worst_missing(self, steps: int, key: str) -> int | None:
        counts = [s.missing for s in self.samples[(steps, key)] if s.missing is not None]
        return max(counts) if counts else None


def _peers(full: bool, steps: int) -> list[Peer]:
    return [p for p in PEERS if p.recovers and available(p) and fits(p, steps, full=full)]


def _crash(peer: Peer, n: int, directory: Path, side: Path) -> None:
    _, status, _ = run_driver(
        peer, "crash", n, directory, ["--kill-after", str(n // 2), "--side", str(side)]
    )
    if status != -9:
        raise RuntimeError(f"{peer.key}: the crash run exited {status} instead of being killed")


def _recover(peer: Peer, n: int, directory: Path, side: Path, mode: str) -> Recovery:
    started, _, report = run_driver(peer, mode, n, directory, ["--side", str(side)])
    if report is None or report["first_new"] is None:
        raise RuntimeError(f"{peer.key}: the recovery ran no new step")
    first_new = report["first_new"] - started
    # An engine that recovers in a background thread may run a step before the call
    # that loaded it returns: then it had loaded by the first new step.
    loaded = first_new if report["loaded"] is None else min(report["loaded"] - started, first_new)
    if mode == "probe":
        return Recovery(loaded, first_new, None, None, None)
    seen = Counter(side.read_text(encoding="ascii").split())
    return Recovery(
        loaded_s=loaded,
        first_new_s=first_new,
        finished_s=report["finished"] - started,
        duplicates=sum(count - 1 for count in seen.values()),
        missing=n - len(seen),
    )


def run_recovery(
    sizes: Sequence[int],
    runs: int,
    scratch: Path,
    progress: Callable[[str], None],
    *,
    full: bool,
    results: RecoveryResults | None = None,
) -> RecoveryResults:
    """Kill and recover each engine ``runs`` times at each size, taking turns."""
    results = results or RecoveryResults(peers=tuple(_peers(full, 0)))
    for r in range(runs):
        for n in sizes:
            peers = _peers(full, n)
            shift = r % len(peers)
            for peer in peers[shift:] + peers[:shift]:
                directory = scratch / f"recover-{r}-{n}-{peer.key}"
                side = directory.with_suffix(".side")
                _crash(peer, n, directory, side)
                sample = _recover(peer, n, directory, side, "recover")
                results.samples.setdefault((n, peer.key), []).append(sample)
                shutil.rmtree(directory)
                side.unlink()
            line = "  ".join(
                f"{p.key} {results.samples[(n, p.key)][-1].first_new_s * 1e3:,.0f}" for p in peers
            )
            progress(f"recovery round {r + 1}/{runs}  {n:>7,} steps  ms to first new: {line}")
    return results


def run_history(
    sizes: Sequence[int],
    samples: int,
    scratch: Path,
    progress: Callable[[str], None],
    *,
    results: RecoveryResults,
    keys: Sequence[str] | None,
) -> None:
    """Long histories: one crash run each, then ``samples`` recoveries that stop at the
    first new step, leaving the history as they found it; for the peers ``keys`` (None:
    every one that runs that many steps with --full)."""
    for n in sizes:
        peers = [p for p in _peers(True, n) if keys is None or p.key in keys]
        for peer in peers:
            directory = scratch / f"history-{n}-{peer.key}"
            side = directory.with_suffix(".side")
            progress(f"history of {n // 2:,} steps for {peer.key}")
            _crash(peer, n, directory, side)
            for _ in range(samples):
                sample = _recover(peer, n, directory, side, "probe")
                results.samples.setdefault((n, peer.key), []).append(sample)
            shutil.rmtree(directory)
            side.unlink()
