"""The steps' work-tree snapshots travel beside the hand-off ref: pushed create-only,
never over another commit, and fetched back only as the very commit asked for. Real git,
a bare repository on disk as the remote."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from acode.system.snapshot import (
    BACKUP_SUFFIX,
    prune_snapshots,
    snapshot_ref,
    snapshot_worktree,
)
from acode.system.snapshot_fetch import fetch_snapshots
from acode.system.snapshot_push import push_snapshots, retire_snapshots, snapshots_to_push
from acode.system.workspace import StatePaths

__all__: list[str] = []

SESSION = str(uuid.UUID(int=0x01A21C00_0000_7000_8000_000000000001))


def git(ws: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ws, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def remote_refs(remote: Path) -> dict[str, str]:
    out = git(remote, "for-each-ref", "--format=%(refname) %(objectname)", "refs/acode")
    return dict(line.split(" ") for line in out.splitlines())


@pytest.fixture
def clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "t")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "t@t.invalid")
    ws = tmp_path / "a"
    ws.mkdir()
    git(ws, "init", "--quiet", "--initial-branch=main")
    (ws / "README.md").write_text("hello\n")
    git(ws, "add", "README.md")
    git(ws, "commit", "--quiet", "--message", "init")
    git(tmp_path, "init", "--quiet", "--bare", str(tmp_path / "team.git"))
    git(ws, "remote", "add", "origin", str(tmp_path / "team.git"))
    StatePaths(ws).state_dir.mkdir(parents=True)  # as any session's workspace has it
    return ws


def test_ghosts_and_as_left_snapshots_travel_and_backups_stay(clone: Path) -> None:
    paths = StatePaths(clone)
    ghost = snapshot_ref(SESSION, "build", 1)
    made = {ref: snapshot_worktree(clone, ref) for ref in (ghost, ghost + "-as-left")}
    snapshot_worktree(clone, ghost + BACKUP_SUFFIX)  # a person's files: never pushed

    assert snapshots_to_push(clone, paths) == made
    pushed = push_snapshots(clone, paths, "origin", made, timeout=30)

    assert pushed.session_ids == (SESSION,)
    assert pushed.reason is None
    assert remote_refs(clone.parent / "team.git") == made
    assert snapshots_to_push(clone, paths) == {}
    # A step's next attempt: only its snapshot waits.
    (clone / "README.md").write_text("changed\n")
    again = snapshot_ref(SESSION, "build", 2)
    assert snapshots_to_push(clone, paths) == {}
    sha = snapshot_worktree(clone, again)
    assert snapshots_to_push(clone, paths) == {again: sha}


def test_a_remote_holding_another_commit_under_the_name_keeps_it(clone: Path) -> None:
    paths = StatePaths(clone)
    ghost = snapshot_ref(SESSION, "build", 1)
    remote = clone.parent / "team.git"
    # Not an ancestor of the snapshot (whose parent is HEAD): a push would not be a
    # fast-forward of it.
    theirs = git(clone, "commit-tree", "-m", "theirs", git(clone, "rev-parse", "HEAD^{tree}"))
    git(clone, "push", "--quiet", "origin", f"{theirs}:{ghost}")
    (clone / "README.md").write_text("mine\n")
    ours = snapshot_worktree(clone, ghost)

    pushed = push_snapshots(clone, paths, "origin", {ghost: ours}, timeout=30)

    assert pushed.session_ids == ()
    assert pushed.reason is not None
    assert f"the remote refused {ghost}" in pushed.reason
    assert pushed.retry_at_us is None  # a person's to look at, not retried
    assert remote_refs(remote) == {ghost: theirs}
    assert snapshots_to_push(clone, paths) == {}


def test_an_unreachable_remote_is_tried_again_later(clone: Path, tmp_path: Path) -> None:
    paths = StatePaths(clone)
    ghost = snapshot_ref(SESSION, "build", 1)
    sha = snapshot_worktree(clone, ghost)
    git(clone, "remote", "set-url", "origin", str(tmp_path / "gone.git"))

    pushed = push_snapshots(clone, paths, "origin", {ghost: sha}, timeout=30)

    assert pushed.session_ids == ()
    assert pushed.reason is not None
    assert "gone.git" in pushed.reason
    assert pushed.retry_at_us is not None
    assert snapshots_to_push(clone, paths) == {ghost: sha}


def test_a_snapshot_is_fetched_only_as_the_commit_asked_for(clone: Path, tmp_path: Path) -> None:
    paths = StatePaths(clone)
    good, forged = snapshot_ref(SESSION, "build", 1), snapshot_ref(SESSION, "lint", 1)
    (clone / "README.md").write_text("before build\n")
    wanted = {good: snapshot_worktree(clone, good), forged: snapshot_worktree(clone, forged)}
    push_snapshots(clone, paths, "origin", dict(wanted), timeout=30)
    other = git(clone, "rev-parse", "HEAD")
    git(clone, "push", "--quiet", "--force", "origin", f"{other}:{forged}")
    b = tmp_path / "b"
    git(tmp_path, "clone", "--quiet", str(tmp_path / "team.git"), str(b))

    found = fetch_snapshots(b, "origin", wanted)

    assert found.reason is None
    assert found.at == {good: wanted[good], forged: other}
    kept = git(b, "for-each-ref", "--format=%(refname) %(objectname)", "refs/acode")
    assert kept == f"{good} {wanted[good]}"  # the forged one names nothing here

    gone = snapshot_ref(SESSION, "never-pushed", 1)
    missing = fetch_snapshots(b, "origin", {gone: wanted[good]})
    assert missing.missing == (gone,)
    assert missing.at == {}
    assert git(b, "for-each-ref", "--format=%(refname)", "refs/acode") == good


def test_a_person_asking_pushes_again_a_snapshot_deleted_on_the_remote(clone: Path) -> None:
    paths = StatePaths(clone)
    ghost = snapshot_ref(SESSION, "build", 1)
    sha = snapshot_worktree(clone, ghost)
    remote = clone.parent / "team.git"
    push_snapshots(clone, paths, "origin", {ghost: sha}, timeout=30)
    git(clone, "push", "--quiet", "origin", f":{ghost}")

    assert snapshots_to_push(clone, paths) == {}  # the background push believes its record
    asked = snapshots_to_push(clone, paths, asked=True)
    assert asked == {ghost: sha}
    assert push_snapshots(clone, paths, "origin", asked, timeout=30).session_ids == (SESSION,)
    assert remote_refs(remote) == {ghost: sha}
    # Already there: nothing is sent, and nothing is said to be.
    again = push_snapshots(clone, paths, "origin", asked, timeout=30)
    assert (again.session_ids, again.reason) == ((), None)


def test_the_snapshots_of_a_session_ended_here_go_from_the_remote_too(clone: Path) -> None:
    paths = StatePaths(clone)
    ours, moved = snapshot_ref(SESSION, "build", 1), snapshot_ref(SESSION, "lint", 1)
    made = {ours: snapshot_worktree(clone, ours), moved: snapshot_worktree(clone, moved)}
    remote = clone.parent / "team.git"
    push_snapshots(clone, paths, "origin", dict(made), timeout=30)
    # Another machine that ran the session before pushed one of its own.
    theirs = snapshot_ref(SESSION, "r0", 1)
    git(clone, "push", "--quiet", "origin", f"{made[ours]}:{theirs}")
    # Another session's stays.
    other_session = snapshot_ref(str(uuid.UUID(int=7)), "build", 1)
    git(clone, "push", "--quiet", "origin", f"{made[ours]}:{other_session}")
    prune_snapshots(clone, SESSION)
    # Nothing is deleted while the session has not ended: a pruned ref alone says nothing.
    push_snapshots(clone, paths, "origin", {}, timeout=30)
    assert len(remote_refs(remote)) == 4

    retire_snapshots(paths, SESSION)  # the session ended here
    done = push_snapshots(clone, paths, "origin", snapshots_to_push(clone, paths), timeout=30)

    assert (done.session_ids, done.reason) == ((), None)
    assert remote_refs(remote) == {other_session: made[ours]}
    # Done with: the next push has nothing to send or delete.
    git(clone, "push", "--quiet", "origin", f"{made[ours]}:{ours}")
    push_snapshots(clone, paths, "origin", {}, timeout=30)
    assert remote_refs(remote) == {other_session: made[ours], ours: made[ours]}


def test_an_unreachable_remote_keeps_the_deletions_for_later(clone: Path, tmp_path: Path) -> None:
    paths = StatePaths(clone)
    ghost = snapshot_ref(SESSION, "build", 1)
    sha = snapshot_worktree(clone, ghost)
    push_snapshots(clone, paths, "origin", {ghost: sha}, timeout=30)
    prune_snapshots(clone, SESSION)
    retire_snapshots(paths, SESSION)
    git(clone, "remote", "set-url", "origin", str(tmp_path / "gone.git"))

    failed = push_snapshots(clone, paths, "origin", {}, timeout=30)

    assert failed.reason is not None
    assert "gone.git" in failed.reason
    assert failed.retry_at_us is not None
    git(clone, "remote", "set-url", "origin", str(tmp_path / "team.git"))
    assert push_snapshots(clone, paths, "origin", {}, timeout=30).reason is None
    assert remote_refs(tmp_path / "team.git") == {}
