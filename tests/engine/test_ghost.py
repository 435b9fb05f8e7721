"""Ghost snapshots: private commits of the work tree that a run step rolls back to."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import acode
from acode.domain.events import EventType
from acode.engine.rollback import plan_rollback, roll_back
from acode.engine.session import journal_of
from acode.engine.steps import run_step
from acode.errors import StepFailedError, UsageError
from acode.system import process
from acode.system.process import CommandResult
from acode.system.snapshot import (
    SNAPSHOT_MESSAGE,
    drop_snapshot,
    prune_snapshots,
    snapshot_ref,
    snapshot_worktree,
)

SESSION = "0190abcd-0000-7000-8000-000000000001"
REF = f"refs/acode/{SESSION}/step-1"
BACKUP = f"{REF}-before-rollback"
# What an image of the workspace holds per file: ("file", bytes, executable) or ("link", target).
Image = dict[str, tuple[object, ...]]


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No global or system git configuration; acode's checkpoint key in the test's dir."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "ghost-tests-secret")
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)


def _git(repo: Path, *args: str) -> str:
    # GIT_OPTIONAL_LOCKS=0: `git status` must not refresh the index the tests compare.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout


def _write(root: Path, rel: str, data: bytes | str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def _image(root: Path) -> Image:
    """Every file and link below ``root`` (outside .git), with content and exec bit."""
    image: Image = {}
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in [*files, *(d for d in dirs if (Path(directory) / d).is_symlink())]:
            path = Path(directory) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                image[rel] = ("link", os.readlink(path))
            else:
                image[rel] = ("file", path.read_bytes(), bool(path.stat().st_mode & stat.S_IXUSR))
    return image


def _dirs(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_dir() and not p.is_symlink() and ".git" not in p.parts
    }


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one commit: text, binary, executable, a link, an ignore file."""
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    _write(path, ".gitignore", "*.log\nbuild/\n")
    _write(path, "a.txt", "alpha\n")
    _write(path, "src/pkg/b.py", "print('b')\n")
    _write(path, "bin.dat", bytes(range(256)) + b"\r\n\0tail")
    _write(path, "run.sh", "#!/bin/sh\necho hi\n")
    (path / "run.sh").chmod(0o755)
    (path / "link").symlink_to("a.txt")
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "initial")
    return path


def _user_state(repo: Path) -> dict[str, object]:
    return {
        "index": (repo / ".git" / "index").read_bytes(),
        "head": _git(repo, "rev-parse", "HEAD"),
        "symbolic": _git(repo, "symbolic-ref", "HEAD"),
        "refs": _git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads"),
        "stash": _git(repo, "stash", "list"),
        "status": _git(repo, "status", "--porcelain=v1", "--untracked-files=all"),
    }


def _restore(repo: Path, sha: str, backup: str = BACKUP) -> list[str]:
    """A rollback after a kill (no snapshot of the work tree as a pause left it): the
    work tree made equal to snapshot ``sha``; the paths it changed."""
    return list(roll_back(repo, sha, backup_ref=backup).paths)


def test_round_trip_restores_every_kind_of_change(repo: Path) -> None:
    _write(repo, "untracked.txt", "mine\n")
    _write(repo, "debug.log", "ignored before\n")
    _write(repo, "build/out.o", b"\x7fELF")
    before = _image(repo)
    sha = snapshot_worktree(repo, REF)

    _write(repo, "a.txt", "changed\n")
    (repo / "src" / "pkg" / "b.py").unlink()
    _write(repo, "new/deep/c.txt", "added\n")
    _write(repo, "untracked.txt", "edited\n")
    _write(repo, "bin.dat", b"\0\1\2")
    (repo / "run.sh").chmod(0o644)
    (repo / "link").unlink()
    (repo / "link").symlink_to("bin.dat")
    _write(repo, "debug.log", "ignored after\n")
    _write(repo, "other.log", "new and ignored\n")
    (repo / "build" / "out.o").unlink()

    expected_changes = [
        "a.txt",
        "bin.dat",
        "link",
        "new/deep/c.txt",
        "run.sh",
        "src/pkg/b.py",
        "untracked.txt",
    ]
    plan = plan_rollback(repo, sha)
    assert plan.delete == ("new/deep/c.txt",)
    assert list(plan.paths) == expected_changes
    assert _image(repo) != before, "plan_rollback changes nothing"

    assert _restore(repo, sha) == expected_changes
    after = _image(repo)
    # Ignored files are left exactly as the command left them.
    assert after.pop("debug.log") == ("file", b"ignored after\n", False)
    assert after.pop("other.log") == ("file", b"new and ignored\n", False)
    assert "build/out.o" not in after
    expected = {k: v for k, v in before.items() if k not in ("debug.log", "build/out.o")}
    assert after == expected
    assert "new" not in _dirs(repo), "directories emptied by the restore are removed"
    assert plan_rollback(repo, sha).paths == ()
    assert _restore(repo, sha) == []


