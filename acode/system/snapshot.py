"""Private snapshots of the work tree ("ghost commits") that a run step rolls back to.

A snapshot is a commit kept under ``refs/acode/``; its tree is built through acode's own
index (:mod:`acode.system.snapshot_index`), so it costs what changed since the last
one, and the user's index, HEAD, branches and stash are never touched. File contents
are stored and restored byte for byte, bypassing clean/smudge filters and end-of-line
conversion, so that a restore gives back exactly the bytes that were there. What two
snapshots disagree on is git's diff of their trees (:func:`snapshot_changes`): a restore
reads and writes only what differs.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from acode.errors import StepFailedError, UsageError
from acode.system.atomic import write_at
from acode.system.beneath import Beneath
from acode.system.git import FALLBACK_EMAIL, FALLBACK_NAME, is_work_tree
from acode.system.git_command import git_bytes, git_ok, run_git, run_git_bytes
from acode.system.snapshot_index import (
    MODE_EXEC,
    MODE_LINK,
    Repository,
    find_repository,
    is_state,
    locate,
    worktree_tree,
)

__all__ = [
    "BACKUP_SUFFIX",
    "SNAPSHOT_MESSAGE",
    "SNAPSHOT_REF_ROOT",
    "SnapshotEntry",
    "Worktree",
    "current_worktree",
    "drop_snapshot",
    "keep_backup",
    "prune_snapshots",
    "read_blob",
    "snapshot_changes",
    "snapshot_if_work_tree",
    "snapshot_ref",
    "snapshot_worktree",
    "write_back",
]

SNAPSHOT_REF_ROOT = "refs/acode"
SNAPSHOT_MESSAGE = "acode snapshot"
BACKUP_SUFFIX = "-before-rollback"
# One component of a snapshot ref: a subset of what git accepts (no '..', no leading dot).
_REF_PART = re.compile(r"[A-Za-z0-9_%-][A-Za-z0-9_.%-]*")
_RESTORE_HINT = (
    "resume with --strategy retry to run the command again without restoring the work tree"
)
# acode's own identity, always: the snapshot is not the user's commit, and asking git
# for the user's configuration would cost two more processes on every run step.
_IDENTITY = {
    f"GIT_{role}_{field}": value
    for role in ("AUTHOR", "COMMITTER")
    for field, value in (("NAME", FALLBACK_NAME), ("EMAIL", FALLBACK_EMAIL))
}


class SnapshotEntry(NamedTuple):
    """A file of a snapshot: its git mode and blob id."""

    mode: str
    blob: str


# A path on which two snapshots differ: its entry in the first and in the second (None
# where that snapshot does not have it).
Change = tuple[SnapshotEntry | None, SnapshotEntry | None]


def snapshot_ref(session_id: str, step_id: str, attempt: int) -> str:
    """The ref that keeps a step's snapshot: ``refs/acode/<session>/<step>-<attempt>``."""
    # git refuses '..' in a ref name. Step ids never contain '%', so escaping the first dot
    # of each pair keeps distinct steps on distinct refs.
    step = re.sub(r"\.(?=\.)", "%2E", step_id)
    ref = f"{SNAPSHOT_REF_ROOT}/{session_id}/{step}-{attempt}"
    _check_ref(ref)
    return ref


class Worktree(NamedTuple):
    """The workspace's files as they are now: their tree, and HEAD's commit."""

    tree: str
    head: str | None


def current_worktree(workspace: Path) -> Worktree:
    """The tree a snapshot taken now would hold, without keeping one."""
    return _worktree(workspace, locate(workspace))


def _worktree(workspace: Path, repo: Repository) -> Worktree:
    return Worktree(tree=worktree_tree(workspace, repo), head=repo.head)


def snapshot_if_work_tree(workspace: Path, ref: str) -> str | None:
    """:func:`snapshot_worktree`, or None when the workspace is not in a git work tree."""
    _check_ref(ref)
    repo = find_repository(workspace)
    if repo is None:
        return None
    return _keep(workspace, ref, _worktree(workspace, repo))


