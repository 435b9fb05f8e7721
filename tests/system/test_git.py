from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from acode.errors import StepFailedError, UsageError
from acode.system.git import (
    FALLBACK_EMAIL,
    FALLBACK_NAME,
    clear_stale_index_lock,
    commit_all,
    find_commit_with_trailer,
    is_work_tree,
)
from acode.system.workspace import ensure_state_ignored

_GIT_IDENTITY_VARS = (
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "EMAIL",
)


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No global, system or XDG git configuration and no identity from the environment."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in list(os.environ):
        if name in _GIT_IDENTITY_VARS or name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
            monkeypatch.delenv(name)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q")
    _git(path, "config", "user.name", "Test User")
    _git(path, "config", "user.email", "test@example.com")
    return path


def test_is_work_tree(repo: Path, tmp_path: Path) -> None:
    assert is_work_tree(repo)
    (repo / "sub").mkdir()
    assert is_work_tree(repo / "sub")
    plain = tmp_path / "plain"
    plain.mkdir()
    assert not is_work_tree(plain)
    assert not is_work_tree(tmp_path / "missing")


def test_commit_with_trailer_is_found(repo: Path) -> None:
    (repo / "a.txt").write_text("a")
    sha = commit_all(repo, "Add a", {"Acode-Step": "key-123", "Acode-Session": "0190abcd"})
    assert _git(repo, "rev-parse", "HEAD").strip() == sha
    assert _git(repo, "log", "-1", "--format=%B").strip() == (
        "Add a\n\nAcode-Step: key-123\nAcode-Session: 0190abcd"
    )
    assert _git(repo, "show", "--format=", "--name-only", sha).split() == ["a.txt"]
    assert find_commit_with_trailer(repo, "Acode-Step", "key-123") == sha


def test_prefix_matching_and_newest_wins(repo: Path) -> None:
    old = commit_all(repo, "first", {"Acode-Step": "sess1-step-a"})
    new = commit_all(repo, "second", {"Acode-Step": "sess1-step-b"})
    commit_all(repo, "third", {"Other": "sess1-step-c"})
    assert find_commit_with_trailer(repo, "Acode-Step", "sess1-") == new
    assert find_commit_with_trailer(repo, "Acode-Step", "sess1-step-a") == old
    assert find_commit_with_trailer(repo, "Acode-Step", "sess2-") is None
    assert find_commit_with_trailer(repo, "Acode-Step", "step-a") is None  # prefix, not infix


def test_trailer_text_outside_the_trailer_block_does_not_count(repo: Path) -> None:
    _git(repo, "commit", "-q", "--allow-empty", "-m", "Acode-Step: key-1")
    _git(
        repo,
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "Subject\n\nAcode-Step: key-2 mentioned in the body\n\nSigned-off-by: x <x@y>",
    )
    assert find_commit_with_trailer(repo, "Acode-Step", "key-") is None


def test_only_commits_reachable_from_head(repo: Path) -> None:
    commit_all(repo, "base", {})
    _git(repo, "checkout", "-q", "-b", "side")
    commit_all(repo, "on side", {"Acode-Step": "k"})
    _git(repo, "checkout", "-q", "-")
    assert find_commit_with_trailer(repo, "Acode-Step", "k") is None


def test_empty_repository_and_non_repository(repo: Path, tmp_path: Path) -> None:
    assert find_commit_with_trailer(repo, "Acode-Step", "") is None
    assert find_commit_with_trailer(tmp_path, "Acode-Step", "") is None


def test_commit_when_nothing_changed_still_commits(repo: Path) -> None:
    first = commit_all(repo, "first", {"Acode-Step": "one"})
    second = commit_all(repo, "nothing new", {"Acode-Step": "two"})
    assert first != second
    assert _git(repo, "rev-list", "--count", "HEAD").strip() == "2"
    assert find_commit_with_trailer(repo, "Acode-Step", "one") == first
    assert find_commit_with_trailer(repo, "Acode-Step", "two") == second


def test_commit_stages_deletions_and_new_files(repo: Path) -> None:
    (repo / "gone.txt").write_text("x")
    commit_all(repo, "add", {})
    (repo / "gone.txt").unlink()
    (repo / "new.txt").write_text("y")
    commit_all(repo, "change", {})
    assert _git(repo, "ls-files").split() == ["new.txt"]
    assert _git(repo, "status", "--porcelain") == ""


