"""A durable step on the PostgreSQL store beside DBOS on the same PostgreSQL server (issue
22, "Speed"): ``python -m bench.pg_side_by_side`` prints its section of
docs/benchmarks.md; ``python -m bench --only pg-step`` puts it into the report.

Each engine runs in its own process through its public API (bench.peers: acode's
``open_session`` with ``ACODE_STORE_URL`` and ``session.step``; DBOS's ``@DBOS.step()``
in a ``@DBOS.workflow()`` with the server as its system database, its production mode),
each in a fresh database of the same server, both at their default durability. They take
turns, the order alternating from turn to turn and round to round; the first turns warm
the connections and prepared statements up and are not counted. A round's figure for an
engine is its median turn, and its ratio the median of its turns' ratios, each DBOS turn
over the acode turn beside it: a stall of the shared machine weighs on one pair, not on
the round. The report gives the medians of the rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.peers import Peer, available
from bench.peers.launch import Driver

__all__ = [
    "ACODE",
    "DBOS",
    "PgStepSettings",
    "PgSteps",
    "main",
    "measure_pg_steps",
    "pg_step_section",
    "render_pg_steps",
]

TARGET = 2.0  # issue 22: a step at least 2x faster than DBOS on PostgreSQL
HEADING = "## A step on PostgreSQL, beside DBOS"

ACODE = Peer(
    "acode-pg", "acode, PostgreSQL store, durability full", "bench.peers.acode_driver", "pg"
)
DBOS = Peer(
    "dbos-pg",
    "DBOS, PostgreSQL system database",
    "bench.peers.dbos_driver",
    "pg",
    requires="dbos",
)


@dataclass(frozen=True)
class PgStepSettings:
    rounds: int = 5
    steps: int = 2_000  # timed, per engine and round
    warm_up: int = 200  # untimed turns ahead of them
    chunk: int = 100  # steps a turn

    def __post_init__(self) -> None:
        # A driver runs whole turns: a part of one would leave it waiting for the parent.
        if self.steps % self.chunk or self.warm_up % self.chunk:
            raise ValueError(f"steps and warm_up must be multiples of chunk ({self.chunk})")


@dataclass
class PgSteps:
    settings: PgStepSettings
    server: str = ""
    # The server's settings that make a commit durable, as SHOW gives them.
    server_settings: dict[str, str] = field(default_factory=dict)
    # peer key -> one value per round: µs of wall time, and of the process's CPU, per step
    wall_us: dict[str, list[float]] = field(default_factory=dict)
    cpu_us: dict[str, list[float]] = field(default_factory=dict)
    ratios: list[float] = field(default_factory=list)  # DBOS over acode, one per round
    # peer key -> transactions committed in its database per step, one value per round
    # (pg_stat_database.xact_commit: every autocommit statement counts, reads too)
    transactions: dict[str, list[float]] = field(default_factory=dict)
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before and after
    # The disk's fsync of a 200-byte append, µs, before and after: a commit's floor.
    fsync_us: tuple[float, float] = (0.0, 0.0)
    skipped: str | None = None  # why nothing was measured


def _server_settings(dsn: str) -> dict[str, str]:
    import psycopg

    names = ("server_version", "fsync", "synchronous_commit", "wal_sync_method")
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = {n: conn.execute(f"SHOW {n}").fetchone() for n in names}
    return {n: "?" if row is None else str(row[0]) for n, row in rows.items()}


def _url(conninfo: str) -> str:
    """``conninfo`` (a libpq key=value string) as the ``postgresql://`` URL both engines
    take: acode's ``store.url`` and DBOS's ``system_database_url``."""
    from urllib.parse import quote, urlencode

    from psycopg.conninfo import conninfo_to_dict

    parts = {k: str(v) for k, v in conninfo_to_dict(conninfo).items()}
    user = quote(parts.get("user", ""), safe="")
    if "password" in parts:
        user += ":" + quote(parts["password"], safe="")
    host, port = parts.get("host", ""), parts.get("port", "")
    query = ""
    if host.startswith("/"):  # a Unix socket's folder goes into the query
        query = "?" + urlencode({"host": host, **({"port": port} if port else {})})
        where = ""
    else:
        where = f"{host}:{port}" if port else host
    return f"postgresql://{user}@{where}/{parts.get('dbname', '')}{query}"


def _transactions(admin: str, database: str) -> int:
    """The transactions committed in ``database`` so far, the ended backends' included."""
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        query = "SELECT xact_commit FROM pg_stat_database WHERE datname = %s"
        row = conn.execute(query, (database,)).fetchone()
        return 0 if row is None else int(row[0])


