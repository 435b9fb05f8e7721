"""Pushing the work-tree snapshots of steps (ghosts, ``refs/acode/<session>/<step>-<attempt>``,
and the ``-as-left`` snapshots of pauses) beside the sessions' hand-off refs, so that a
step left running on this machine is rolled back on another exactly as a resume here
would roll it back (docs/fleet.md, "A step left running").

A snapshot ref is made once and never moves: the push creates it on the remote (no
``+`` in the refspec), and a remote that holds another commit under its name keeps it
(a refusal, kept in the record and not tried again; the machine that resumes refuses
that ref too, since the history names the commit). ``-before-rollback`` refs hold what a
rollback overwrote on this machine, a person's files: they stay here. Once a session has
ended here (its snapshot refs pruned), the next push deletes the ones it sent from the
remote too. What the remote was seen to hold is kept in
``.agent/state/handoff/snapshots.json``.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

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

__all__ = ["joined", "push_snapshots", "snapshots_to_push"]

_PUSHED, _REFUSED, _FAILURES = "pushed", "refused", "failures"


def _record_file(paths: StatePaths) -> Path:
    return paths.state_dir / "handoff" / "snapshots.json"


def _read(paths: StatePaths) -> tuple[dict[str, dict[str, str]], int]:
    """ref -> commit, for the refs the remote holds and those it refused, and the
    failures in a row; an unreadable record is an empty one (the next push finds out
    again: a ref already there is reported up to date)."""
    try:
        data = json.loads(_record_file(paths).read_text(encoding="utf-8"))
        return {k: dict(data.get(k, {})) for k in (_PUSHED, _REFUSED)}, int(data[_FAILURES])
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return {_PUSHED: {}, _REFUSED: {}}, 0


def _write(paths: StatePaths, record: dict[str, dict[str, str]], failures: int) -> None:
    write_record(_record_file(paths), {**record, _FAILURES: failures})


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
    record, _ = _read(paths)
    known = {**record[_PUSHED], **record[_REFUSED]}
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

    The same push deletes from the remote the snapshots pushed from here whose session
    has ended here since (its refs pruned: no resume needs them anywhere), each only if
    the remote's ref is still the commit pushed (``--force-with-lease``)."""
    record, failures = _read(paths)
    here = _local(workspace)
    ended = {ref: commit for ref, commit in record[_PUSHED].items() if ref not in here}
    if not pending and not ended:
        return Pushed((), None)
    leases = [f"--force-with-lease={ref}:{commit}" for ref, commit in sorted(ended.items())]
    refspecs = [f"{ref}:{ref}" for ref in sorted(pending)] + [f":{ref}" for ref in sorted(ended)]
    code, out, err = run_remote_git(
        workspace, ["push", "--porcelain", *leases, "--", remote, *refspecs], timeout
    )
    lines = porcelain(out)
    reasons: list[str] = []
    sent: set[str] = set()
    for ref, commit in pending.items():
        line = lines.get(ref)
        if line is not None and line[0] in " *=":
            record[_PUSHED][ref] = commit
            record[_REFUSED].pop(ref, None)
            if line[0] != "=":
                sent.add(_session(ref))
        elif line is not None and line[0] == "!":
            record[_REFUSED][ref] = commit
            reasons.append(f"the remote refused {ref}: {git_reason(line[1]) or 'refused'}")
        else:
            reasons.append(git_reason(err) or f"git push exited with status {code}")
    # A deletion the remote answered is done: deleted, or no longer the commit pushed
    # from here (then not ours to delete). Unanswered ones are tried again next time.
    unanswered = {ref: commit for ref, commit in ended.items() if ref not in lines}
    if unanswered and not reasons:
        reasons.append(git_reason(err) or f"git push exited with status {code}")
    record = {
        _PUSHED: {r: c for r, c in record[_PUSHED].items() if here.get(r) == c} | unanswered,
        _REFUSED: {r: c for r, c in record[_REFUSED].items() if here.get(r) == c},
    }
    refused_only = all(ref in record[_REFUSED] for ref in pending if ref not in record[_PUSHED])
    failures = 0 if not reasons or (refused_only and not unanswered) else failures + 1
    _write(paths, record, failures)
    waiting = {_session(ref) for ref in pending if ref not in record[_PUSHED]}
    retry = None
    if failures:
        delay = (backoff or Backoff()).delay(failures, random.random())
        retry = time.time_ns() // 1000 + int(delay * 1_000_000)
    return Pushed(tuple(sorted(sent - waiting)), reasons[0] if reasons else None, retry)


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
