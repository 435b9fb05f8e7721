"""The measured workloads: acode python steps, bare SQLite inserts, resume loads.

Only the work each one names is timed: not opening or closing a session or database.
"""

from __future__ import annotations

import gc
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import acode
from acode.domain.events import canonical_json

__all__ = [
    "DB_RELATIVE",
    "AcodeRecorder",
    "BareRecorder",
    "Durability",
    "Recorder",
    "ResumeSample",
    "cli_seconds",
    "database_bytes",
    "empty_session_bytes",
    "interleaved",
    "payload",
    "preview_seconds",
    "resume_once",
    "table_bytes",
]

Durability = Literal["full", "normal"]
DB_RELATIVE = Path(".agent/state/acode.db")
ACODE_CLI = Path(sys.executable).parent / "acode"
# Pads a step's result to about 200 bytes of JSON, the size of a small tool result.
_DETAIL = "." * 123


def payload(position: int) -> dict[str, Any]:
    """The result of step ``position``: the same bytes for acode and the baseline."""
    return {
        "position": position,
        "status": "ok",
        "checks": ["lint", "types", "tests"],
        "detail": _DETAIL,
    }


def _step(ctx: acode.StepContext) -> dict[str, Any]:
    return payload(ctx.position)


class Recorder(Protocol):
    """Something that durably records step ``i``; the thing being timed."""

    def record(self, i: int) -> None: ...

    def close(self) -> None: ...


class AcodeRecorder:
    """A new session in ``workspace`` whose steps are python steps."""

    def __init__(self, workspace: Path, durability: Durability) -> None:
        workspace.mkdir(parents=True)
        if durability != "full":
            config = workspace / ".agent" / "config.yml"
            config.parent.mkdir()
            config.write_text(f"durability: {durability}\n", encoding="utf-8")
        self.database = workspace / DB_RELATIVE
        self._session = acode.open_session("bench", workspace)
        self.session_id = self._session.id

    def record(self, i: int) -> None:
        self._session.step(f"step-{i}", _step)

    def close(self) -> None:
        # Left unfinished (EXECUTING, unlocked): resumable, as after a crash.
        self._session.close()


class BareRecorder:
    """One single-row transaction per step on a one-table WAL database."""

    def __init__(self, directory: Path, durability: Durability) -> None:
        directory.mkdir(parents=True)
        self.database = directory / "bare.db"
        self._conn = sqlite3.connect(self.database, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute(f"PRAGMA synchronous = {durability.upper()}")
        self._conn.execute(
            "CREATE TABLE events (id INTEGER PRIMARY KEY, session TEXT NOT NULL, "
            "seq INTEGER NOT NULL, payload TEXT NOT NULL)"
        )

    def record(self, i: int) -> None:
        # The same transaction shape as acode's: BEGIN IMMEDIATE ... COMMIT.
        self._conn.execute("BEGIN IMMEDIATE")
        self._conn.execute(
            "INSERT INTO events (session, seq, payload) VALUES (?, ?, ?)",
            ("bench", i + 1, canonical_json(payload(i))),
        )
        self._conn.execute("COMMIT")

    def close(self) -> None:
        self._conn.close()


def interleaved(recorders: Sequence[Recorder], n: int, chunk: int) -> list[float]:
    """Record ``n`` steps with each recorder, alternating every ``chunk`` steps (and who
    goes first), so that the disk's drift hits all of them alike; seconds spent in each."""
    totals = [0.0] * len(recorders)
    order = list(range(len(recorders)))
    gc.collect()  # garbage left by an earlier round must not be collected in this one
    for first in range(0, n, chunk):
        last = min(first + chunk, n)
        for index in order:
            record = recorders[index].record
            start = time.perf_counter()
            for i in range(first, last):
                record(i)
            totals[index] += time.perf_counter() - start
        order.reverse()
    return totals


def _checkpointed(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # count what is in the WAL too
    return conn


def database_bytes(path: Path) -> int:
    """The size of a database with its write-ahead log folded in."""
    _checkpointed(path).close()
    return path.stat().st_size


def table_bytes(path: Path) -> dict[str, int]:
    """Bytes per table, its indexes included (SQLite's dbstat)."""
    conn = _checkpointed(path)
    try:
        owner = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master").fetchall())
        sizes: dict[str, int] = {}
        for name, size in conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"):
            table = owner.get(name, name)
            sizes[table] = sizes.get(table, 0) + int(size)
    finally:
        conn.close()
    return sizes


def empty_session_bytes(workspace: Path) -> int:
    """The database of a session with no step: what every session costs up front."""
    workspace.mkdir(parents=True)
    acode.open_session("bench", workspace).close()
    return database_bytes(workspace / DB_RELATIVE)


@dataclass(frozen=True)
class ResumeSample:
    load_seconds: float  # resume_session() until it returns a Session, wall clock
    load_cpu_seconds: float  # the same, CPU time of this process: without the disk's waits
    replay_seconds: float  # then every recorded step, returned without running


def resume_once(workspace: Path, session_id: str, n: int) -> ResumeSample:
    gc.collect()
    cpu = time.process_time()
    start = time.perf_counter()
    session = acode.resume_session(session_id, workspace)
    loaded = time.perf_counter()
    loaded_cpu = time.process_time()
    try:
        for i in range(n):
            session.step(f"step-{i}", _step)
        replayed = time.perf_counter()
    finally:
        session.close()
    return ResumeSample(loaded - start, loaded_cpu - cpu, replayed - loaded)


def preview_seconds(workspace: Path, session_id: str, *, verify: bool) -> float:
    """Wall time of ``preview_resume`` in-process: what ``acode resume --dry-run`` does
    after start-up, and with ``verify`` the check of the whole history (``--verify``)."""
    from acode.resume.service import preview_resume

    gc.collect()
    start = time.perf_counter()
    preview_resume(session_id, workspace, verify=verify)
    return time.perf_counter() - start


def cli_seconds(*args: str) -> float:
    """Wall time of one ``acode`` command, process start-up and imports included."""
    start = time.perf_counter()
    done = subprocess.run([str(ACODE_CLI), *args], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"acode {' '.join(args)} failed:\n{done.stderr}")
    return seconds
