"""Pushing the work-tree snapshots of steps (ghosts, ``refs/acode/<session>/<step>-<attempt>``,
and the ``-as-left`` snapshots of pauses) beside the sessions' hand-off refs, so that a
step left running on this machine is rolled back on another exactly as a resume here
would roll it back (docs/fleet.md, "A step left running").

A snapshot ref is made once and never moves: the push creates it on the remote (no
``+`` in the refspec), and a remote that holds another commit under its name keeps it
(a refusal, kept in the record and not tried again; the machine that resumes refuses
that ref too, since the history names the commit). ``-before-rollback`` refs hold what a
rollback overwrote on this machine, a person's files: they stay here. Once a session has
ended here, the next push deletes its snapshots from the remote (whichever machine sent
them), each only while it is the commit listed. What the remote was seen to hold, and
the ended sessions whose snapshots are still there, are kept in
``.agent/state/handoff/snapshots.json``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from acode.domain.backoff import Backoff
from acode.system.git_command import run_git
from acode.system.handoff_push import (
    Pushed,
    git_reason,
    porcelain,
    run_remote_git,
    write_record,
)
from acode.system.handoff_ref import HANDOFF_REF_ROOT, session_of_ref
from acode.system.snapshot import BACKUP_SUFFIX, SNAPSHOT_REF_ROOT
from acode.system.workspace import StatePaths

__all__ = ["joined", "push_snapshots", "retire_snapshots", "snapshots_to_push"]


def _record_file(paths: StatePaths) -> Path:
    return paths.state_dir / "handoff" / "snapshots.json"


class _Record(NamedTuple):
    """What the pushes of snapshots left: ref -> commit for the refs the remote holds
    and those it refused, the sessions ended here whose snapshots are still to go from
    the remote, and the failures in a row."""

    pushed: dict[str, str]
    refused: dict[str, str]
    ended: tuple[str, ...] = ()
    failures: int = 0


def _read(paths: StatePaths) -> _Record:
    """An unreadable record is an empty one (the next push finds out again: a ref
    already there is reported up to date)."""
    try:
        data = json.loads(_record_file(paths).read_text(encoding="utf-8"))
        return _Record(
            dict(data["pushed"]),
            dict(data["refused"]),
            tuple(str(s) for s in data["ended"]),
            int(data["failures"]),
        )
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return _Record({}, {})


@contextlib.contextmanager
def _updating(paths: StatePaths) -> Iterator[None]:
    """Held while the record is read again and written: a session that ends while a
    push runs (its thread, or another process of the workspace) is not lost."""
    lock = _record_file(paths).with_suffix(".lock")
    lock.parent.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def retire_snapshots(paths: StatePaths, session_id: str) -> None:
    """Session ``session_id`` ended here: the next push deletes its snapshots from the
    remote (no resume needs them anywhere), those another machine that ran it before
    pushed too."""
    with _updating(paths):
        record = _read(paths)
        if session_id not in record.ended:
            write_record(
                _record_file(paths), record._replace(ended=(*record.ended, session_id))._asdict()
            )


def _local(workspace: Path) -> dict[str, str]:
    """ref -> commit of every snapshot ref here that may travel."""
    fmt = "--format=%(refname) %(objectname)"
    out = run_git(workspace, ["for-each-ref", fmt, "--", SNAPSHOT_REF_ROOT]).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        ref, _, commit = line.partition(" ")
        if _travels(ref):
            found[ref] = commit
    return found


def _travels(ref: str) -> bool:
    """A step's snapshot of a session (``refs/acode/<id>/<name>``), not a backup."""
    parts = ref.split("/")
    return (
        len(parts) == 4
        and session_of_ref(f"{HANDOFF_REF_ROOT}/{parts[2]}") is not None
        and not ref.endswith(BACKUP_SUFFIX)
    )


def snapshots_to_push(workspace: Path, paths: StatePaths, *, asked: bool = False) -> dict[str, str]:
    """ref -> commit of the snapshot refs here the remote is not known to hold (nor
    refused); with ``asked`` (a person, `acode sync`), every one: a ref deleted on the
    remote since is made again, one already there costs nothing."""
    found = _local(workspace)
    if asked:
        return found
    record = _read(paths)
    known = {**record.pushed, **record.refused}
    return {ref: commit for ref, commit in found.items() if known.get(ref) != commit}