def test_state_dir_is_never_committed(repo: Path) -> None:
    state = repo / ".agent" / "state"
    ensure_state_ignored(state)
    assert (state / ".gitignore").read_text() == "*\n"
    (state / "acode.db").write_bytes(b"sqlite")
    (repo / ".agent" / "config.yml").write_text("model: x\n")
    commit_all(repo, "work", {"Acode-Step": "k"})
    assert _git(repo, "ls-files").split() == [".agent/config.yml"]


def test_ensure_state_ignored_rewrites_only_when_different(tmp_path: Path) -> None:
    state = tmp_path / "state"
    ensure_state_ignored(state)
    ignore = state / ".gitignore"
    os.utime(ignore, ns=(1, 1))
    ensure_state_ignored(state)
    assert ignore.stat().st_mtime_ns == 1  # unchanged file: not rewritten
    ignore.write_text("acode.db\n")
    ensure_state_ignored(state)
    assert ignore.read_text() == "*\n"


def test_commit_without_configured_identity(tmp_path: Path) -> None:
    repo = tmp_path / "bare-identity"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "f").write_text("x")
    sha = commit_all(repo, "no identity", {"Acode-Step": "k"})
    assert _git(repo, "log", "-1", "--format=%an <%ae> / %cn <%ce>", sha).strip() == (
        f"{FALLBACK_NAME} <{FALLBACK_EMAIL}> / {FALLBACK_NAME} <{FALLBACK_EMAIL}>"
    )
    # Nothing was written to any configuration to make that work.
    assert "user." not in _git(repo, "config", "--list", "--show-origin")
    assert not (tmp_path / "home" / ".gitconfig").exists()


def test_configured_identity_is_used(repo: Path) -> None:
    sha = commit_all(repo, "mine", {})
    assert _git(repo, "log", "-1", "--format=%an <%ae>", sha).strip() == (
        "Test User <test@example.com>"
    )


def test_hooks_run_and_their_failure_is_reported(repo: Path) -> None:
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'lint failed: trailing spaces' >&2\nexit 1\n")
    hook.chmod(0o755)
    with pytest.raises(StepFailedError, match="lint failed: trailing spaces") as info:
        commit_all(repo, "blocked", {"Acode-Step": "k"})
    assert info.value.hint
    assert find_commit_with_trailer(repo, "Acode-Step", "k") is None


def test_commit_outside_a_repository_fails_clearly(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(StepFailedError, match="not a git repository"):
        commit_all(plain, "x", {})


@pytest.mark.parametrize(
    ("key", "value"), [("Bad Key", "v"), ("", "v"), ("Key:", "v"), ("Acode-Step", "a\nb")]
)
def test_invalid_trailers_are_refused(repo: Path, key: str, value: str) -> None:
    with pytest.raises(UsageError, match="trailer"):
        commit_all(repo, "x", {key: value})
    assert _git(repo, "rev-list", "--all").strip() == ""


def test_workspace_in_a_subdirectory_commits_only_itself(repo: Path) -> None:
    workspace = repo / "project"
    workspace.mkdir()
    (workspace / "mine.txt").write_text("m")
    (repo / "unrelated.txt").write_text("u")
    commit_all(workspace, "workspace only", {"Acode-Step": "k"})
    assert _git(repo, "ls-files").split() == ["project/mine.txt"]
    assert find_commit_with_trailer(workspace, "Acode-Step", "k") is not None


def test_a_stale_index_lock_is_removed(repo: Path) -> None:
    lock = repo / ".git" / "index.lock"
    lock.write_text("")  # left by a git killed mid-commit: no process has it open
    assert clear_stale_index_lock(repo, wait_s=0)
    assert not lock.exists()
    commit_all(repo, "after the crash", {"Acode-Step": "k1"})


def test_an_index_lock_a_live_process_holds_is_kept(repo: Path) -> None:
    lock = repo / ".git" / "index.lock"
    lock.write_text("")
    hold = "import sys; f = open(sys.argv[1]); print('up', flush=True); sys.stdin.read()"
    with subprocess.Popen(
        [sys.executable, "-c", hold, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "up\n"
        assert not clear_stale_index_lock(repo, wait_s=0)
        assert lock.exists()
        holder.communicate("")
    assert clear_stale_index_lock(repo, wait_s=0)  # it let go