def snapshot_worktree(workspace: Path, ref: str) -> str:
    """Record the workspace's files as they are now in a commit kept at ``ref``; return it.

    The snapshot holds every file git would see in the workspace: tracked files with their
    current content and untracked files that are not ignored (``.agent/state`` never).
    Directories that are repositories of their own (submodules, nested clones) are left
    out. The parent is HEAD when there is one, so ``git diff HEAD <sha>`` reads naturally.
    """
    _check_ref(ref)
    return _keep(workspace, ref, current_worktree(workspace))


def _keep(workspace: Path, ref: str, now: Worktree) -> str:
    parent = ["-p", now.head] if now.head else []
    commit = git_bytes(
        workspace, ["commit-tree", now.tree, *parent, "-m", SNAPSHOT_MESSAGE], env=_IDENTITY
    )
    sha = commit.decode().strip()
    git_ok(workspace, ["update-ref", "-m", SNAPSHOT_MESSAGE, ref, sha])
    return sha


def snapshot_changes(workspace: Path, old: str, new: str) -> dict[str, Change]:
    """The workspace paths on which snapshots (or trees) ``old`` and ``new`` differ."""
    args = ["diff-tree", "-r", "-z", "--no-renames", "--relative", "--no-commit-id", old, new]
    result = run_git_bytes(workspace, args)
    if result.returncode != 0:
        for sha in (old, new):
            if run_git(workspace, ["cat-file", "-e", sha]).returncode != 0:
                raise StepFailedError(
                    f"the work tree snapshot {sha} is not in the repository at {workspace} "
                    "(its ref was deleted and git collected it, or the repository was "
                    "replaced)",
                    hint=_RESTORE_HINT,
                )
        git_bytes(workspace, args)  # raises with what git says
    fields = result.stdout.split(b"\0")
    changes: dict[str, Change] = {}
    for i in range(0, len(fields) - 1, 2):
        meta, raw = fields[i].decode(), fields[i + 1]
        old_mode, new_mode, old_blob, new_blob, _status = meta.lstrip(":").split()
        rel = os.fsdecode(raw)
        if not is_state(rel):
            changes[rel] = (_entry(old_mode, old_blob), _entry(new_mode, new_blob))
    return changes


def _entry(mode: str, blob: str) -> SnapshotEntry | None:
    return None if mode == "000000" else SnapshotEntry(mode=mode, blob=blob)


def write_back(
    tree: Beneath,
    snapshot: Mapping[str, SnapshotEntry],
    rewrite: Iterable[str],
    remove: Iterable[str],
) -> None:
    """Delete ``remove`` (with the directories that leaves empty) and write ``rewrite``
    as ``snapshot`` holds them, each by its name in a directory held open."""
    for rel in remove:
        _remove(tree, rel)
    rewrite = list(rewrite)
    contents = _read_blobs(tree.workspace, {snapshot[rel].blob for rel in rewrite})
    for rel in rewrite:
        entry = snapshot[rel]
        _write_entry(tree, rel, entry.mode, contents[entry.blob])


def read_blob(workspace: Path, blob: str) -> bytes:
    """The content of one blob of a snapshot."""
    return _read_blobs(workspace, [blob])[blob]


def keep_backup(workspace: Path, ref: str, now: Worktree) -> None:
    """Keep the work tree as it is (``now``) at ``ref`` before a restore changes it. When
    that ref exists already, a restore interrupted before has made it, and the first
    backup is the one kept."""
    if not _has_ref(workspace, ref):
        _keep(workspace, ref, now)


def drop_snapshot(workspace: Path, ref: str) -> None:
    """Delete one snapshot ref; its objects go with git's next garbage collection."""
    _check_ref(ref)
    git_ok(workspace, ["update-ref", "-d", ref])