def test_backup_ref_keeps_what_a_restore_overwrites_and_the_first_backup_wins(
    repo: Path,
) -> None:
    sha = snapshot_worktree(repo, REF)
    backup = f"{REF}-before-rollback"
    assert _restore(repo, sha, backup) == []
    assert _git(repo, "for-each-ref", "--format=%(refname)", "refs/acode").split() == [REF]
    _write(repo, "a.txt", "first interruption\n")
    _write(repo, "notes.txt", "a person's notes\n")
    _restore(repo, sha, backup)
    kept = _git(repo, "rev-parse", backup).strip()
    assert _git(repo, "show", f"{backup}:notes.txt") == "a person's notes\n"
    _write(repo, "a.txt", "second interruption\n")
    _restore(repo, sha, backup)
    assert _git(repo, "rev-parse", backup).strip() == kept
    assert (repo / "a.txt").read_text() == "alpha\n"


def test_restore_writes_only_what_differs(repo: Path) -> None:
    sha = snapshot_worktree(repo, REF)
    untouched = (repo / "src" / "pkg" / "b.py").stat().st_mtime_ns
    _write(repo, "a.txt", "changed\n")
    assert _restore(repo, sha) == ["a.txt"]
    assert (repo / "src" / "pkg" / "b.py").stat().st_mtime_ns == untouched


def test_snapshot_is_a_private_commit_on_its_ref(repo: Path) -> None:
    head = _git(repo, "rev-parse", "HEAD").strip()
    _write(repo, "a.txt", "changed\n")
    _write(repo, "extra.txt", "new\n")
    sha = snapshot_worktree(repo, REF)
    assert _git(repo, "rev-parse", REF).strip() == sha
    assert _git(repo, "log", "-1", "--format=%P%n%B", sha).strip() == f"{head}\n{SNAPSHOT_MESSAGE}"
    assert _git(repo, "show", f"{sha}:a.txt") == "changed\n"
    assert _git(repo, "diff", "--name-only", "HEAD", sha).split() == ["a.txt", "extra.txt"]
    assert _git(repo, "cat-file", "-p", f"{sha}:link") == "a.txt"
    assert "100755 blob" in _git(repo, "ls-tree", sha, "run.sh")


def test_users_index_head_branches_and_stash_are_untouched(repo: Path) -> None:
    _write(repo, "a.txt", "stashed change\n")
    _git(repo, "stash", "-q")
    _write(repo, "a.txt", "staged\n")
    _git(repo, "add", "a.txt")
    _write(repo, "a.txt", "staged then edited\n")
    _write(repo, "untracked.txt", "u\n")
    state = _user_state(repo)

    sha = snapshot_worktree(repo, REF)
    assert _user_state(repo) == state

    _write(repo, "a.txt", "the command's\n")
    _write(repo, "junk.txt", "junk\n")
    _restore(repo, sha)
    assert (repo / "a.txt").read_text() == "staged then edited\n"
    assert _user_state(repo) == state
    drop_snapshot(repo, REF)
    drop_snapshot(repo, BACKUP)  # a rollback keeps the work tree it found
    assert _git(repo, "for-each-ref", "refs/acode") == ""
    assert _user_state(repo) == state


def test_repository_without_commits(tmp_path: Path) -> None:
    repo = tmp_path / "fresh"
    repo.mkdir()
    _git(repo, "init", "-q")
    _write(repo, "one.txt", "1\n")
    _write(repo, "dir/two.bin", b"\0\xff")
    before = _image(repo)
    sha = snapshot_worktree(repo, REF)
    assert _git(repo, "rev-list", "--parents", "-n", "1", sha).split() == [sha]
    _write(repo, "one.txt", "one\n")
    _write(repo, "three.txt", "3\n")
    (repo / "dir" / "two.bin").unlink()
    assert _restore(repo, sha) == ["dir/two.bin", "one.txt", "three.txt"]
    assert _image(repo) == before
    unborn = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=repo, check=False)
    assert unborn.returncode != 0
    assert not (repo / ".git" / "index").exists()


