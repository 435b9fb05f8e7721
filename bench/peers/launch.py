"""The parent's side of a driver: start it, give it its turns, read what it reports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from bench.peers import Peer
from bench.peers.protocol import PREFIX

__all__ = ["REPO", "Driver", "driver_env", "run_driver"]

REPO = Path(__file__).resolve().parents[2]


def driver_env() -> dict[str, str]:
    env = dict(os.environ)
    # Signing needs a key; a key file in the home directory is not the benchmark's to make.
    env.setdefault("ACODE_CHECKPOINT_SECRET", "acode-bench-not-a-secret")
    # Every process here starts as a person's second run would: from cached byte code.
    # Without the cache, each would compile acode's sources again (the peers' installs
    # come compiled), which is no cost of acode's that a user pays twice.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # Drivers are run as ``python -m bench.peers.X`` from any directory.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _command(peer: Peer, mode: str, n: int, directory: Path, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        peer.module,
        mode,
        "--n",
        str(n),
        "--dir",
        str(directory),
        "--variant",
        peer.variant,
        *extra,
    ]


class Driver:
    """A driver in ``steps`` mode, running its steps a chunk at a time when told to."""

    def __init__(
        self, peer: Peer, n: int, directory: Path, chunk: int, extra: Sequence[str] = ()
    ) -> None:
        self.peer = peer
        self.cpu_seconds: list[float] = []  # the process's CPU time in each turn
        # Lives as long as the driver: its stderr, shown if the driver dies.
        self._errors: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self._process = subprocess.Popen(
            _command(peer, "steps", n, directory, ["--chunk", str(chunk), *extra]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            text=True,
            env=driver_env(),
            cwd=REPO,
        )
        self.database = Path(self._expect("ready")["database"])
        os.kill(self._process.pid, signal.SIGSTOP)  # until its first turn (see turn)

    def turn(self) -> float:
        """One chunk of steps; the seconds it took. Between its turns the driver is
        stopped (SIGSTOP): an engine's background threads (DBOS polls its database,
        LangGraph's async durability writes its checkpoints) do their work in its own
        turns, never in another engine's, whose caches and timings they would disturb."""
        assert self._process.stdin is not None
        os.kill(self._process.pid, signal.SIGCONT)
        self._process.stdin.write("go\n")
        self._process.stdin.flush()
        chunk = self._expect("chunk")
        os.kill(self._process.pid, signal.SIGSTOP)
        self.cpu_seconds.append(float(chunk["cpu"]))
        return float(chunk["seconds"])

    def finish(self) -> None:
        os.kill(self._process.pid, signal.SIGCONT)
        self._expect("done")
        self._process.wait(timeout=120)
        self._errors.close()

    def kill(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._errors.close()

    def _expect(self, kind: str) -> dict[str, Any]:
        message = _read(self._process.stdout, self.peer, self._errors)
        if message["kind"] != kind:
            raise RuntimeError(f"{self.peer.key}: expected {kind!r}, got {message}")
        return message


def _read(stream: IO[str] | None, peer: Peer, errors: IO[bytes]) -> dict[str, Any]:
    """The next protocol line; other lines (an engine's own logging) are skipped."""
    assert stream is not None
    for line in stream:
        if line.startswith(PREFIX):
            message: dict[str, Any] = json.loads(line[len(PREFIX) :])
            return message
    errors.seek(0)
    detail = errors.read().decode(errors="replace")[-3000:]
    raise RuntimeError(f"driver {peer.key} ended without a report:\n{detail}")


def run_driver(
    peer: Peer, mode: str, n: int, directory: Path, extra: list[str]
) -> tuple[float, int, dict[str, Any] | None]:
    """Run a driver to its end: (when it was started on the monotonic clock, its exit
    status, its ``recovered`` report if it made one)."""
    with tempfile.TemporaryFile() as errors:
        started = time.monotonic()
        done = subprocess.run(
            _command(peer, mode, n, directory, extra),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=driver_env(),
            cwd=REPO,
            check=False,
        )
        report = None
        for line in done.stdout.splitlines():
            if line.startswith(PREFIX):
                message = json.loads(line[len(PREFIX) :])
                if message["kind"] == "recovered":
                    report = message
        if done.returncode not in (0, -9):
            errors.seek(0)
            detail = errors.read().decode(errors="replace")[-3000:]
            raise RuntimeError(f"driver {peer.key} {mode} exited {done.returncode}:\n{detail}")
    return started, done.returncode, report
