"""The environment a worker gives its launcher and its sessions' processes.

The worker's own, which holds the checkpoint key the sessions sign with, without the
queue's URL (the worker's business, not the sessions'), with git never prompting, and
the start gate (``START_GATE``).
With a shared store, a session's process also gets the store's URL (from the worker's
own settings, which a clone's may lack), the item's name in the store, the hand-off to
the clone's ``origin``, the item's repository (the one remote every worker reaches, as
it clones from it and pushes the result there), and the worker's lease length, which
the session's own lease in the store takes: when a machine is lost, the two lapse
within a third of a lease of each other.
"""

from __future__ import annotations

import os

__all__ = ["START_GATE", "launcher_env", "session_env"]

# After its `started` record, a session the worker starts waits for a line on its
# standard input, which the worker writes once the session's id is on the queue's item
# (acode.cli.console.emit_started says why).
START_GATE = "ACODE_START_GATE"


def _base_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "ACODE_FLEET_URL"}
    return {**env, "GIT_TERMINAL_PROMPT": "0", START_GATE: "1"}


def launcher_env(store_url: str | None) -> dict[str, str]:
    """The launcher's: with a shared store, its URL, so that it loads the store's driver
    once for every session (each session's own environment is sent with it)."""
    env = _base_env()
    if store_url is not None:
        env["ACODE_STORE_URL"] = store_url
    return env


def session_env(workspace_name: str, store_url: str | None, lease_seconds: float) -> dict[str, str]:
    """A session's process's, for the item named ``workspace_name`` in the store."""
    env = _base_env()
    if store_url is not None:
        env["ACODE_STORE_URL"] = store_url
        env["ACODE_STORE_WORKSPACE"] = workspace_name
        env["ACODE_HANDOFF_REMOTE"] = "origin"
        env["ACODE_FLEET_LEASE_SECONDS"] = str(lease_seconds)
    return env