def prune_snapshots(workspace: Path, session_id: str, *, keep_backups: bool = False) -> int:
    """Delete the snapshot refs of a session; return how many there were.

    Call it once the session is over: a snapshot is only needed while its step may be
    found interrupted. ``keep_backups`` keeps the ``-before-rollback`` refs, which hold
    what a rollback overwrote: a person's work, theirs to delete. Outside a git work
    tree there is nothing to prune.
    """
    root = f"{SNAPSHOT_REF_ROOT}/{session_id}"
    _check_ref(root)
    if not is_work_tree(workspace):
        return 0
    refs = git_ok(workspace, ["for-each-ref", "--format=%(refname)", root]).split()
    if keep_backups:
        refs = [ref for ref in refs if not ref.endswith(BACKUP_SUFFIX)]
    if refs:
        commands = "".join(f"delete {ref}\n" for ref in refs)
        git_bytes(workspace, ["update-ref", "--stdin"], stdin=commands.encode())
    return len(refs)


def _has_ref(workspace: Path, ref: str) -> bool:
    _check_ref(ref)
    return run_git(workspace, ["rev-parse", "--verify", "--quiet", ref]).returncode == 0


def _check_ref(ref: str) -> None:
    parts = ref.split("/")
    if (
        parts[:2] != SNAPSHOT_REF_ROOT.split("/")
        or len(parts) < 3
        or not all(_REF_PART.fullmatch(p) and not p.endswith((".lock", ".")) for p in parts[2:])
        or ".." in ref
    ):
        raise UsageError(
            f"snapshot ref {ref!r} is not a ref name under {SNAPSHOT_REF_ROOT}/ that git accepts",
            hint="name snapshots with snapshot_ref(session_id, step_id, attempt)",
        )


def _read_blobs(workspace: Path, shas: Iterable[str]) -> dict[str, bytes]:
    wanted = sorted(shas)
    if not wanted:
        return {}
    out = git_bytes(
        workspace, ["cat-file", "--batch"], stdin="".join(f"{s}\n" for s in wanted).encode()
    )
    blobs: dict[str, bytes] = {}
    pos = 0
    for sha in wanted:
        end = out.index(b"\n", pos)
        header = out[pos:end].decode().split()
        if len(header) != 3:
            raise StepFailedError(
                f"object {sha} of a work tree snapshot is missing from the repository at "
                f"{workspace}",
                hint=_RESTORE_HINT,
            )
        size = int(header[2])
        blobs[sha] = out[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1  # the content is followed by a newline
    return blobs


def _remove(tree: Beneath, rel: str) -> None:
    parts = rel.split("/")
    dir_fd = tree.directory(parts[:-1], create=False)
    if dir_fd is None:
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(parts[-1], dir_fd=dir_fd)
    # Directories the deletion empties go too, as git does: a command run again that
    # creates its output directory must not find it already there.
    for depth in range(len(parts) - 1, 0, -1):
        parent = tree.directory(parts[: depth - 1], create=False)
        assert parent is not None  # on the way to the file just removed
        try:
            os.rmdir(parts[depth - 1], dir_fd=parent)
        except OSError:
            break
        tree.forget(parts[:depth])


def _write_entry(tree: Beneath, rel: str, mode: str, data: bytes) -> None:
    *parents, name = rel.split("/")
    # A parent that is now a file or a symlink (an ignored one, so not removed above)
    # must give way, or the write would fail or land outside the workspace.
    dir_fd = tree.directory(parents, create=True, replace=True)
    assert dir_fd is not None  # create=True makes it
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            tree.forget((*parents, name))
            shutil.rmtree(name, dir_fd=dir_fd)
    if mode == MODE_LINK:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)
        os.symlink(os.fsdecode(data), name, dir_fd=dir_fd)
        return
    write_at(dir_fd, name, data, executable=mode == MODE_EXEC)
