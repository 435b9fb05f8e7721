"""Workspace paths resolved from the root's descriptor: what is followed, what is refused,
and the file operations that act by name in a held directory."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from acode.errors import StepFailedError, StorageError, UsageError
from acode.system.atomic import TEMP_PREFIX
from acode.system.beneath import Beneath


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret").write_text("outside")
    return out


@pytest.fixture
def tree(ws: Path) -> Iterator[Beneath]:
    with Beneath(ws) as held:
        yield held


def _resolved(tree: Beneath, relative: str) -> str:
    return "/".join(tree.resolve(relative).parts)


# --- resolving -------------------------------------------------------------------------


def test_plain_and_normalised_paths(tree: Beneath) -> None:
    assert _resolved(tree, "src/app.py") == "src/app.py"
    assert _resolved(tree, "./src/../lib/x.py") == "lib/x.py"
    assert _resolved(tree, ".agent/config.yml") == ".agent/config.yml"


def test_a_missing_directory_on_the_way_is_an_absent_file(tree: Beneath) -> None:
    target = tree.resolve("no/such/dir/f.txt")
    assert target.dir_fd is None
    assert tree.read_bytes("no/such/dir/f.txt") is None
    assert tree.stat("no/such/dir/f.txt") is None
    assert tree.sha256("no/such/dir/f.txt") is None


@pytest.mark.parametrize(
    ("relative", "message"),
    [
        ("/etc/passwd", "is absolute"),
        ("", "is empty"),
        (".", "is empty"),
        ("a/..", "is empty"),
        ("../outside.txt", "leaves the workspace through '..'"),
        ("src/../../outside.txt", "leaves the workspace through '..'"),
        ("~/x", "starts with '~'"),
        ("a\0b", "NUL"),
        (".agent/state/acode.db", "is inside .agent/state, acode's own state"),
        (".agent/state", "is inside .agent/state, acode's own state"),
        (".agent/./state/x", "is inside .agent/state, acode's own state"),
        (".git/config", "is inside git metadata"),
        (".git", "is inside git metadata"),
        ("vendor/lib/.git/HEAD", "is inside git metadata"),
        (".GIT/config", "is inside git metadata"),
    ],
)
def test_refused_paths(tree: Beneath, relative: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as info:
        tree.resolve(relative)
    assert repr(relative) in str(info.value)
    assert info.value.hint


@pytest.mark.parametrize("depth", [0, 1, 2])
@pytest.mark.parametrize("final", [False, True])
def test_a_symlink_out_at_any_component_is_refused(
    ws: Path, outside: Path, depth: int, final: bool
) -> None:
    # a/b/c/file.txt, with the component at `depth` (or the file itself) a link out.
    names = ["a", "b", "c"]
    inner = ws.joinpath(*names[:depth])
    inner.mkdir(parents=True, exist_ok=True)
    if final:
        ws.joinpath(*names).mkdir(parents=True)
        ws.joinpath(*names, "file.txt").symlink_to(outside / "secret")
    else:
        (inner / names[depth]).symlink_to(outside)
    with Beneath(ws) as tree:
        for attempt in (
            lambda: tree.resolve("a/b/c/file.txt"),
            lambda: tree.read_bytes("a/b/c/file.txt"),
            lambda: tree.write("a/b/c/file.txt", b"pwned"),
            lambda: tree.unlink("a/b/c/file.txt"),
        ):
            with pytest.raises(UsageError, match="outside the workspace"):
                attempt()
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_text() == "outside"


def test_the_refusal_names_where_the_link_leads(ws: Path, outside: Path) -> None:
    (ws / "escape").symlink_to(outside)
    with Beneath(ws) as tree, pytest.raises(UsageError) as info:
        tree.resolve("escape/new.txt")
    assert f"resolves to {outside.resolve() / 'new.txt'}" in info.value.message
    assert f"outside the workspace {ws.resolve()}" in info.value.message
    assert info.value.hint == "remove the symlink or the '..' that leads outside the workspace"


def test_a_relative_link_climbing_out_is_refused(ws: Path, outside: Path) -> None:
    (ws / "d").mkdir()
    (ws / "d" / "up").symlink_to("../../outside")
    with Beneath(ws) as tree, pytest.raises(UsageError, match="outside the workspace"):
        tree.resolve("d/up/secret")


def test_links_inside_the_workspace_are_followed(ws: Path) -> None:
    (ws / "real").mkdir()
    (ws / "real" / "f.txt").write_text("real")
    (ws / "alias").symlink_to(ws / "real")  # absolute, into the workspace
    (ws / "rel").symlink_to("real")
    (ws / "real" / "sibling").symlink_to("../other")
    (ws / "file-alias").symlink_to("real/f.txt")
    with Beneath(ws) as tree:
        assert _resolved(tree, "alias/f.txt") == "real/f.txt"
        assert _resolved(tree, "rel/new.txt") == "real/new.txt"
        assert _resolved(tree, "real/sibling/x") == "other/x"
        assert _resolved(tree, "file-alias") == "real/f.txt"
        assert tree.read_bytes("alias/f.txt") == b"real"
        tree.write("file-alias", b"through the link")
    assert (ws / "real" / "f.txt").read_text() == "through the link"
    assert (ws / "file-alias").is_symlink()


def test_an_absolute_link_through_the_resolved_workspace_is_followed(
    tmp_path: Path, ws: Path
) -> None:
    # The workspace named through a symlink: a link may spell either path.
    alias = tmp_path / "ws-alias"
    alias.symlink_to(ws)
    (ws / "real").mkdir()
    (ws / "a").symlink_to(alias / "real")
    (ws / "b").symlink_to(ws.resolve() / "real")
    with Beneath(alias) as tree:
        assert _resolved(tree, "a/x") == "real/x"
        assert _resolved(tree, "b/x") == "real/x"


def test_a_link_into_protected_directories_is_refused(ws: Path) -> None:
    (ws / ".git").mkdir()
    (ws / ".agent" / "state").mkdir(parents=True)
    (ws / "innocent").symlink_to(ws / ".git")
    (ws / "state-link").symlink_to(".agent/state")
    (ws / ".agent" / "up").symlink_to("state")
    with Beneath(ws) as tree:
        with pytest.raises(UsageError, match=r"'innocent/config' is inside git metadata"):
            tree.write("innocent/config", b"x")
        with pytest.raises(UsageError, match=r"'state-link/acode.db' is inside \.agent/state"):
            tree.write("state-link/acode.db", b"x")
        with pytest.raises(UsageError, match=r"'\.agent/up/x' is inside \.agent/state"):
            tree.resolve(".agent/up/x")
    assert list((ws / ".git").iterdir()) == []
    assert list((ws / ".agent" / "state").iterdir()) == []


def test_a_symlink_loop_is_refused(ws: Path) -> None:
    (ws / "loop").symlink_to("loop")
    (ws / "ping").symlink_to("pong")
    (ws / "pong").symlink_to("ping")
    with Beneath(ws) as tree:
        for relative in ("loop/x", "ping"):
            with pytest.raises(UsageError, match="symlink loop"):
                tree.resolve(relative)


def test_a_link_to_the_workspace_itself_names_no_file(ws: Path) -> None:
    (ws / "here").symlink_to(".")
    with Beneath(ws) as tree, pytest.raises(UsageError, match="the workspace itself"):
        tree.resolve("here")


def test_a_file_where_a_directory_is_expected(ws: Path) -> None:
    (ws / "f.txt").write_text("a file")
    with Beneath(ws) as tree:
        assert tree.resolve("f.txt/x").dir_fd is None
        assert tree.read_bytes("f.txt/x") is None
        with pytest.raises(StepFailedError, match=r"f\.txt is a file, not a directory"):
            tree.write("f.txt/x/y", b"data")
    assert (ws / "f.txt").read_text() == "a file"


# --- files ----------------------------------------------------------------------------


def test_write_makes_directories_and_leaves_no_temp(ws: Path) -> None:
    with Beneath(ws) as tree:
        tree.write("a/b/c.txt", b"hello")
        assert tree.read_bytes("a/b/c.txt") == b"hello"
    assert (ws / "a" / "b" / "c.txt").read_bytes() == b"hello"
    assert [p for p in ws.rglob(f"{TEMP_PREFIX}*")] == []


def test_write_stages_in_acode_state_and_keeps_the_mode(ws: Path) -> None:
    (ws / "run.sh").write_text("old")
    (ws / "run.sh").chmod(0o750)
    staging = (".agent", "state", "tmp", "sid")
    with Beneath(ws) as tree:
        tree.write("run.sh", b"new", staging=staging)
    assert (ws / "run.sh").read_bytes() == b"new"
    assert stat.S_IMODE((ws / "run.sh").stat().st_mode) == 0o750
    assert (ws / ".agent" / "state" / "tmp" / "sid").is_dir()
    assert list((ws / ".agent" / "state" / "tmp" / "sid").iterdir()) == []


def test_a_symlinked_staging_directory_is_refused(ws: Path, outside: Path) -> None:
    (ws / ".agent" / "state").mkdir(parents=True)
    (ws / ".agent" / "state" / "tmp").symlink_to(outside)
    with Beneath(ws) as tree, pytest.raises(StorageError, match="is a symbolic link"):
        tree.write("f.txt", b"x", staging=(".agent", "state", "tmp", "sid"))
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert not (ws / "f.txt").exists()


def test_unlink_removes_the_file_not_what_a_link_on_the_way_names(ws: Path) -> None:
    (ws / "d").mkdir()
    (ws / "d" / "f").write_text("x")
    with Beneath(ws) as tree:
        tree.unlink("d/f")
        tree.unlink("d/f")  # already gone: nothing to do
        tree.unlink("no/such")
    assert list((ws / "d").iterdir()) == []


def test_sha256_matches_content_across_chunks(ws: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    (ws / "big.bin").write_bytes(data)
    with Beneath(ws) as tree:
        assert tree.sha256("big.bin") == hashlib.sha256(data).hexdigest()


def test_stat_follows_inside_links(ws: Path) -> None:
    (ws / "f").write_bytes(b"12345")
    os.utime(ws / "f", ns=(1_000_000_000, 2_000_000_123))
    (ws / "link").symlink_to("f")
    with Beneath(ws) as tree:
        for name in ("f", "link"):
            info = tree.stat(name)
            assert info is not None
            assert (info.st_size, info.st_mtime_ns) == (5, 2_000_000_123)
        assert tree.stat("missing") is None


def test_a_directory_or_a_fifo_is_not_read_as_a_file(ws: Path) -> None:
    (ws / "dir").mkdir()
    os.mkfifo(ws / "fifo")
    with Beneath(ws) as tree:
        with pytest.raises(IsADirectoryError):
            tree.read_bytes("dir")
        with pytest.raises(StepFailedError, match="not a regular file"):
            tree.read_bytes("fifo")  # refused at once, never blocking on the open


def test_directory_without_create_is_absent_through_a_link(ws: Path, outside: Path) -> None:
    (ws / "link").symlink_to(outside)
    (ws / "file").write_text("x")
    with Beneath(ws) as tree:
        assert tree.directory(["link"], create=False) is None
        assert tree.directory(["file", "x"], create=False) is None
        assert tree.directory(["missing"], create=False) is None
        with pytest.raises(StorageError, match="symbolic link"):
            tree.directory(["link", "x"], create=True)
        fd = tree.directory(["link", "x"], create=True, replace=True)
        assert fd is not None
    assert not (ws / "link").is_symlink()
    assert (ws / "link").is_dir()
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
