"""Rolling an interrupted `run` step back to its ghost snapshot, and no further.

A ghost snapshot (:mod:`acode.system.snapshot`) holds the whole work tree as it was before
the step's command ran. Making the work tree equal to it again would also undo what a
person did while the session was stopped, so a rollback is held to less than that:

- At a pause (Ctrl+C, SIGTERM), the session keeps a second snapshot: the work tree as
  the interruption left it (:func:`take_as_left`), recorded in the pause's event. On
  resume, whatever differs from it is a person's change (reported like any changed
  file, and kept), and the rollback reverts only what the step changed between the two
  snapshots, in the files still as the pause left them.
- After a kill there is no such snapshot, and a person's change cannot be told from the
  step's: what differs from the ghost is reverted, except a file changed after the
  resume began (``fresh_after_ns``), which cannot be the step's doing. What a rollback
  will revert is listed before it happens (:func:`plan_rollback`), and the work tree as
  found is kept at a backup ref first.
- The files this process's own output goes to (``acode resume > out.txt``) are never
  touched, nor those the interrupted run's output went to, which the pause records:
  they change after its snapshot, with the pause's last message.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from acode.domain.events import EventType
from acode.errors import AcodeError
from acode.system.beneath import Beneath
from acode.system.process_table import own_file_paths
from acode.system.snapshot import (
    SnapshotEntry,
    Worktree,
    current_worktree,
    keep_backup,
    snapshot_changes,
    snapshot_ref,
    snapshot_worktree,
    write_back,
)

if TYPE_CHECKING:
    from acode.domain.reducer import StepRecord
    from acode.engine.history import History
    from acode.engine.steps.base import StepContext

__all__ = [
    "AS_LEFT_KEY",
    "AS_LEFT_SUFFIX",
    "AsLeft",
    "Kept",
    "KeptReason",
    "Rollback",
    "describe",
    "plan_rollback",
    "restore_hint",
    "roll_back",
    "take_as_left",
    "with_as_left",
]

# In a pause's state_changed event: {"position": the step's, "snapshot": the commit,
# "outputs": [the run's own output files]}; in a step's start record as resume hands it
# to the step, the same without the position.
AS_LEFT_KEY = "as_left"
AS_LEFT_SUFFIX = "-as-left"
_LISTED = 5  # names a one-line summary shows before "and N more"


class KeptReason(StrEnum):
    """Why a file that differs from the ghost snapshot is left as it is."""

    SINCE_PAUSE = "changed since the pause"
    AFTER_START = "changed after this resume began"
    OUTPUT = "acode's own output"


class AsLeft(NamedTuple):
    """The work tree as a pause left it."""

    snapshot: str
    outputs: tuple[str, ...] = ()  # the files the paused run's own output went to

    @classmethod
    def of(cls, started: Mapping[str, Any]) -> AsLeft | None:
        """The as-left snapshot a step's start record carries (:func:`with_as_left`)."""
        mark = started.get(AS_LEFT_KEY)
        if not isinstance(mark, Mapping) or not isinstance(mark.get("snapshot"), str):
            return None
        outputs = mark.get("outputs") or ()
        return cls(mark["snapshot"], tuple(p for p in outputs if isinstance(p, str)))


class Kept(NamedTuple):
    path: str
    reason: KeptReason
    before: str | None  # its blob in the snapshot it differs from; None: not there
    exists: bool  # whether the work tree has it now


class Rollback(NamedTuple):
    """What rolling a step back does to the work tree as it is now."""

    revert: tuple[str, ...]  # written back as they were before the step ran
    delete: tuple[str, ...]  # deleted: the step made them
    kept: tuple[Kept, ...]  # differ from the snapshot, left as they are
    # Paths whose content the rollback answers for: the environment check leaves them
    # to it (a person's changes since the pause are not among them).
    decided: frozenset[str]

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(sorted((*self.revert, *self.delete)))

    @property
    def changes(self) -> tuple[Kept, ...]:
        """A person's changes since the pause."""
        return tuple(k for k in self.kept if k.reason is KeptReason.SINCE_PAUSE)


