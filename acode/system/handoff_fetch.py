"""Bringing a session's recorded work tree into this clone: its hand-off ref fetched
from the git remote, and the recorded tree checked out (docs/fleet.md, "Hand-off:
resume on another machine").

The fetch goes to a ref of its own (``refs/acode/incoming/<id>``, removed after), so
that what the remote holds is looked at before it names anything here. The check-out
writes the files that differ between the work tree and the recorded tree, from an index
of acode's own, and removes the ones the tree does not have. When the recorded tree sat
on another commit than this clone's HEAD, HEAD is detached at that commit first and the
user's index set to its tree (what ``git checkout --detach`` would leave), so that the
session's own commits come along and its next ones follow them; no branch, tag or stash
is written.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import NamedTuple

from acode.system.git_command import git_ok, run_git
from acode.system.handoff_push import git_reason, run_remote_git
from acode.system.handoff_ref import HANDOFF_REF_ROOT

__all__ = [
    "FETCH_TIMEOUT_S",
    "Fetched",
    "check_out",
    "fetch_ref",
    "has_commit",
    "holds",
    "local_changes",
    "same_repository",
    "tree_changes",
]

# How long a fetch of a session's ref may take: a remote that does not answer by then
# is reported as unreachable.
FETCH_TIMEOUT_S = 60.0
_INCOMING_ROOT = "refs/acode/incoming"
# Paths given to one `git checkout-index`.
_BATCH = 500


class Fetched(NamedTuple):
    """What a fetch of a session's ref found: the commit the remote's ref names (None:
    the fetch failed, ``reason`` says why) and whether ``wanted`` is that commit or one
    of its ancestors."""

    at: str | None
    holds: bool
    reason: str | None


def has_commit(workspace: Path, commit: str) -> bool:
    return run_git(workspace, ["cat-file", "-e", f"{commit}^{{commit}}"]).returncode == 0


def holds(workspace: Path, ref: str, commit: str) -> bool:
    """Whether ``ref`` is at ``commit`` or after it (False: no such ref or commit)."""
    return run_git(workspace, ["merge-base", "--is-ancestor", commit, ref]).returncode == 0


def fetch_ref(
    workspace: Path, remote: str, ref: str, wanted: str, *, timeout: float = FETCH_TIMEOUT_S
) -> Fetched:
    """Fetch ``ref`` from ``remote`` and tell whether it holds ``wanted``; the objects
    stay, the ref fetched into does not."""
    incoming = _INCOMING_ROOT + ref.removeprefix(HANDOFF_REF_ROOT)
    args = ["fetch", "--no-tags", "--no-write-fetch-head", "--quiet", remote, f"+{ref}:{incoming}"]
    code, _, err = run_remote_git(workspace, args, timeout)
    if code != 0:
        return Fetched(None, False, git_reason(err) or f"git fetch exited with status {code}")
    try:
        at = git_ok(workspace, ["rev-parse", "--verify", f"{incoming}^{{commit}}"]).strip()
        return Fetched(at, holds(workspace, incoming, wanted), None)
    finally:
        run_git(workspace, ["update-ref", "-d", incoming])


def same_repository(workspace: Path, commit: str, head: str) -> bool:
    """Whether ``commit`` and ``head`` share a first commit: two clones of one
    repository do, two unrelated repositories do not."""
    roots = [
        set(git_ok(workspace, ["rev-list", "--max-parents=0", c, "--"]).split())
        for c in (commit, head)
    ]
    return bool(roots[0] & roots[1])


def tree_changes(top: Path, old: str, new: str) -> list[tuple[str, str]]:
    """(status, path) of each file that differs from tree ``old`` to tree ``new``:
    A added, M changed, D deleted, T type changed."""
    out = git_ok(top, ["diff-tree", "-r", "-z", "--no-renames", "--name-status", old, new])
    fields = out.split("\0")
    return [(fields[i], fields[i + 1]) for i in range(0, len(fields) - 1, 2)]


def local_changes(top: Path, head: str | None, tree: str) -> set[str]:
    """The paths of the work tree (as ``tree``) and of the user's index that differ from
    ``head`` (every path before the first commit)."""
    if head is None:
        listed = git_ok(top, ["ls-tree", "-r", "-z", "--name-only", tree])
        return {p for p in listed.split("\0") if p}
    changed = {path for _, path in tree_changes(top, f"{head}^{{tree}}", tree)}
    staged = git_ok(top, ["diff-index", "--cached", "-z", "--name-only", head, "--"])
    return changed | {p for p in staged.split("\0") if p}


def check_out(
    top: Path, tree: str, changes: list[tuple[str, str]], *, detach_at: str | None
) -> None:
    """Bring the work tree at ``top`` to ``tree``: ``changes`` (``tree_changes`` from
    the work tree's own) written or removed; HEAD detached at ``detach_at`` first, when
    given, with the user's index set to that commit's tree."""
    if detach_at is not None:
        git_ok(top, ["update-ref", "--no-deref", "-m", "acode hand-off", "HEAD", detach_at])
        git_ok(top, ["read-tree", detach_at])
    written = [path for status, path in changes if status != "D"]
    with tempfile.TemporaryDirectory(prefix="acode-handoff-") as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        git_ok(top, ["read-tree", tree], env=env)
        for start in range(0, len(written), _BATCH):
            batch = written[start : start + _BATCH]
            git_ok(top, ["checkout-index", "--force", "--", *batch], env=env)
    for status, path in changes:
        if status == "D":
            _remove(top, path)


def _remove(top: Path, path: str) -> None:
    target = top / path
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    # Folders the tree no longer has go too, as git's own check-out removes them.
    parent = target.parent
    while parent != top:
        try:
            os.rmdir(parent)
        except OSError:  # not empty (or not ours to remove)
            return
        parent = parent.parent
