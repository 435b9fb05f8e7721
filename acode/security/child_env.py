"""The environment of every process acode starts: the caller's, without acode's own secrets.

A `run` step, a command the model runs, a `check:` command, an engine CLI and git (with
the hooks it runs) are programs acode does not vouch for. Whoever reads the checkpoint
key can sign a forged history; whoever reads the remote's URL, or the PostgreSQL
store's, has its password. So :func:`child_environment` leaves them out, and every place
that starts a process builds its environment with it
(tests/security/test_child_environment.py checks that each one does). The only exception
is acode itself run as a work session's engine, which needs the key to sign its own
session (acode.work.runner).

Everything else of the caller's environment is passed on, the model's API key variable
(``model.api_key_env``) included: it is the user's own setting, which their shell gives
every program they run, and engines and the user's own tests need it to reach the model.

A child could still read the parent's environment as it was when the parent started
(``/proc/PPID/environ``): :func:`scrub_own_environment` blanks the withheld values there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["KEY_WITHHELD_ENV", "WITHHELD", "child_environment", "scrub_own_environment"]

# The checkpoint key (acode.security.signing.SECRET_ENV), and the URLs with their
# passwords of the remote, the store and the fleet's queue
# (acode.engine.config.ENV_OVERRIDES).
WITHHELD = ("ACODE_CHECKPOINT_SECRET", "ACODE_SYNC_DSN", "ACODE_STORE_URL", "ACODE_FLEET_URL")
# Set in a child's environment when the key was withheld from it: an acode run there
# then says so instead of creating a key file of its own (acode.security.signing).
KEY_WITHHELD_ENV = "ACODE_KEY_WITHHELD"


def child_environment(
    extra: Mapping[str, str] | None = None, *, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``base`` (this process's environment by default) with ``extra`` added, and
    without the withheld secrets, whichever of the two held them."""
    env = dict(os.environ if base is None else base)
    if extra:
        env.update(extra)
    if env.pop(WITHHELD[0], ""):
        env[KEY_WITHHELD_ENV] = "1"
    for name in WITHHELD[1:]:
        env.pop(name, None)
    return env


def scrub_own_environment() -> None:
    """Blank the withheld values in this process's own environment block, which any
    process of the same user can read in /proc/PID/environ. ``os.environ`` is Python's
    copy, made at start-up, and keeps them for acode's own use.

    The block is overwritten through /proc/self/mem, at the addresses /proc/self/stat
    gives (``env_start``, ``env_end``): no ctypes to import on the command's way in.
    Where that cannot be done (no /proc), no other process can read the block either."""
    if not any(os.environ.get(name) for name in WITHHELD):
        return  # the usual case: nothing to scrub
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        # Fields 50 and 51 of stat(5); the first two (pid, comm) are before the ")".
        start, end = int(fields[47]), int(fields[48])
        with open("/proc/self/mem", "r+b", buffering=0) as memory:
            memory.seek(start)
            block = memory.read(end - start)
            for name in WITHHELD:
                for value in _values(block, f"{name}=".encode()):
                    memory.seek(start + value.start)
                    memory.write(bytes(value.stop - value.start))
    except (OSError, ValueError, IndexError):
        return


def _values(block: bytes, prefix: bytes) -> list[range]:
    """Where, in an environment block (NUL-separated ``NAME=value`` entries), the values
    of the entries that start with ``prefix`` lie."""
    found = []
    position = 0
    while position < len(block):
        end = block.find(b"\0", position)
        end = len(block) if end < 0 else end
        if block.startswith(prefix, position):
            found.append(range(position + len(prefix), end))
        position = end + 1
    return found