def take_as_left(workspace: Path, ctx: StepContext) -> dict[str, Any]:
    """Snapshot the work tree as an interruption of step ``ctx`` left it, beside the
    step's ghost; returns what the pause's event records of it. Nothing when it cannot
    be taken (a full disk, say): a pause never fails for want of it, and the resume
    then treats the stop as it treats a kill."""
    ref = snapshot_ref(ctx.session_id, ctx.step_id, ctx.attempt) + AS_LEFT_SUFFIX
    try:
        sha = snapshot_worktree(workspace, ref)
    except (AcodeError, OSError):
        return {}
    mark: dict[str, Any] = {"position": ctx.position, "snapshot": sha}
    outputs = _output_paths(workspace)
    if outputs:
        mark["outputs"] = outputs
    return {AS_LEFT_KEY: mark}


def with_as_left(history: History, record: StepRecord, started: dict[str, Any]) -> dict[str, Any]:
    """The start record of interrupted step ``record`` with the as-left snapshot that a
    pause after it recorded (the newest), read from events checked against the chain.
    A record that has it already (a rollback's, which carries the start record) is
    returned as it is."""
    if AS_LEFT_KEY in started:
        return started
    found = None
    for event in history.events(after=record.event_seq):
        mark = event.payload.get(AS_LEFT_KEY)
        if (
            event.type is EventType.STATE_CHANGED
            and isinstance(mark, dict)
            and mark.get("position") == record.position
        ):
            found = {k: v for k, v in mark.items() if k != "position"}
    return started if found is None else {**started, AS_LEFT_KEY: found}


def plan_rollback(
    workspace: Path,
    ghost: str,
    *,
    as_left: AsLeft | None = None,
    fresh_after_ns: int | None = None,
) -> Rollback:
    """What :func:`roll_back` would do now, changing nothing."""
    differing = _differing(workspace, ghost, as_left)
    with Beneath(workspace) as tree:
        return _plan(tree, differing, _outputs(as_left), fresh_after_ns)


def roll_back(
    workspace: Path,
    ghost: str,
    *,
    backup_ref: str,
    as_left: AsLeft | None = None,
    fresh_after_ns: int | None = None,
) -> Rollback:
    """Revert what the step changed (see the module's docstring), keeping the work tree
    as found at ``backup_ref`` first when anything is to change."""
    differing = _differing(workspace, ghost, as_left)
    with Beneath(workspace) as tree:
        plan = _plan(tree, differing, _outputs(as_left), fresh_after_ns)
        if plan.revert or plan.delete:
            keep_backup(workspace, backup_ref, differing.worktree)
        write_back(tree, differing.before, plan.revert, plan.delete)
    return plan


class _Differing(NamedTuple):
    """The entries of the paths on which the ghost, the as-left snapshot and the work
    tree now do not all agree; every other path is the same in all three."""

    before: dict[str, SnapshotEntry]  # in the ghost
    left: dict[str, SnapshotEntry] | None  # in the as-left snapshot, if there is one
    now: dict[str, SnapshotEntry]  # in the work tree now
    worktree: Worktree  # the work tree now, whole


def _differing(workspace: Path, ghost: str, as_left: AsLeft | None) -> _Differing:
    worktree = current_worktree(workspace)
    since_ghost = snapshot_changes(workspace, ghost, worktree.tree)
    since_pause = (
        {} if as_left is None else snapshot_changes(workspace, as_left.snapshot, worktree.tree)
    )
    before: dict[str, SnapshotEntry] = {}
    left: dict[str, SnapshotEntry] = {}
    now: dict[str, SnapshotEntry] = {}
    for rel in since_ghost.keys() | since_pause.keys():
        found = (since_ghost.get(rel) or since_pause[rel])[1]
        # A path one diff does not name is, in that snapshot, as it is now.
        was = since_ghost[rel][0] if rel in since_ghost else found
        paused = since_pause[rel][0] if rel in since_pause else found
        for entries, entry in ((before, was), (left, paused), (now, found)):
            if entry is not None:
                entries[rel] = entry
    return _Differing(
        before=before, left=None if as_left is None else left, now=now, worktree=worktree
    )