def test_empty_work_tree(tmp_path: Path) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    _git(repo, "init", "-q")
    sha = snapshot_worktree(repo, REF)
    _write(repo, "made.txt", "x")
    assert _restore(repo, sha) == ["made.txt"]
    assert _image(repo) == {}


def test_bytes_are_kept_exactly_whatever_the_line_ending_settings(repo: Path) -> None:
    _git(repo, "config", "core.autocrlf", "true")
    _write(repo, ".gitattributes", "*.txt text eol=crlf\n")
    _write(repo, "lf.txt", "one\ntwo\n")
    _write(repo, "mixed.txt", "one\r\ntwo\n")
    before = _image(repo)
    sha = snapshot_worktree(repo, REF)
    for rel in ("lf.txt", "mixed.txt", "a.txt"):
        _write(repo, rel, "overwritten\r\n")
    _restore(repo, sha)
    assert _image(repo) == before


def test_odd_file_names(repo: Path) -> None:
    names = ["with space.txt", '"quoted".txt', "new\nline.txt", "ünïcode.txt", "-dash.txt"]
    for name in names:
        _write(repo, name, name)
    raw = os.fsencode(repo) + b"/latin1-\xe9.txt"
    with open(raw, "wb") as handle:
        handle.write(b"not utf-8 name")
    before = _image(repo)
    sha = snapshot_worktree(repo, REF)
    for name in names:
        (repo / name).unlink()
    os.unlink(raw)
    assert len(_restore(repo, sha)) == len(names) + 1
    assert _image(repo) == before


def test_workspace_in_a_subdirectory_snapshots_only_itself(repo: Path) -> None:
    ws = repo / "src"
    sha = snapshot_worktree(ws, REF)
    assert _git(repo, "ls-tree", "-r", "--name-only", sha).split() == ["src/pkg/b.py"]
    _write(repo, "a.txt", "outside, changed\n")
    _write(repo, "outside-new.txt", "outside, new\n")
    _write(ws, "pkg/b.py", "inside, changed\n")
    _write(ws, "inside-new.txt", "inside, new\n")
    assert _restore(ws, sha) == ["inside-new.txt", "pkg/b.py"]
    assert (ws / "pkg" / "b.py").read_text() == "print('b')\n"
    assert (repo / "a.txt").read_text() == "outside, changed\n"
    assert (repo / "outside-new.txt").exists()


def test_acode_state_is_never_snapshotted_or_restored(repo: Path) -> None:
    state = repo / ".agent" / "state"
    _write(repo, ".agent/state/.gitignore", "*\n")
    _write(repo, ".agent/state/acode.db", "live v1")
    # Even a state file the user once force-added is left alone.
    _git(repo, "add", "-f", ".agent/state/acode.db")
    _write(repo, ".agent/config.yml", "model: x\n")
    sha = snapshot_worktree(repo, REF)
    names = _git(repo, "ls-tree", "-r", "--name-only", sha).split()
    assert ".agent/config.yml" in names
    assert not [n for n in names if n.startswith(".agent/state")]
    _write(repo, ".agent/state/acode.db", "live v2")
    _write(repo, ".agent/state/sessions/x/progress.md", "progress")
    assert _restore(repo, sha) == []
    assert (state / "acode.db").read_text() == "live v2"
    assert (state / "sessions" / "x" / "progress.md").exists()


def test_paths_that_changed_type(repo: Path) -> None:
    before = _image(repo)
    sha = snapshot_worktree(repo, REF)
    (repo / "a.txt").unlink()
    _write(repo, "a.txt/inside.txt", "a.txt is a directory now\n")
    _write(repo, "a.txt/ignored.log", "and holds an ignored file\n")
    (repo / "src" / "pkg" / "b.py").unlink()
    (repo / "src" / "pkg").rmdir()
    _write(repo, "src/pkg", "src/pkg is a file now\n")
    _restore(repo, sha)
    assert _image(repo) == before


def test_nested_repositories_are_left_alone(repo: Path) -> None:
    nested = repo / "vendor" / "lib"
    nested.mkdir(parents=True)
    _git(nested, "init", "-q")
    _write(nested, "file.txt", "nested\n")
    sha = snapshot_worktree(repo, REF)
    assert "vendor" not in _git(repo, "ls-tree", "--name-only", sha).split()
    _write(nested, "file.txt", "changed by the command\n")
    assert _restore(repo, sha) == []
    assert (nested / "file.txt").read_text() == "changed by the command\n"