def push_snapshots(
    workspace: Path,
    paths: StatePaths,
    remote: str,
    pending: dict[str, str],
    *,
    timeout: float,
    backoff: Backoff | None = None,
) -> Pushed:
    """Push ``pending`` (``snapshots_to_push``) to ``remote`` in one ``git push``, and
    record how each went; the sessions named are those whose snapshots all arrived, one
    at least sent now (not already there).

    The same push deletes the snapshots of the sessions ended here
    (:func:`retire_snapshots`) from the remote, each only if the remote's ref is still
    the commit it listed (``--force-with-lease``)."""
    record = _read(paths)
    if not pending and not record.ended:
        return Pushed((), None)
    listed, reason = _on_remote(workspace, remote, record.ended, timeout)
    ended = listed or {}
    leases = [f"--force-with-lease={ref}:{commit}" for ref, commit in sorted(ended.items())]
    refspecs = [f"{ref}:{ref}" for ref in sorted(pending)] + [f":{ref}" for ref in sorted(ended)]
    code, out, err = 0, "", ""
    if refspecs:  # never a push without refspecs: git would push the current branch
        code, out, err = run_remote_git(
            workspace, ["push", "--porcelain", *leases, "--", remote, *refspecs], timeout
        )
    lines = porcelain(out)
    reasons: list[str] = []
    sent: set[str] = set()
    for ref, commit in pending.items():
        line = lines.get(ref)
        if line is not None and line[0] in " *=":
            record.pushed[ref] = commit
            record.refused.pop(ref, None)
            if line[0] != "=":
                sent.add(_session(ref))
        elif line is not None and line[0] == "!":
            record.refused[ref] = commit
            reasons.append(f"the remote refused {ref}: {git_reason(line[1]) or 'refused'}")
        else:
            reasons.append(git_reason(err) or f"git push exited with status {code}")
    # A deletion the remote answered is done: deleted, or no longer the commit listed
    # (then not ours to delete). A session is done with when all of its are.
    left = {_session(ref) for ref in ended if ref not in lines}
    if listed is None:
        left = set(record.ended)
        reasons.append(reason)
    elif left:
        reasons.append(git_reason(err) or f"git push exited with status {code}")
    failing = bool(reasons) and (bool(left) or not _refused_only(record, pending))
    failures = record.failures + 1 if failing else 0
    here = _local(workspace)
    with _updating(paths):
        # Sessions that ended since this push read the record wait for the next one.
        since = [s for s in _read(paths).ended if s not in record.ended]
        ended_now = (*(s for s in record.ended if s in left), *since)
        record = _kept(record, here, ended=ended_now)._replace(failures=failures)
        write_record(_record_file(paths), record._asdict())
    waiting = {_session(ref) for ref in pending if ref not in record.pushed}
    retry = None
    if failing:
        delay = (backoff or Backoff()).delay(failures, random.random())
        retry = time.time_ns() // 1000 + int(delay * 1_000_000)
    return Pushed(tuple(sorted(sent - waiting)), reasons[0] if reasons else None, retry)


def _refused_only(record: _Record, pending: dict[str, str]) -> bool:
    """Whether every ref of ``pending`` that did not arrive was refused (not retried)."""
    return all(ref in record.refused for ref in pending if ref not in record.pushed)


def _kept(record: _Record, here: dict[str, str], *, ended: tuple[str, ...]) -> _Record:
    """The record of the refs still here as they were pushed (or refused), and of the
    sessions whose snapshots are still to go: refs pruned here since are forgotten."""
    return record._replace(
        pushed={r: c for r, c in record.pushed.items() if here.get(r) == c},
        refused={r: c for r, c in record.refused.items() if here.get(r) == c},
        ended=ended,
    )


def _on_remote(
    workspace: Path, remote: str, sessions: tuple[str, ...], timeout: float
) -> tuple[dict[str, str] | None, str]:
    """ref -> commit of the snapshot refs the remote holds of ``sessions``; None, and
    why, when the remote cannot be asked."""
    if not sessions:
        return {}, ""
    patterns = [f"{SNAPSHOT_REF_ROOT}/{session_id}/*" for session_id in sessions]
    code, out, err = run_remote_git(workspace, ["ls-remote", "--", remote, *patterns], timeout)
    if code != 0:
        return None, git_reason(err) or f"git ls-remote exited with status {code}"
    found: dict[str, str] = {}
    for line in out.splitlines():
        commit, _, ref = line.partition("\t")
        if _travels(ref):
            found[ref] = commit
    return found, ""


def _session(ref: str) -> str:
    return ref.split("/")[2]


def joined(first: Pushed, second: Pushed) -> Pushed:
    """Two pushes of one attempt as one: the sessions either pushed, the first reason,
    the sooner retry."""
    retries = [t for t in (first.retry_at_us, second.retry_at_us) if t is not None]
    return Pushed(
        tuple(sorted({*first.session_ids, *second.session_ids})),
        first.reason if first.reason is not None else second.reason,
        min(retries, default=None),
    )
