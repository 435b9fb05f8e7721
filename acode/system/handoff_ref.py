"""A session's work tree as a chain of commits on its private ref,
``refs/acode/sessions/<id>``: what travels to another machine by git (docs/fleet.md).

Each commit's tree is the work tree after a step that changed it, built like the ghost
snapshots (:mod:`acode.system.snapshot_index`: acode's own index, the bytes as they are
on disk, ``.agent/state`` never); its first parent is the ref's previous commit (none for
the first), and the workspace's HEAD is a parent too when there is one, so that the
user's commits the tree sits on travel with it. Its message names the session, the
step, the attempt and the event it follows. The ref moves by compare-and-swap
(``update-ref REF NEW OLD``); the user's index, HEAD, branches and stash are never
written.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from acode.system.git_command import git_bytes, run_git
from acode.system.snapshot import SNAPSHOT_REF_ROOT
from acode.system.snapshot_index import find_repository, worktree_tree

__all__ = [
    "HANDOFF_REF_ROOT",
    "ChainCommit",
    "Recorded",
    "chain_commit",
    "handoff_ref",
    "move_ref",
    "read_ref",
    "record_worktree",
    "session_of_ref",
    "steps_between",
]

HANDOFF_REF_ROOT = f"{SNAPSHOT_REF_ROOT}/sessions"
_SESSION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# The trailers of a chain commit's message, read back by a resume that finds the ref
# ahead of the history (:func:`chain_commit`).
_TRAILER = re.compile(r"^Acode-(Session|Step|Attempt|After-Seq|Head): (.+)$", re.MULTILINE)
_IDENTITY = {
    "GIT_AUTHOR_NAME": "acode",
    "GIT_AUTHOR_EMAIL": "acode@localhost",
    "GIT_COMMITTER_NAME": "acode",
    "GIT_COMMITTER_EMAIL": "acode@localhost",
}


def session_of_ref(ref: str) -> str | None:
    """The session id ``ref`` is the hand-off ref of; None for any other ref (one a
    person or another tool put under the same root)."""
    root, _, session_id = ref.rpartition("/")
    return session_id if root == HANDOFF_REF_ROOT and _SESSION_ID.fullmatch(session_id) else None


def handoff_ref(session_id: str) -> str:
    """``refs/acode/sessions/<id>``; a session id is a UUID, checked: it names a ref."""
    if not _SESSION_ID.fullmatch(session_id):
        raise ValueError(f"not a session id: {session_id!r}")
    return f"{HANDOFF_REF_ROOT}/{session_id}"


class Recorded(NamedTuple):
    """A commit added to the chain: its id, its tree and HEAD's commit it sits on."""

    commit: str
    tree: str
    head: str | None


class ChainCommit(NamedTuple):
    """What a chain commit's message says, and its first parent (None: the first)."""

    commit: str
    parent: str | None
    session_id: str
    step: str
    attempt: int
    after_seq: int


def read_ref(workspace: Path, ref: str) -> Recorded | None:
    """The ref's commit, its tree and the HEAD it sat on; None when there is no such
    ref."""
    fmt = "--format=%(objectname) %(tree)%0a%(contents)"
    out = run_git(workspace, ["for-each-ref", fmt, ref]).stdout
    first, _, body = out.partition("\n")
    fields = first.split()
    if len(fields) != 2:
        return None
    head = dict(_TRAILER.findall(body)).get("Head")
    return Recorded(commit=fields[0], tree=fields[1], head=head)


def record_worktree(
    workspace: Path,
    session_id: str,
    *,
    last: Recorded | None,
    step: str,
    attempt: int,
    after_seq: int,
) -> Recorded | None:
    """Add the work tree as it is now to the session's chain, after ``last`` (the ref
    as this process left it, None: none yet); None when the tree and HEAD are the ones
    ``last`` holds, or the workspace is in no git work tree.

    Raises StepFailedError when git fails, and when the ref is no longer at ``last``
    (another process moved it)."""
    repo = find_repository(workspace)
    if repo is None:
        return None
    tree = worktree_tree(workspace, repo)
    ref = handoff_ref(session_id)
    if last is not None and last.tree == tree and last.head == repo.head:
        return None
    parents = ["-p", last.commit] if last is not None else []
    if repo.head is not None:
        parents += ["-p", repo.head]
    # Attempt 0: recorded as the session ended or paused, not after a step.
    what = f"after step {step}" if attempt else f"as the session stopped at {step}"
    trailers = [
        f"Acode-Session: {session_id}",
        f"Acode-Step: {step}",
        f"Acode-Attempt: {attempt}",
        f"Acode-After-Seq: {after_seq}",
        *([f"Acode-Head: {repo.head}"] if repo.head else []),
    ]
    message = f"acode session {session_id[:8]}: work tree {what}\n\n" + "\n".join(trailers)
    commit = git_bytes(workspace, ["commit-tree", tree, *parents, "-m", message], env=_IDENTITY)
    sha = commit.decode().strip()
    move_ref(workspace, ref, sha, last.commit if last is not None else None)
    return Recorded(commit=sha, tree=tree, head=repo.head)


def move_ref(workspace: Path, ref: str, new: str, old: str | None) -> None:
    """Point ``ref`` at ``new`` if it is still at ``old`` (None: if it does not exist)."""
    expected = old if old is not None else ""
    git_bytes(workspace, ["update-ref", "-m", "acode hand-off", ref, new, expected])


def chain_commit(workspace: Path, commit: str) -> ChainCommit | None:
    """A chain commit's trailers and first parent; None when ``commit`` is not one (or
    not in the repository)."""
    result = run_git(workspace, ["show", "-s", "--format=%P%n%B", commit, "--"])
    if result.returncode != 0:
        return None
    first, _, body = result.stdout.partition("\n")
    found = dict(_TRAILER.findall(body))
    parents = first.split()
    # HEAD, when the commit names one, is its last parent: the chain's is the first.
    chained = len(parents) == (2 if "Head" in found else 1)
    try:
        return ChainCommit(
            commit=commit,
            parent=parents[0] if chained else None,
            session_id=found["Session"],
            step=found["Step"],
            attempt=int(found["Attempt"]),
            after_seq=int(found["After-Seq"]),
        )
    except (KeyError, ValueError):
        return None


def steps_between(workspace: Path, old: str | None, new: str) -> int | None:
    """How many chain commits ``new`` has that ``old`` has not (None: all of them);
    None when git cannot tell (an object missing)."""
    span = [f"{old}..{new}"] if old else [new]
    fmt = "--format=%x00%(trailers:key=Acode-Session,valueonly)"
    result = run_git(workspace, ["log", "--first-parent", fmt, *span, "--"])
    if result.returncode != 0:
        return None
    steps = 0
    # The first chain commit's first parent is the user's HEAD: the chain ends there.
    for entry in result.stdout.split("\0")[1:]:
        if not entry.strip():
            break
        steps += 1
    return steps
