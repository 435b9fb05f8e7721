"""NFR-004, no performance degradation against a fresh start: the cost of a step in a
session that was killed after N steps and resumed, against the same steps in a fresh
session.

Each round builds nothing new: a crash run of the acode driver records N steps and
SIGKILLs itself once, and every round resumes a copy of what it left. Three drivers of
the same kind (``python -m bench.peers.acode_driver steps``, the same durability) then
record M steps each, taking turns every CHUNK steps while the others are stopped, as the
side-by-side runs do: a fresh session; the killed one resumed, its N steps called again
(replayed) before the timed ones; the killed one resumed with ``skip_completed()``. Only
the M new steps are timed; the load and the replay are not (bench.suite measures them).
A fourth, never interrupted, records N steps untimed in its own process before its M:
against it, what the resume costs shows apart from what a longer session costs.
"""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.peers import Peer
from bench.peers.launch import Driver, run_driver

__all__ = ["KINDS", "AfterResume", "run_after_resume"]

CHUNK = 50
# (key, label): how the measured session came to be. The first is the baseline.
KINDS = (
    ("fresh", "fresh session"),
    ("uninterrupted", "never interrupted, N steps recorded first"),
    ("resumed", "killed, resumed, completed steps replayed"),
    ("resumed-skip", "killed, resumed with skip_completed()"),
)


@dataclass
class AfterResume:
    steps: int  # M: the steps timed in each session
    # (durability, N steps done before the kill, kind) -> µs per step, one value per round
    per_step_us: dict[tuple[str, int, str], list[float]] = field(default_factory=dict)

    def ratios(self, durability: str, done: int, kind: str, base: str = "fresh") -> list[float]:
        """Per-round ratios: each round's value over ``base``'s of that round."""
        pairs = zip(
            self.per_step_us[(durability, done, kind)],
            self.per_step_us[(durability, done, base)],
            strict=True,
        )
        return [value / baseline for value, baseline in pairs]

    def ratio(self, durability: str, done: int, kind: str, base: str = "fresh") -> float:
        return statistics.median(self.ratios(durability, done, kind, base))


def _peer(durability: str, kind: str) -> Peer:
    variant = durability if kind in ("fresh", "uninterrupted") else f"{durability}-{kind}"
    return Peer(f"acode-{variant}", f"acode, {variant}", "bench.peers.acode_driver", variant)


def _killed_session(durability: str, done: int, directory: Path) -> None:
    """A session of ``done`` steps, its process SIGKILLed before the next one."""
    _, status, _ = run_driver(
        _peer(durability, "fresh"), "crash", done + 1, directory, ["--kill-after", str(done)]
    )
    if status != -9:
        raise RuntimeError(f"the crash run of {done} steps exited {status} instead of being killed")


def _round(
    durability: str, done: int, steps: int, shift: int, template: Path, directory: Path
) -> dict[str, float]:
    drivers: list[tuple[str, Driver]] = []
    try:
        for kind, _ in KINDS:
            workspace = directory / kind
            extra = ["--before", str(done)] if kind == "uninterrupted" else []
            if kind.startswith("resumed"):
                shutil.copytree(template, workspace, symlinks=True)
            peer = _peer(durability, kind)
            drivers.append((kind, Driver(peer, steps, workspace, CHUNK, extra)))
        order = drivers[shift % len(drivers) :] + drivers[: shift % len(drivers)]
        seconds = dict.fromkeys((kind for kind, _ in KINDS), 0.0)
        for _ in range(-(-steps // CHUNK)):
            for kind, driver in order:
                seconds[kind] += driver.turn()
            order.reverse()
        for _, driver in drivers:
            driver.finish()
    finally:
        for _, driver in drivers:
            driver.kill()
    shutil.rmtree(directory)
    return {kind: value / steps * 1e6 for kind, value in seconds.items()}


def run_after_resume(
    sizes: Sequence[int],
    steps: int,
    runs: int,
    scratch: Path,
    progress: Callable[[str], None],
) -> AfterResume:
    results = AfterResume(steps=steps)
    for durability in ("full", "normal"):
        for done in sizes:
            template = scratch / f"killed-{durability}-{done}"
            progress(f"after resume: a {durability} session killed after {done:,} steps")
            _killed_session(durability, done, template)
            for r in range(runs):
                directory = scratch / f"after-resume-{durability}-{done}-{r}"
                costs = _round(durability, done, steps, r, template, directory)
                for kind, us in costs.items():
                    results.per_step_us.setdefault((durability, done, kind), []).append(us)
                line = "  ".join(f"{kind} {us:,.1f}" for kind, us in costs.items())
                progress(
                    f"after resume round {r + 1}/{runs}  {durability:<6} {done:>6,} done  "
                    f"µs/step: {line}"
                )
            shutil.rmtree(template)
    return results