@contextmanager
def _drivers(
    admin: str, settings: PgStepSettings, directory: Path, results: PgSteps
) -> Iterator[tuple[Driver, Driver]]:
    from psycopg.conninfo import conninfo_to_dict

    from bench.sync_bench import _database

    n = settings.warm_up + settings.steps
    with ExitStack() as stack:
        drivers: list[Driver] = []
        databases: list[str] = []
        try:
            for peer in (ACODE, DBOS):
                conninfo = stack.enter_context(_database(admin))
                databases.append(str(conninfo_to_dict(conninfo)["dbname"]))
                extra = ["--url", _url(conninfo)]
                drivers.append(Driver(peer, n, directory / peer.key, settings.chunk, extra))
            yield drivers[0], drivers[1]
            for driver in drivers:
                driver.finish()
        except BaseException:
            for driver in drivers:
                driver.kill()
            raise
        # The drivers have ended: their backends have reported their counts on exit. The
        # few transactions of opening (acode's migrations, DBOS's) are counted too.
        for driver, database in zip(drivers, databases, strict=True):
            per_step = _transactions(admin, database) / n
            results.transactions.setdefault(driver.peer.key, []).append(per_step)


def _round(
    admin: str, settings: PgStepSettings, directory: Path, first: int, results: PgSteps
) -> None:
    s = settings
    warm_turns = s.warm_up // s.chunk
    turns = s.steps // s.chunk
    wall: dict[str, list[float]] = {ACODE.key: [], DBOS.key: []}
    with _drivers(admin, s, directory, results) as pair:
        order = list(pair) if first == 0 else list(reversed(pair))
        for turn in range(warm_turns + turns):
            for driver in order:
                seconds = driver.turn()
                if turn >= warm_turns:
                    wall[driver.peer.key].append(seconds / s.chunk * 1e6)
            order.reverse()
        for driver in pair:
            cpu = sum(driver.cpu_seconds[warm_turns:])
            results.cpu_us.setdefault(driver.peer.key, []).append(cpu / s.steps * 1e6)
    for key, turn_us in wall.items():
        results.wall_us.setdefault(key, []).append(statistics.median(turn_us))
    pairs = zip(wall[DBOS.key], wall[ACODE.key], strict=True)
    results.ratios.append(statistics.median(d / a for d, a in pairs))
    shutil.rmtree(directory, ignore_errors=True)


def measure_pg_steps(
    settings: PgStepSettings, root: Path, progress: Callable[[str], None]
) -> PgSteps:
    from bench.machine import fsync_latency_us
    from bench.sync_bench import _postgres

    results = PgSteps(settings)
    if not available(DBOS):
        results.skipped = "DBOS is not installed here (`pip install -e '.[bench]'`)"
        return results
    scratch = Path(tempfile.mkdtemp(prefix="acode-bench-pgstep-", dir=root))
    try:
        with _postgres(scratch) as (admin, described):
            results.server = described
            results.server_settings = _server_settings(admin)
            results.load = (os.getloadavg()[0], 0.0)
            results.fsync_us = (fsync_latency_us(scratch), 0.0)
            for r in range(settings.rounds):
                _round(admin, settings, scratch / f"round-{r}", r % 2, results)
                progress(
                    f"pg-step round {r + 1}/{settings.rounds}: µs/step acode "
                    f"{results.wall_us[ACODE.key][-1]:,.0f}, DBOS "
                    f"{results.wall_us[DBOS.key][-1]:,.0f}, DBOS/acode {results.ratios[-1]:.2f}"
                )
            results.load = (results.load[0], os.getloadavg()[0])
            results.fsync_us = (results.fsync_us[0], fsync_latency_us(scratch))
    except Exception as exc:  # no server: the report says so instead of failing
        results.skipped = f"{type(exc).__name__}: {exc}"
        progress(f"pg-step: not measured ({results.skipped})")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} | {min(values):,.0f} - {max(values):,.0f}"


