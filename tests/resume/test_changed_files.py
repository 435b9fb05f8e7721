"""The changed-file check of a resume (acode.resume.environment.changed_files) at scale
and under tampering: a directory at a time, one stat a file, and still exactly the files
whose content differs from the record, whatever was swapped in the tree.

The oracle knows nothing of stat data: it reads every file through the path the system
resolves, and says what changed by content alone."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from acode.engine.steps.file_steps import observe
from acode.resume.environment import Change, changed_files
from acode.store.records import FileRow
from acode.system.beneath import Beneath

__all__: list[str] = []

_FILES = (
    "a.txt",
    ".env",
    "src/one.py",
    "src/two.py",
    "src/.hidden",
    "src/deep/three.py",
    "docs/x.md",
    "docs/y.md",
)


def _build(root: Path) -> list[FileRow]:
    """The tree, and its files as a session records them (one recorded as absent)."""
    for rel in _FILES:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"content of {rel}\n", encoding="utf-8")
    with Beneath(root) as tree:
        return [observe(tree, rel) for rel in (*_FILES, "later.txt")]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _oracle(root: Path, recorded: list[FileRow]) -> dict[str, Change]:
    """What changed, by content, through the paths as the system resolves them."""
    found: dict[str, Change] = {}
    real_root = os.path.realpath(root)
    for row in recorded:
        real = os.path.realpath(root / row.path)
        inside = real.startswith(real_root + os.sep)
        if not inside:
            found[row.path] = Change.MODIFIED if row.sha256 is not None else Change.CREATED
        elif not os.path.isfile(real):
            if row.sha256 is not None:
                found[row.path] = Change.DELETED
        elif row.sha256 is None:
            found[row.path] = Change.CREATED
        elif _sha(Path(real)) != row.sha256:
            found[row.path] = Change.MODIFIED
    return found


def _same_size_other_content(path: Path, outside: Path) -> None:
    """Rewritten in place to the same size, its mtime put back: only ctime tells."""
    before = path.stat()
    data = path.read_bytes()
    path.write_bytes(data[::-1] if data[::-1] != data else data.upper())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _appended(path: Path, outside: Path) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write("more\n")


def _touched(path: Path, outside: Path) -> None:
    os.utime(path, (1, 1))


def _copied_over(path: Path, outside: Path) -> None:
    """The same content, a new inode (an editor's save-as-rename)."""
    temp = path.with_name(path.name + ".tmp")
    shutil.copyfile(path, temp)
    temp.replace(path)


def _removed(path: Path, outside: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def _link_to_twin(path: Path, outside: Path) -> None:
    """Replaced by a link to a file of the same content elsewhere in the workspace."""
    twin = path.with_name(path.name + ".twin")
    shutil.copyfile(path, twin)
    path.unlink()
    path.symlink_to(twin.name)


def _link_outside(path: Path, outside: Path) -> None:
    """Replaced (a file or a directory) by a link to a copy of it outside the workspace."""
    copy = outside / f"copy-{len(list(outside.iterdir()))}"
    if path.is_dir():
        shutil.copytree(path, copy, symlinks=True)
        shutil.rmtree(path)
    else:
        shutil.copyfile(path, copy)
        path.unlink()
    path.symlink_to(copy)


def _dir_linked_inside(path: Path, outside: Path) -> None:
    """A directory moved aside and a link left in its place: the same files, reached
    through a link inside the workspace."""
    moved = path.with_name(path.name + ".moved")
    path.rename(moved)
    path.symlink_to(moved.name)


def _created(path: Path, outside: Path) -> None:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("new\n", encoding="utf-8")


_FILE_CHANGES = (
    _same_size_other_content,
    _appended,
    _touched,
    _copied_over,
    _removed,
    _link_to_twin,
    _link_outside,
)
_DIR_CHANGES = (_removed, _link_outside, _dir_linked_inside)


@st.composite
def _changes(draw: st.DrawFn) -> list[tuple[str, int, bool]]:
    """(path, change, on its directory) a few times over."""
    picks = st.tuples(
        st.sampled_from((*_FILES, "later.txt")),
        st.integers(min_value=0, max_value=len(_FILE_CHANGES) - 1),
        st.booleans(),
    )
    return draw(st.lists(picks, max_size=6))


@settings(max_examples=120, deadline=None)
@given(changes=_changes())
def test_the_changed_files_are_those_whose_content_differs(
    changes: list[tuple[str, int, bool]],
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root, outside = Path(scratch, "ws"), Path(scratch, "outside")
        root.mkdir()
        outside.mkdir()
        recorded = _build(root)
        for rel, which, on_directory in changes:
            path = root / rel
            if rel == "later.txt":
                _created(path, outside)
            elif on_directory and "/" in rel:
                if path.parent.is_dir() and not path.parent.is_symlink():
                    _DIR_CHANGES[which % len(_DIR_CHANGES)](path.parent, outside)
            elif path.is_file() and not path.is_symlink():
                _FILE_CHANGES[which](path, outside)

        checked, changed = changed_files(root, recorded)

        assert checked == [row.path for row in recorded]
        assert {c.path: c.change for c in changed} == _oracle(root, recorded)


def test_many_directories_of_files_each_checked_by_one_stat(tmp_path: Path) -> None:
    """1,000 files in 20 directories, three changed in ways stat data alone tells, all
    with a wrong recorded hash but for the changed ones: no unchanged file is read."""
    rows = []
    for i in range(1_000):
        path = tmp_path / f"d{i % 20:02d}" / f"f{i:04d}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"x = {i}\n", encoding="utf-8")
        info = path.stat()
        sha = _sha(path) if i in (5, 6, 7) else "0" * 64
        rel = path.relative_to(tmp_path).as_posix()
        rows.append((rel, sha, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino))
    (tmp_path / "d05" / "f0005.py").write_text("x = 55\n", encoding="utf-8")
    (tmp_path / "d06" / "f0006.py").unlink()
    shutil.rmtree(tmp_path / "d07")  # f0007 and 49 others: all gone

    checked, changed = changed_files(tmp_path, rows)

    assert len(checked) == 1_000
    found = {c.path: c.change for c in changed}
    assert found.pop("d05/f0005.py") is Change.MODIFIED
    assert found.pop("d06/f0006.py") is Change.DELETED
    assert found == {f"d07/f{i:04d}.py": Change.DELETED for i in range(7, 1_000, 20)}


def test_an_ignored_path_is_neither_checked_nor_reported(tmp_path: Path) -> None:
    recorded = _build(tmp_path)
    (tmp_path / "src" / "one.py").write_text("changed\n", encoding="utf-8")

    checked, changed = changed_files(tmp_path, recorded, ignore=frozenset({"src/one.py"}))

    assert "src/one.py" not in checked
    assert changed == []


_FEW_DESCRIPTORS = """\
import os, resource, sys
from pathlib import Path
from acode.resume.environment import changed_files
from acode.store.records import FileRow

root = Path(sys.argv[1])
rows = []
for d in range(300):
    for f in range(2):
        rel = f"d{d:03d}/sub/f{f}.py"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\\n")
        info = (root / rel).stat()
        stat = (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
        rows.append(FileRow(rel, "0" * 64, *stat))
(root / "d150/sub/f1.py").write_text("changed\\n")
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
checked, changed = changed_files(root, rows)
print(len(checked), [(c.path, c.change.value) for c in changed])
"""


def test_a_tree_of_more_directories_than_a_process_may_open(tmp_path: Path) -> None:
    """600 directories under a limit of 64 open files (the usual limit is 1,024, and a
    big repository has thousands of directories): each is let go of in time."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _FEW_DESCRIPTORS, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "600 [('d150/sub/f1.py', 'Modified')]"
