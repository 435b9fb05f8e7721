"""What every driver shares: its arguments, the step's result, the turn-taking with the
parent, the side-effect file and the report it prints.

A driver is a process that runs one engine's workflow of trivial steps. It imports
nothing but the standard library and its own engine, so that each engine pays for its
own imports and nothing else. It talks to the parent on stdout with lines that start
with ``@bench`` (an engine's own log lines may share the stream) and takes its turns
from stdin.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "PREFIX",
    "Args",
    "Mode",
    "SideEffects",
    "Turns",
    "emit",
    "kill_self",
    "parse_args",
    "payload",
]

PREFIX = "@bench "
Mode = Literal["steps", "crash", "recover", "probe"]
# Pads a step's result to about 200 bytes of JSON, the size of a small tool result
# (the same bytes as bench.workloads.payload, which imports acode and so cannot be used).
_DETAIL = "." * 123


def payload(position: int) -> dict[str, Any]:
    """The result of step ``position``: the same for every engine."""
    return {
        "position": position,
        "status": "ok",
        "checks": ["lint", "types", "tests"],
        "detail": _DETAIL,
    }


@dataclass(frozen=True)
class Args:
    """steps: time ``n`` steps in turns. crash: run steps, writing each one's position to
    ``side``, and SIGKILL this process once ``kill_after`` steps are done. recover: pick the
    killed workflow up and finish it (``probe``: stop at the first new step)."""

    mode: Mode
    n: int
    directory: Path
    variant: str
    chunk: int
    kill_after: int
    side: Path | None
    before: int = 0  # steps: recorded untimed ahead of the timed ones (bench.after_resume)
    url: str | None = None  # a PostgreSQL database for the engine (bench.pg_side_by_side)


def parse_args(argv: Sequence[str] | None = None) -> Args:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["steps", "crash", "recover", "probe"])
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--variant", default="")
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--kill-after", type=int, default=-1)
    parser.add_argument("--side", type=Path, default=None)
    parser.add_argument("--before", type=int, default=0)
    parser.add_argument("--url", default=None)
    ns = parser.parse_args(argv)
    return Args(
        ns.mode, ns.n, ns.dir, ns.variant, ns.chunk, ns.kill_after, ns.side, ns.before, ns.url
    )


def emit(kind: str, **fields: Any) -> None:
    """One protocol line to the parent."""
    sys.stdout.write(PREFIX + json.dumps({"kind": kind, **fields}) + "\n")
    sys.stdout.flush()


def kill_self() -> None:
    """Die as a power cut would let a process die: no handler, no flush, no clean-up."""
    os.kill(os.getpid(), signal.SIGKILL)


class Turns:
    """Runs the steps in chunks when the parent says so, timing each chunk alone.

    Only the time between the parent's "go" and the end of the chunk counts: the waits
    for the other engines' turns do not. The engine calls ``before(i)`` ahead of step
    ``i`` and ``end()`` after the last one. Each chunk reports its wall time and the CPU
    time of the whole process (the engine's background threads included).
    """

    def __init__(self, chunk: int) -> None:
        self._chunk = chunk
        self._started = 0.0
        self._cpu = 0.0

    def ready(self, database: Path) -> None:
        emit("ready", database=str(database))

    def before(self, i: int) -> None:
        if i % self._chunk == 0:
            if i:
                self.end()
            line = sys.stdin.readline()
            if line.strip() != "go":
                raise SystemExit(f"driver: expected 'go' from the parent, got {line!r}")
            self._started = time.perf_counter()
            self._cpu = time.process_time()

    def end(self) -> None:
        seconds = time.perf_counter() - self._started
        emit("chunk", seconds=seconds, cpu=time.process_time() - self._cpu)


class SideEffects:
    """The world outside the engine: one line per step run, appended with ``write(2)``,
    which survives the process being killed (the kernel has the bytes)."""

    def __init__(self, path: Path | None, *, probe: bool = False) -> None:
        self._fd = -1 if path is None else os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self._probe = probe
        self.loaded: float | None = None  # time.monotonic() once the engine has its state
        self.first_new: float | None = None  # time.monotonic() of this process's first run

    def mark_loaded(self) -> None:
        self.loaded = time.monotonic()

    def record(self, position: int) -> None:
        if self.first_new is None:
            self.first_new = time.monotonic()
            if self._probe:
                # Leaves the history as it found it (the step never completes), so the
                # same killed workflow can be recovered again for the next sample.
                self.report()
                os._exit(0)
        if self._fd >= 0:
            os.write(self._fd, f"{position}\n".encode())

    def report(self) -> None:
        """The recovering process's times, on the same clock as the parent's."""
        emit("recovered", loaded=self.loaded, first_new=self.first_new, finished=time.monotonic())