def render_pg_steps(results: PgSteps) -> str:
    if results.skipped is not None:
        return f"{HEADING}\n\nNot measured: {results.skipped}.\n"
    s = results.settings
    shown = ", ".join(f"{k} {v}" for k, v in results.server_settings.items())
    lines = [
        HEADING,
        "",
        f"One durable step, acode on its PostgreSQL store against DBOS with the same server as "
        f"its system database (its production mode), against {results.server} ({shown}). "
        "Each engine in its own process through its public API (acode: `open_session` with "
        "`ACODE_STORE_URL`, `session.step` of a function returning a ~200-byte dict; DBOS: a "
        "`@DBOS.step()` returning the same dict, called from a `@DBOS.workflow()`), each in a "
        "fresh database of the same server, both at their default durability: acode's "
        "`durability: full` connects with `synchronous_commit=on`; DBOS sets no "
        "`synchronous_commit` and gets the server's, `on`: both wait for the WAL flush of "
        f"every commit. Each round: {s.warm_up:,} steps each to warm up (not counted), then "
        f"{s.steps:,} steps each in turns of {s.chunk}, the order alternating from turn to "
        "turn and round to round. A round's figure is an engine's median turn; its ratio the "
        "median of its turns' ratios (each DBOS turn over the acode turn beside it). CPU: "
        "the client process's (`time.process_time`, DBOS's background threads included) "
        "over the timed turns, per step. Transactions: those committed in the engine's "
        "database (`pg_stat_database.xact_commit`: every autocommit statement counts, reads "
        "too) over all its steps, opening included. Medians of "
        f"{s.rounds} rounds; 1-minute load average {results.load[0]:.1f} before, "
        f"{results.load[1]:.1f} after (the machine is shared). The disk under the server "
        f"took {results.fsync_us[0]:,.0f} µs before the rounds and {results.fsync_us[1]:,.0f} "
        "after to fsync a 200-byte append (medians of 200): the floor of a durable commit.",
        "",
        "| | µs per step (median) | min - max | client CPU µs per step | transactions per step |",
        "|---|---:|---:|---:|---:|",
    ]
    for peer in (ACODE, DBOS):
        cpu = statistics.median(results.cpu_us[peer.key])
        xacts = statistics.median(results.transactions[peer.key])
        lines.append(
            f"| {peer.label} | {_spread(results.wall_us[peer.key])} | {cpu:,.0f} | {xacts:.1f} |"
        )
    ratio = statistics.median(results.ratios)
    verdict = "met" if ratio >= TARGET else "**missed**"
    rounds = ", ".join(f"{r:.2f}" for r in results.ratios)
    lines += [
        "",
        f"DBOS's time per step over acode's: {ratio:.2f}x, the median of the rounds' ratios "
        f"({rounds}). Target (issue 22): a step at least {TARGET:.0f}x faster than DBOS on "
        f"PostgreSQL: {verdict}.",
    ]
    return "\n".join(lines) + "\n"


def _progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def pg_step_section(root: Path, progress: Callable[[str], None], *, quick: bool) -> str:
    settings = PgStepSettings(rounds=3, steps=1_000) if quick else PgStepSettings()
    return render_pg_steps(measure_pg_steps(settings, root, progress))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pg_side_by_side", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 1,000 steps")
    args = parser.parse_args(argv)
    os.environ.setdefault("ACODE_CHECKPOINT_SECRET", "acode-bench-not-a-secret")
    from bench.machine import bench_root

    root = bench_root(Path(__file__).resolve().parents[1])
    print(pg_step_section(root, _progress, quick=args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
