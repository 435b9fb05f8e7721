"""DBOS Transact through its public API: a ``@DBOS.workflow()`` that calls a
``@DBOS.step()`` per step, with a SQLite system database. After a crash,
``DBOS.launch()`` recovers the pending workflow by itself (it re-runs the workflow
function, and steps with a recorded output return it without running).

Variants: ``default`` (DBOS's own SQLite settings: rollback journal) and ``wal`` (the
same file put in WAL mode before DBOS opens it; SQLite keeps the mode in the file);
``pg``: the PostgreSQL database ``--url`` as the system database, DBOS's production mode
(bench.pg_side_by_side).
"""

from __future__ import annotations

import gc
import sqlite3
import sys
from pathlib import Path
from typing import Any

from bench.peers.protocol import Args, SideEffects, Turns, emit, kill_self, parse_args, payload

__all__ = ["main"]

_WORKFLOW_ID = "bench-workflow"


def _system_database(args: Args) -> tuple[str, Path]:
    """(DBOS's system_database_url, what the parent is told the database is)."""
    args.directory.mkdir(parents=True, exist_ok=True)
    if args.variant == "pg":
        assert args.url is not None, "the pg variant needs --url"
        return args.url, args.directory / "on-the-server"
    path = _database(args)
    return f"sqlite:///{path}", path


def _database(args: Args) -> Path:
    path = args.directory / "dbos.sqlite"
    if args.variant == "wal" and not path.exists():
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.close()
    return path


def main() -> int:
    args = parse_args()
    # Installed in .venv-bench only: mypy, run from acode's .venv, does not see it.
    from dbos import (  # type: ignore[import-not-found, unused-ignore]
        DBOS,
        DBOSConfig,
        SetWorkflowID,
    )

    url, path = _system_database(args)
    side = SideEffects(args.side, probe=args.mode == "probe")
    turns = Turns(args.chunk)
    # The kill belongs to this process, not to the workflow: a recovery re-runs the
    # workflow function with its recorded arguments and must not die again.
    kill_after = args.kill_after if args.mode == "crash" else -1
    timed = args.mode == "steps"

    @DBOS.step()  # type: ignore[untyped-decorator, unused-ignore]
    def trivial(position: int) -> dict[str, Any]:
        return payload(position)

    @DBOS.step()  # type: ignore[untyped-decorator, unused-ignore]
    def effect(position: int) -> dict[str, Any]:
        side.record(position)
        return payload(position)

    @DBOS.workflow()  # type: ignore[untyped-decorator, unused-ignore]
    def workflow(n: int) -> int:
        for i in range(n):
            if timed:
                turns.before(i)
                trivial(i)
                continue
            if i == kill_after:
                kill_self()
            effect(i)
        if timed:
            turns.end()
        return n

    config: DBOSConfig = {
        "name": "acode-bench",
        "system_database_url": url,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()
    side.mark_loaded()
    try:
        if args.mode in ("recover", "probe"):
            # launch() has re-enqueued the pending workflow; wait for it to finish.
            DBOS.retrieve_workflow(_WORKFLOW_ID).get_result()
            side.report()
        else:
            if timed:
                gc.collect()
                turns.ready(path)
            with SetWorkflowID(_WORKFLOW_ID):
                workflow(args.n)
    finally:
        DBOS.destroy()
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
