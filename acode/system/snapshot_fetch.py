"""Fetching work-tree snapshots of steps (``refs/acode/<session>/<step>-<attempt>`` and
their ``-as-left`` snapshots) that another machine pushed (acode.system.snapshot_push),
each kept here under its own name only when it is exactly the commit asked for.

The fetch goes to refs of their own (``refs/acode/incoming-snapshots/...``, removed
after), so that what the remote holds is looked at before it names anything here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from acode.system.git_command import git_bytes, run_git
from acode.system.handoff_fetch import FETCH_TIMEOUT_S
from acode.system.handoff_push import git_reason, run_remote_git
from acode.system.snapshot import SNAPSHOT_REF_ROOT

__all__ = ["SnapshotsFetched", "fetch_snapshots"]

_INCOMING_ROOT = f"{SNAPSHOT_REF_ROOT}/incoming-snapshots"
_NOT_THERE = re.compile(r"couldn't find remote ref (\S+)")


class SnapshotsFetched(NamedTuple):
    """What a fetch of snapshot refs found: ref -> the commit the remote's ref names
    (all of them, or none when the fetch failed), the refs the remote does not have,
    and why the fetch failed (None: it did not)."""

    at: dict[str, str]
    missing: tuple[str, ...]
    reason: str | None


def fetch_snapshots(
    workspace: Path, remote: str, wanted: Mapping[str, str], *, timeout: float = FETCH_TIMEOUT_S
) -> SnapshotsFetched:
    """Fetch the refs of ``wanted`` (ref -> the commit it must be) from ``remote`` in one
    ``git fetch``; each ref whose commit is the one wanted is kept here under its own
    name (so that git keeps its objects until the session's snapshots are pruned)."""
    root = SNAPSHOT_REF_ROOT + "/"
    incoming = {ref: f"{_INCOMING_ROOT}/{ref.removeprefix(root)}" for ref in wanted}
    refspecs = [f"+{ref}:{incoming[ref]}" for ref in sorted(wanted)]
    args = ["fetch", "--no-tags", "--no-write-fetch-head", "--quiet", remote, *refspecs]
    try:
        code, _, err = run_remote_git(workspace, args, timeout)
        if code != 0:
            missing = tuple(r for r in _NOT_THERE.findall(err) if r in wanted)
            return SnapshotsFetched({}, missing, git_reason(err) or f"git fetch exited {code}")
        at = {ref: _commit(workspace, incoming[ref]) for ref in wanted}
        for ref, commit in at.items():
            if commit == wanted[ref]:
                git_bytes(workspace, ["update-ref", "-m", "acode hand-off", ref, commit])
        return SnapshotsFetched(at, (), None)
    finally:
        deletions = "".join(f"delete {ref}\n" for ref in incoming.values())
        git_bytes(workspace, ["update-ref", "--stdin"], stdin=deletions.encode())


def _commit(workspace: Path, ref: str) -> str:
    found = run_git(workspace, ["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"])
    return found.stdout.strip()
