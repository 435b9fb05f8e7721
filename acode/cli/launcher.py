"""`acode` pre-loaded: the fork server a fleet worker runs its sessions through
(``python -P -c "from acode.cli.launcher import main; main()" FD``).

Each session is still a process of its own, `acode run` or `acode resume` with its own
SQLite, lock and process group; what the launcher saves each of them is the start of an
interpreter and the import of acode, its CLI and its engine (about 0.25 s of CPU, twice
what an I/O-bound session of five model steps spends on its own work), and with a
shared store (``ACODE_STORE_URL``) the PostgreSQL driver too. The child runs
the same entry point as the `acode` command, and ends as it would: its exit status, its
output flushed, its threads joined, its exit handlers run; but without tearing down the
modules it was given, which would write to every page of them (the copies a fork spared).
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
import threading

__all__ = ["PRELOADED", "main"]

# What `acode run` and `acode resume` import on their way, imported once here; what is
# left out is imported by the child as it would be anyway.
PRELOADED = (
    "acode.cli.app",
    "acode.cli.driver",
    "acode.cli.progress",
    "acode.cli.prompts",
    "acode.cli.resume_command",
    "acode.engine.marks",
    "acode.engine.plan_loader",
    "acode.engine.plan_runner",
    "acode.engine.steps.model_step",
    "acode.engine.steps.python_step",
    "acode.operations.prune",
    "acode.resume.service",
    "acode.store.sqlite.store",
    "acode.system.http_deadline",
    "acode.system.model_client",
    "acode.system.process_table",
    "acode.system.snapshot",
    "email.parser",
    "encodings.idna",
    "getpass",
    "http.client",
    "typer._click.decorators",
    "urllib.request",
)


def main() -> None:
    from acode.cli.entry import main as acode_main
    from acode.security.child_env import scrub_own_environment
    from acode.system.fork_server import serve

    # Its environment block holds what every child's holds: blanked here, once.
    scrub_own_environment()
    for name in PRELOADED:
        importlib.import_module(name)
    if os.environ.get("ACODE_STORE_URL"):  # its sessions are stored in PostgreSQL
        from acode.store.postgres.connection import load_driver
        from acode.store.postgres.store import PostgresStore  # noqa: F401

        load_driver()
    # The imported modules' objects never change: the children neither scan them in
    # their collections nor copy the pages they are on.
    gc.collect()
    gc.freeze()
    argv = serve(int(sys.argv[-1]))
    sys.argv = ["acode", *argv]
    try:
        acode_main()
    except SystemExit as done:
        _exit(done.code)
    _exit(0)


def _exit(code: object) -> None:
    """End the child as the interpreter would, short of its final teardown."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120  # what the interpreter returns when its flush fails
    os._exit(status)