def test_snapshot_refs_are_named_safely() -> None:
    assert snapshot_ref(SESSION, "build", 2) == f"refs/acode/{SESSION}/build-2"
    assert snapshot_ref(SESSION, "a..b", 1) == f"refs/acode/{SESSION}/a%2E.b-1"
    assert snapshot_ref(SESSION, "a...b", 1) != snapshot_ref(SESSION, "a..b", 1)
    for ref in (snapshot_ref(SESSION, "a...b", 3), snapshot_ref(SESSION, "x.lock", 1)):
        subprocess.run(["git", "check-ref-format", ref], check=True)


@pytest.mark.parametrize("ref", ["refs/heads/main", "HEAD", "refs/acode", "refs/acode/a..b"])
def test_refs_outside_refs_acode_are_refused(repo: Path, ref: str) -> None:
    with pytest.raises(UsageError, match="refs/acode"):
        snapshot_worktree(repo, ref)
    with pytest.raises(UsageError):
        drop_snapshot(repo, ref)
    assert _git(repo, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/main"]


def test_prune_deletes_only_the_sessions_refs(repo: Path, tmp_path: Path) -> None:
    other = "0190abcd-0000-7000-8000-000000000002"
    for ref in (snapshot_ref(SESSION, "a", 1), snapshot_ref(SESSION, "a", 2)):
        snapshot_worktree(repo, ref)
    snapshot_worktree(repo, snapshot_ref(other, "a", 1))
    assert prune_snapshots(repo, SESSION) == 2
    assert _git(repo, "for-each-ref", "--format=%(refname)", "refs/acode").split() == [
        f"refs/acode/{other}/a-1"
    ]
    assert prune_snapshots(repo, SESSION) == 0
    plain = tmp_path / "plain"
    plain.mkdir()
    assert prune_snapshots(plain, SESSION) == 0


def test_a_collected_snapshot_is_a_clear_error(repo: Path) -> None:
    sha = snapshot_worktree(repo, REF)
    drop_snapshot(repo, REF)
    _git(repo, "reflog", "expire", "--expire=now", "--all")
    _git(repo, "gc", "-q", "--prune=now")
    with pytest.raises(StepFailedError, match="snapshot") as caught:
        _restore(repo, sha)
    assert "--strategy retry" in (caught.value.hint or "")


def test_snapshot_cost_for_a_thousand_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "big"
    repo.mkdir()
    _git(repo, "init", "-q")
    for i in range(1000):
        _write(repo, f"pkg{i % 25}/module_{i}.py", f"VALUE = {i}\n" * 3)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "many files")
    _write(repo, "pkg0/module_0.py", "edited\n")
    timings = []
    for attempt in range(1, 4):
        started = time.perf_counter()
        sha = snapshot_worktree(repo, snapshot_ref(SESSION, "bench", attempt))
        timings.append((time.perf_counter() - started) * 1000)
    started = time.perf_counter()
    assert _restore(repo, sha) == []
    unchanged = (time.perf_counter() - started) * 1000
    with capsys.disabled():
        print(
            f"\n[ghost snapshot, 1000 files] snapshot: first {timings[0]:.1f} ms, "
            f"then {min(timings[1:]):.1f} ms; restore with nothing to do: {unchanged:.1f} ms"
        )


# -- a run step interrupted and resumed ---------------------------------------------------


