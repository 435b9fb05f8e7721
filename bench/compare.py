"""Per-step overhead side by side: every engine in its own process, all of them taking
turns, each turn the same share of its steps, so that the machine's drift hits them
alike. The engines that wait for the disk at every commit take turns among themselves,
and those that do not among themselves: a neighbour's fsyncs would stall the latter's
writes.

An engine waits stopped (SIGSTOP) through the others' turns, while the wall clock runs
on: the finer the turns, the more of an engine's run is spent stopped and the more
anything it paces by the wall clock happens in its own time. acode rewrites its progress
file at most once a second of wall time: in fine turns its run spreads over many more
seconds and it renders the file many times more often than in a run on its own, which
shows in the cost of a step (docs/benchmarks.md, "Figures behind design choices"). Each
turn also starts on caches another engine filled. A run is therefore cut into a fixed
number of turns (``turns``): 50 steps a turn at 1,000 steps, 500 at 10,000.
"""

from __future__ import annotations

import math
import shutil
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.peers import PEERS, Peer, available, fits
from bench.peers.launch import Driver
from bench.workloads import database_bytes

__all__ = ["BASE", "StepResults", "run_steps"]

BASE = "acode-full"  # what every ratio is taken against


@dataclass
class StepResults:
    peers: tuple[Peer, ...] = ()
    # (steps, peer key) -> µs per step, one value per round, in round order
    per_step_us: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    # (steps, peer key) -> database bytes at the end, one value per round
    db_bytes: dict[tuple[int, str], list[int]] = field(default_factory=dict)

    def has(self, steps: int, key: str) -> bool:
        return (steps, key) in self.per_step_us

    def median_us(self, steps: int, key: str) -> float:
        return statistics.median(self.per_step_us[(steps, key)])

    def ratios(self, steps: int, key: str, base: str = BASE) -> list[float]:
        """``key``'s time over ``base``'s, round by round."""
        pairs = zip(self.per_step_us[(steps, key)], self.per_step_us[(steps, base)], strict=True)
        return [value / reference for value, reference in pairs]

    def ratio(self, steps: int, key: str, base: str = BASE) -> float:
        """The median over rounds of ``key``'s time over ``base``'s in the same round."""
        return statistics.median(self.ratios(steps, key, base))

    def bytes_per_step(self, steps: int, key: str) -> float | None:
        sizes = self.db_bytes.get((steps, key))
        return None if not sizes else statistics.median(sizes) / steps


def run_steps(
    sizes: Sequence[int],
    runs: int,
    turns: int,
    scratch: Path,
    progress: Callable[[str], None],
    *,
    full: bool,
) -> StepResults:
    peers = tuple(p for p in PEERS if p.steps and available(p))
    results = StepResults(peers=peers)
    for r in range(runs):
        for n in sizes:
            for durable in (True, False):
                group = [p for p in peers if p.durable is durable and fits(p, n, full=full)]
                # Who goes first changes from round to round as well as from turn to turn.
                shift = r % len(group)
                group = group[shift:] + group[:shift]
                chunk = math.ceil(n / turns)
                _round(n, group, chunk, scratch / f"steps-{r}-{n}-{durable}", results)
                summary = "  ".join(
                    f"{p.key} {results.per_step_us[(n, p.key)][-1]:,.0f}" for p in group
                )
                progress(f"steps round {r + 1}/{runs}  {n:>7,} steps  us/step: {summary}")
    return results


def _round(
    n: int, peers: Sequence[Peer], chunk: int, directory: Path, results: StepResults
) -> None:
    drivers: list[Driver] = []
    try:
        for peer in peers:
            drivers.append(Driver(peer, n, directory / peer.key, chunk))
        totals = [0.0] * len(drivers)
        order = list(range(len(drivers)))
        for _ in range(math.ceil(n / chunk)):
            for index in order:
                totals[index] += drivers[index].turn()
            order.reverse()
        for driver in drivers:
            driver.finish()
    except BaseException:
        for driver in drivers:
            driver.kill()
        raise
    for driver, seconds in zip(drivers, totals, strict=True):
        key = driver.peer.key
        results.per_step_us.setdefault((n, key), []).append(seconds / n * 1e6)
        if driver.database.exists():
            results.db_bytes.setdefault((n, key), []).append(database_bytes(driver.database))
    shutil.rmtree(directory)
