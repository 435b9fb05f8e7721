"""The snapshots a step left running on another machine is rolled back to, brought into
this clone before the work tree arrives (docs/fleet.md, "A step left running").

A `run` step's ghost snapshot (and the as-left snapshot of a pause inside it) is named
in the session's authenticated history (``ghost`` in its ``step_started`` event,
``as_left`` in the pause's ``state_changed``); the machine that took it pushed it to
``handoff.remote`` under its ref. A snapshot not in this clone is fetched from there and
used only when the remote's ref is that very commit: the rollback then does here what it
would have done there. A remote without it, or with another commit under its name, is
refused before anything here changes; ``--strategy retry`` does without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from acode.domain.reducer import StepStatus
from acode.engine.rollback import AS_LEFT_SUFFIX, AsLeft, with_as_left
from acode.errors import EnvironmentValidationError, ErrorCode
from acode.system.handoff_fetch import has_commit
from acode.system.snapshot import snapshot_ref
from acode.system.snapshot_fetch import fetch_snapshots

if TYPE_CHECKING:
    from acode.engine.journal import Journal
    from acode.engine.lifecycle import Workspace

__all__ = ["bring_snapshots", "missing_snapshots", "named_snapshots"]


def bring_snapshots(journal: Journal, ws: Workspace) -> tuple[str, ...]:
    """Fetch the snapshots the steps left in progress roll back to, those not in this
    clone; return the refs fetched. Refuses (EnvironmentValidationError, exit 17,
    nothing changed but git's objects) a remote that cannot be asked, does not have one
    of them, or holds another commit under its name."""
    missing = missing_snapshots(journal, ws)
    if not missing:
        return ()
    short = journal.row.short_id
    first = min(missing)
    remote = ws.config.handoff.remote
    if remote is None:
        raise EnvironmentValidationError(
            f"the snapshot a step of session {short} rolls back to ({first}) is not in this "
            "clone, and handoff.remote names no git remote to fetch it from",
            hint="set handoff.remote in .agent/config.yml to the git remote the session's "
            f"machine pushes to (handoff: {{remote: origin}}), then: acode resume {short}; "
            "nothing was changed",
            code=ErrorCode.HANDOFF_FETCH,
        )
    fetched = fetch_snapshots(ws.root, remote, missing)
    if fetched.missing:
        ref = fetched.missing[0]
        raise EnvironmentValidationError(
            f"session {short} stopped in a step on the machine that ran it, and {remote} "
            f"does not have the snapshot of the work tree that the step's rollback needs "
            f"({ref}): it was not pushed before that machine stopped",
            hint=f"push it from that machine (acode sync there), then `acode resume {short}`; "
            "or run the step again on the work tree as recorded after the last step that "
            f"changed files: acode resume {short} --strategy retry; nothing was changed",
            code=ErrorCode.HANDOFF_NO_SNAPSHOT,
        )
    if fetched.reason is not None:
        raise EnvironmentValidationError(
            f"cannot fetch the snapshot {first} of session {short} from {remote}: {fetched.reason}",
            hint=f"check the remote (git ls-remote {remote} {first}), then run "
            f"`acode resume {short}` again; nothing was changed",
            code=ErrorCode.HANDOFF_FETCH,
        )
    for ref, commit in sorted(fetched.at.items()):
        if commit != missing[ref]:
            raise EnvironmentValidationError(
                f"{ref} on {remote} is at {commit[:12] or 'no commit'}, not the snapshot "
                f"session {short}'s signed history names ({missing[ref][:12]}): the ref was "
                "moved or forged",
                hint=f"refusing to use it; delete it on the remote (git push {remote} :{ref}) "
                "and push it again from the machine that ran the session (acode sync there), "
                f"or run the step again on the work tree as recorded: acode resume {short} "
                "--strategy retry; nothing was changed",
                code=ErrorCode.HANDOFF_FORGED,
            )
    return tuple(sorted(fetched.at))


def missing_snapshots(journal: Journal, ws: Workspace) -> dict[str, str]:
    """ref -> commit of the snapshots the steps left in progress roll back to that are
    not in this clone."""
    return {ref: c for ref, c in named_snapshots(journal).items() if not has_commit(ws.root, c)}


def named_snapshots(journal: Journal) -> dict[str, str]:
    """ref -> commit of each snapshot the history names for a step left in progress."""
    named: dict[str, str] = {}
    session_id = journal.row.id
    for step in journal.unfinished_steps():
        if step.status is StepStatus.FAILED:
            continue
        started = journal.history.event(step.event_seq).payload
        # A rollback's record carries the start record it rolled back.
        started = started.get("started", started)
        ghost = started.get("ghost")
        if not isinstance(ghost, str):
            continue
        ref = snapshot_ref(session_id, step.step_id, step.attempt)
        named[ref] = ghost
        as_left = AsLeft.of(with_as_left(journal.history, step, started))
        if as_left is not None:
            named[ref + AS_LEFT_SUFFIX] = as_left.snapshot
    return named
