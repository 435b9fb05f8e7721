from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acode.errors import UsageError
from acode.system.beneath import Beneath
from acode.system.files import TEMP_PREFIX, atomic_write, expand_globs, sha256_bytes


def _touch(root: Path, *relatives: str) -> None:
    for relative in relatives:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(relative)


def _temp_files(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(TEMP_PREFIX)]


# --- hashing and stat -------------------------------------------------------------------


def test_sha256_bytes_known_vector() -> None:
    assert sha256_bytes(b"abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


# --- atomic_write -----------------------------------------------------------------------


def test_atomic_write_creates_parents_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c.txt"
    atomic_write(target, b"hello")
    assert target.read_bytes() == b"hello"
    assert _temp_files(target.parent) == []


def test_atomic_write_replaces_and_keeps_mode(tmp_path: Path) -> None:
    target = tmp_path / "run.sh"
    target.write_bytes(b"old")
    target.chmod(0o750)
    atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750


def test_atomic_write_new_file_mode_follows_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        atomic_write(tmp_path / "f", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o640


def test_atomic_write_failure_removes_temp_and_keeps_target(tmp_path: Path) -> None:
    # A directory cannot be replaced by a file: os.replace fails after the temp is written.
    target = tmp_path / "dir"
    target.mkdir()
    (target / "inside").write_bytes(b"kept")
    with pytest.raises(OSError, match="directory"):
        atomic_write(target, b"data")
    assert (target / "inside").read_bytes() == b"kept"
    assert _temp_files(tmp_path) == []


def test_atomic_write_replaces_a_symlink_itself(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_bytes(b"real")
    link = tmp_path / "link"
    link.symlink_to(real)
    atomic_write(link, b"new")
    assert not link.is_symlink()
    assert real.read_bytes() == b"real"


# --- expand_globs -----------------------------------------------------------------------


def _expand(workspace: Path, patterns: list[str]) -> list[str]:
    with Beneath(workspace) as tree:
        return expand_globs(tree, patterns)


def test_expand_recursive_and_single_level(tmp_path: Path) -> None:
    _touch(tmp_path, "a.py", "src/b.py", "src/deep/c.py", "src/d.txt", "docs/e.py")
    assert _expand(tmp_path, ["**/*.py"]) == [
        "a.py",
        "docs/e.py",
        "src/b.py",
        "src/deep/c.py",
    ]
    assert _expand(tmp_path, ["src/*.py"]) == ["src/b.py"]
    assert _expand(tmp_path, ["*/*.py"]) == ["docs/e.py", "src/b.py"]
    assert _expand(tmp_path, ["src/**"]) == ["src/b.py", "src/d.txt", "src/deep/c.py"]
    assert _expand(tmp_path, ["src/**/c.py"]) == ["src/deep/c.py"]
    assert _expand(tmp_path, ["src/?.[pt]*"]) == ["src/b.py", "src/d.txt"]


def test_expand_sorted_unique_across_patterns(tmp_path: Path) -> None:
    _touch(tmp_path, "b.txt", "a.txt")
    assert _expand(tmp_path, ["*.txt", "a.txt", "./b.txt"]) == ["a.txt", "b.txt"]


def test_expand_never_returns_agent_or_git(tmp_path: Path) -> None:
    _touch(
        tmp_path,
        "keep.txt",
        ".agent/config.yml",
        ".agent/state/acode.db",
        ".git/HEAD",
        "sub/.git/config",
        "sub/.gitignore",
    )
    assert _expand(tmp_path, ["**", "**/*", ".agent/config.yml", ".git/HEAD"]) == [
        "keep.txt",
        "sub/.gitignore",
    ]


def test_expand_returns_missing_plain_path(tmp_path: Path) -> None:
    # A file a command will create: the snapshot records it as absent.
    assert _expand(tmp_path, ["out/build.log", "*.none"]) == ["out/build.log"]


def test_expand_plain_directory_means_its_files(tmp_path: Path) -> None:
    _touch(tmp_path, "dist/a.js", "dist/sub/b.js", "other.js")
    assert _expand(tmp_path, ["dist"]) == ["dist/a.js", "dist/sub/b.js"]


def test_expand_symlinks(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside"
    _touch(workspace, "real.txt", "d/x.txt")
    _touch(outside, "secret.txt")
    (workspace / "inside_link.txt").symlink_to(workspace / "real.txt")
    (workspace / "outside_link.txt").symlink_to(outside / "secret.txt")
    (workspace / "dir_link").symlink_to(workspace / "d")
    # Symlinked files inside count; those leading out do not; symlinked dirs are not walked.
    assert _expand(workspace, ["**/*.txt"]) == ["d/x.txt", "inside_link.txt", "real.txt"]
    with pytest.raises(UsageError, match="outside the workspace"):
        _expand(workspace, ["outside_link.txt"])


def test_expand_refuses_walk_through_escaping_symlink(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    _touch(tmp_path, "outside/secret.txt")
    workspace.mkdir()
    (workspace / "out").symlink_to(tmp_path / "outside")
    with pytest.raises(UsageError, match="outside the workspace"):
        _expand(workspace, ["out/*.txt"])


@pytest.mark.parametrize("pattern", ["/etc/*", "../*.txt", "src/../../x", "", "src/**/../.."])
def test_expand_refuses_escaping_patterns(tmp_path: Path, pattern: str) -> None:
    with pytest.raises(UsageError, match="relative to the workspace"):
        _expand(tmp_path, [pattern])


# --- covers: expand_globs without the disk ------------------------------------------------

_TREE = ("a.py", "src/a.py", "src/b.txt", "src/pkg/c.py", "src/pkg/deep/d.py", "docs/x.md")
_PATTERNS = st.sampled_from(
    [
        "*.py",
        "src/*.py",
        "src/**",
        "src/**/*.py",
        "**/*.py",
        "src",
        "src/pkg",
        "docs/x.md",
        "./src/a.py",
        "s?c/[ab].*",
        "**",
        "nothing/here",
    ]
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pattern=_PATTERNS)
def test_covers_agrees_with_expand_globs(tmp_path: Path, pattern: str) -> None:
    """What resume asks of a `run` step's `paths`: whether a changed file is among them,
    answered as the step's snapshot would, also for a file that is gone."""
    from acode.system.files import covers

    _touch(tmp_path, *_TREE)
    with Beneath(tmp_path) as tree:
        expanded = set(expand_globs(tree, [pattern]))
    assert {path for path in _TREE if covers(pattern, path)} == expanded & set(_TREE)