def _outputs(as_left: AsLeft | None) -> frozenset[str]:
    return frozenset(() if as_left is None else as_left.outputs)


def _plan(
    tree: Beneath,
    differing: _Differing,
    paused_outputs: frozenset[str],
    fresh_after_ns: int | None,
) -> Rollback:
    before, left, now, _ = differing
    base = before if left is None else left
    outputs = _own_outputs()
    revert: list[str] = []
    delete: list[str] = []
    kept: list[Kept] = []
    decided: set[str] = set()
    for rel in sorted(before.keys() | now.keys() | base.keys()):
        was, found = before.get(rel), now.get(rel)
        reason: KeptReason | None = None
        if found == was and (left is None or found == left.get(rel)):
            continue  # neither the step nor anyone since changed it
        if left is not None and found != left.get(rel):
            if found == was:
                decided.add(rel)  # put back as it was before the step already
                continue
            reason = KeptReason.SINCE_PAUSE
        info = None if found is None else _lstat(tree, rel)
        if rel in paused_outputs or (info is not None and (info.st_dev, info.st_ino) in outputs):
            reason = KeptReason.OUTPUT
        elif reason is None and left is None and _fresh(info, fresh_after_ns):
            reason = KeptReason.AFTER_START
        if reason is not KeptReason.SINCE_PAUSE:
            decided.add(rel)
        if reason is not None:
            entry = base.get(rel)
            kept.append(
                Kept(
                    path=rel,
                    reason=reason,
                    before=None if entry is None else entry.blob,
                    exists=found is not None,
                )
            )
        elif was is None:
            delete.append(rel)
        else:
            revert.append(rel)
    return Rollback(
        revert=tuple(revert), delete=tuple(delete), kept=tuple(kept), decided=frozenset(decided)
    )


def _fresh(info: os.stat_result | None, after_ns: int | None) -> bool:
    # The change time too: a copy that kept an old mtime (`cp -p`) was still made now.
    return (
        info is not None
        and after_ns is not None
        and max(info.st_mtime_ns, info.st_ctime_ns) > after_ns
    )


def _lstat(tree: Beneath, rel: str) -> os.stat_result | None:
    *parents, name = rel.split("/")
    dir_fd = tree.directory(parents, create=False)
    if dir_fd is None:
        return None
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _output_paths(workspace: Path) -> list[str]:
    """The workspace files this process's standard output and error go to."""
    root = os.path.realpath(workspace)
    found: list[str] = []
    targets = own_file_paths((1, 2))
    for target in (targets[fd] for fd in (1, 2) if fd in targets):
        rel = os.path.relpath(target, root)
        if not rel.startswith("..") and not os.path.isabs(rel) and rel not in found:
            found.append(rel)
    return found


def _own_outputs() -> frozenset[tuple[int, int]]:
    """The regular files this process's standard output and error go to."""
    found = set()
    for fd in (1, 2):
        try:
            info = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            found.add((info.st_dev, info.st_ino))
    return frozenset(found)


def restore_hint(backup_ref: str) -> str:
    """How a person takes a file back from the backup a rollback kept."""
    return f"git restore --source={backup_ref} -- PATH"


def describe(plan: Rollback, ghost: str, backup_ref: str) -> str:
    """One line for the step's progress and the log."""
    parts = []
    if plan.revert:
        parts.append(f"put back {_names(plan.revert)}")
    if plan.delete:
        parts.append(f"deleted {_names(plan.delete)}")
    if not parts:
        parts.append("nothing to put back")
    text = f"rolled back to snapshot {ghost[:12]}: " + "; ".join(parts)
    if plan.kept:
        listed = [f"{k.path} ({k.reason.value})" for k in plan.kept]
        text += f"; left as they are: {_names(listed)}"
    if plan.revert or plan.delete:
        text += f"; the files as found are kept at {backup_ref} ({restore_hint(backup_ref)})"
    return text + "; running again"


def _names(names: Iterable[str]) -> str:
    listed = list(names)
    shown = ", ".join(listed[:_LISTED])
    return shown if len(listed) <= _LISTED else f"{shown} and {len(listed) - _LISTED} more"