@pytest.fixture
def ws(repo: Path) -> Path:
    _write(repo, "b.txt", "keep me\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "b")
    return repo


COMMAND = "printf ran >> count.txt; cat a.txt > seen.txt"


def _half_run(ws: Path) -> Callable[..., CommandResult]:
    """A command killed mid-way: it changed some files, then the interrupt came."""

    def run(command: str, **kwargs: Any) -> CommandResult:
        _write(ws, "a.txt", "half-done\n")
        _write(ws, "count.txt", "ran")
        _write(ws, "junk/tmp.txt", "partial output\n")
        (ws / "b.txt").unlink()
        raise KeyboardInterrupt

    return run


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The real run_command, counting its calls."""
    real = process.run_command
    calls: list[str] = []

    def run(command: str, **kwargs: Any) -> CommandResult:
        # acode runs a step's command behind a prologue that notes its process group
        # (acode.system.orphans): count the step's own command.
        calls.append(shlex.split(command)[-1] if " && eval " in command else command)
        return real(command, **kwargs)

    monkeypatch.setattr(run_step, "run_command", run)
    return calls


def _interrupt(ws: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    # A context of its own: leaving it puts back whatever run_command was before.
    with monkeypatch.context() as patch:
        patch.setattr(run_step, "run_command", _half_run(ws))
        with pytest.raises(KeyboardInterrupt), acode.open_session("ghost", workspace=ws) as s:
            session_id = s.id
            s.run("mutate", COMMAND)
    return session_id


def test_interrupted_run_is_rolled_back_and_run_once_more(
    ws: Path, monkeypatch: pytest.MonkeyPatch, counted: list[str]
) -> None:
    session_id = _interrupt(ws, monkeypatch)
    first = _git(ws, "rev-parse", f"refs/acode/{session_id}/mutate-1").strip()
    assert _git(ws, "show", f"{first}:b.txt") == "keep me\n"
    root = f"refs/acode/{session_id}"
    with acode.resume_session(session_id, workspace=ws) as s:
        s.run("mutate", COMMAND)
        rolled = journal_of(s).store.events_of_type(journal_of(s).row, EventType.STEP_ROLLED_BACK)
        refs = _git(ws, "for-each-ref", "--format=%(refname)", root).split()
        # The pause kept the work tree as the interruption left it beside the ghost.
        assert refs == [
            f"{root}/mutate-1",
            f"{root}/mutate-1-as-left",
            f"{root}/mutate-1-before-rollback",
            f"{root}/mutate-2",
        ]
        assert _git(ws, "show", f"{root}/mutate-1-as-left:a.txt") == "half-done\n"
    assert counted == [COMMAND]
    assert (ws / "count.txt").read_text() == "ran"
    assert (ws / "seen.txt").read_text() == "alpha\n", "restored before running again"
    assert (ws / "b.txt").read_text() == "keep me\n"
    assert not (ws / "junk").exists()
    assert [e.payload["restored"] for e in rolled] == [
        ["a.txt", "b.txt", "count.txt", "junk/tmp.txt"]
    ]
    assert rolled[0].payload["started"]["ghost"] == first
    # The session is over: its snapshots are pruned, but what the rollback overwrote or
    # deleted is still there to be had.
    refs = _git(ws, "for-each-ref", "--format=%(refname)", root).split()
    assert refs == [f"{root}/mutate-1-before-rollback"]
    assert _git(ws, "show", f"{root}/mutate-1-before-rollback:a.txt") == "half-done\n"
    assert prune_snapshots(ws, session_id) == 1


def test_strategy_retry_runs_again_without_restoring(
    ws: Path, monkeypatch: pytest.MonkeyPatch, counted: list[str]
) -> None:
    session_id = _interrupt(ws, monkeypatch)
    with acode.resume_session(session_id, workspace=ws, strategy="retry") as s:
        s.run("mutate", COMMAND)
    assert counted == [COMMAND]
    assert (ws / "count.txt").read_text() == "ranran"
    assert (ws / "seen.txt").read_text() == "half-done\n"
    assert (ws / "junk" / "tmp.txt").exists()
    assert not (ws / "b.txt").exists()


def test_only_non_idempotent_runs_without_paths_take_a_ghost_snapshot(
    ws: Path, counted: list[str]
) -> None:
    with acode.open_session("ghost", workspace=ws) as s:
        s.run("idem", "true", idempotent=True)
        s.run("declared", "printf x > out.txt", paths=["out.txt"])
        s.run("ghosted", "true")
        session_id = s.id
        started = journal_of(s).store.events_of_type(journal_of(s).row, EventType.STEP_STARTED)
        refs = _git(ws, "for-each-ref", "--format=%(refname)", "refs/acode").split()
        assert refs == [f"refs/acode/{session_id}/ghosted-1"]
    assert ["ghost" in e.payload for e in started] == [False, True]
    # Completing the session pruned its snapshot.
    assert _git(ws, "for-each-ref", "refs/acode").strip() == ""


def test_outside_git_an_interrupted_run_is_simply_run_again(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, counted: list[str]
) -> None:
    _write(workspace, "a.txt", "alpha\n")
    _write(workspace, "b.txt", "keep me\n")
    session_id = _interrupt(workspace, monkeypatch)
    with acode.resume_session(session_id, workspace=workspace) as s:
        s.run("mutate", COMMAND)
    assert counted == [COMMAND]
    assert (workspace / "seen.txt").read_text() == "half-done\n"
