"""A snapshot built from acode's kept index is the snapshot built from nothing.

The oracle below is the snapshot as acode first built it: list what git sees
(``ls-files --cached --others --exclude-standard``), take each file's mode from lstat and
its blob from its raw bytes, write the tree through an empty index. Whatever happens to
the work tree, the index, the ignore rules, the attributes or the kept cache between two
snapshots, the incremental snapshot must hold exactly that tree.

ACODE_SNAPSHOT_EXAMPLES (default 12) sets the number of generated histories.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acode.system.snapshot import snapshot_ref, snapshot_worktree
from acode.system.snapshot_index import _load_cache, locate

EXAMPLES = int(os.environ.get("ACODE_SNAPSHOT_EXAMPLES") or 12)
SESSION = "0190abcd-0000-7000-8000-0000000000aa"


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)


def _git(cwd: Path, *args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> bytes:
    full = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", **(env or {})}
    full |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(
        ["git", *args], cwd=cwd, input=stdin, env=full, check=True, capture_output=True
    ).stdout


def oracle(workspace: Path) -> str:
    """The tree of the workspace's files, every one hashed from its bytes."""
    repo = locate(workspace)
    listing = _git(workspace, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    lines = b""
    for raw in sorted(set(listing.split(b"\0")) - {b""}):
        rel = os.fsdecode(raw)
        if rel.split("/")[:2] == [".agent", "state"]:
            continue
        path = workspace / rel
        if any((workspace / p).is_symlink() for p in _parents(rel)):
            continue
        try:
            info = path.lstat()
        except (FileNotFoundError, NotADirectoryError):
            continue
        if stat.S_ISLNK(info.st_mode):
            mode, data = "120000", os.fsencode(os.readlink(path))
        elif stat.S_ISREG(info.st_mode):
            mode, data = ("100755" if info.st_mode & stat.S_IXUSR else "100644"), path.read_bytes()
        else:
            continue
        blob = _git(workspace, "hash-object", "-w", "--no-filters", "--stdin", stdin=data)
        lines += f"{mode} {blob.decode().strip()}\t".encode() + os.fsencode(repo.prefix + rel)
        lines += b"\0"
    with tempfile.TemporaryDirectory() as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        _git(workspace, "update-index", "--add", "-z", "--index-info", stdin=lines, env=env)
        return _git(workspace, "write-tree", env=env).decode().strip()


def _parents(rel: str) -> list[str]:
    parts = rel.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _tree(workspace: Path, name: str) -> str:
    sha = snapshot_worktree(workspace, snapshot_ref(SESSION, name, 1))
    return _git(workspace, "rev-parse", f"{sha}^{{tree}}").decode().strip()


def _write(path: Path, data: bytes) -> None:
    """Write ``path``, whatever stood there or on the way to it."""
    for parent in reversed(path.parents):
        if parent.is_symlink() or parent.is_file():
            parent.unlink()
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    (path / ".gitignore").write_text("*.log\n")
    for rel in ("a.txt", "b.txt", "src/c.py", "src/d/e.py", "kept.log"):
        _write(path / rel, f"{rel}\n".encode())
    _git(path, "add", "-A")
    _git(path, "add", "-f", "kept.log")
    _git(path, "commit", "-q", "-m", "one")
    return path


# -- what can happen to a work tree between two snapshots ----------------------------------

NAMES = ("a.txt", "b.txt", "src/c.py", "src/d/e.py", "new.txt", "src/new.log", "kept.log")
CONTENTS = (b"one\n", b"two\r\n", b"mixed\r\nends\n", b"\0binary\r\n", b"", b"one\n" * 50)


def _content(root: Path, rel: str, data: bytes) -> None:
    _write(root / rel, data)


def _delete(root: Path, rel: str, _data: bytes) -> None:
    path = root / rel
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _chmod(root: Path, rel: str, _data: bytes) -> None:
    path = root / rel
    if path.is_file() and not path.is_symlink():
        path.chmod(path.stat().st_mode ^ stat.S_IXUSR)


def _symlink(root: Path, rel: str, data: bytes) -> None:
    _write(root / rel, b"")
    (root / rel).unlink()
    (root / rel).symlink_to(data.decode(errors="replace").strip("\0\r\n") or "target")


def _directory(root: Path, rel: str, data: bytes) -> None:
    _write(root / rel / "inside.txt", data)


def _nested_repository(root: Path, rel: str, data: bytes) -> None:
    _directory(root, rel, data)
    _git(root / rel, "init", "-q")


def _same_size_same_time(root: Path, rel: str, _data: bytes) -> None:
    """New content of the same size, the times put back (``touch -r``): only ctime moves."""
    path = root / rel
    if path.is_file() and not path.is_symlink():
        info = path.stat()
        old = path.read_bytes()
        path.write_bytes(bytes((b + 1) % 256 for b in old))
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def _ignore(root: Path, _rel: str, data: bytes) -> None:
    rules = [b"*.log\n", b"*.txt\n", b"src/\n", b"!kept.log\n", b""]
    (root / ".gitignore").write_bytes(rules[len(data) % len(rules)])


def _attributes(root: Path, _rel: str, data: bytes) -> None:
    rules = [b"* text=auto\n", b"*.txt text eol=crlf\n", b"*.py ident\n", b"*.txt -text\n", b""]
    (root / ".gitattributes").write_bytes(rules[len(data) % len(rules)])


def _autocrlf(root: Path, _rel: str, data: bytes) -> None:
    _git(root, "config", "core.autocrlf", ["true", "input", "false"][len(data) % 3])


def _person(root: Path, *args: str) -> None:
    """A git command a person runs; git may refuse it (a nested repository without a
    commit, a skip-worktree file), as it would refuse them."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, check=False)


def _stage_all(root: Path, _rel: str, _data: bytes) -> None:
    _person(root, "add", "-A")


def _commit(root: Path, _rel: str, _data: bytes) -> None:
    _person(root, "add", "-A")
    _person(root, "commit", "-q", "--allow-empty", "-m", "more")


def _untrack(root: Path, rel: str, _data: bytes) -> None:
    _person(root, "rm", "-q", "--cached", "--", rel)


def _force_add(root: Path, rel: str, _data: bytes) -> None:
    if (root / rel).is_file():
        _person(root, "add", "-f", "--", rel)


def _assume_unchanged(root: Path, rel: str, data: bytes) -> None:
    flag = "--assume-unchanged" if len(data) % 2 else "--skip-worktree"
    _person(root, "update-index", flag, "--", rel)


def _untracked_cache(root: Path, _rel: str, data: bytes) -> None:
    """The user's untracked cache on (filled by their next `git status`) or off."""
    on = len(data) % 2 == 0
    _git(root, "config", "core.untrackedCache", "true" if on else "false")
    _person(root, "update-index", "--untracked-cache" if on else "--no-untracked-cache")
    _person(root, "status", "--porcelain")


def _drop_cache(root: Path, _rel: str, data: bytes) -> None:
    cache = locate(root).cache
    if len(data) % 2:
        cache.unlink(missing_ok=True)
    elif cache.exists():
        torn = cache.read_bytes()
        cache.write_bytes(torn[: len(torn) // 2])


def _drop_paths_record(root: Path, _rel: str, data: bytes) -> None:
    """The record of how the two indexes differ lost, or left from an older cache."""
    record = locate(root).cache.with_name("acode-snapshot-index-paths")
    if len(data) % 2:
        record.unlink(missing_ok=True)
    elif record.exists():
        (root / ".git" / "old-paths").write_bytes(record.read_bytes())


def _restore_old_paths_record(root: Path, _rel: str, _data: bytes) -> None:
    old = root / ".git" / "old-paths"
    if old.exists():
        old.replace(locate(root).cache.with_name("acode-snapshot-index-paths"))


def _collect_garbage(root: Path, _rel: str, _data: bytes) -> None:
    """Every snapshot ref gone and git's objects collected: the cache names lost blobs."""
    refs = _git(root, "for-each-ref", "--format=%(refname)", "refs/acode").split()
    for ref in refs:
        _git(root, "update-ref", "-d", ref.decode())
    _git(root, "reflog", "expire", "--expire=now", "--all")
    _git(root, "gc", "-q", "--prune=now")


OPERATIONS: tuple[Callable[[Path, str, bytes], None], ...] = (
    _content,
    _content,
    _content,
    _delete,
    _chmod,
    _symlink,
    _directory,
    _nested_repository,
    _same_size_same_time,
    _ignore,
    _attributes,
    _autocrlf,
    _stage_all,
    _commit,
    _untrack,
    _force_add,
    _assume_unchanged,
    _untracked_cache,
    _drop_cache,
    _drop_paths_record,
    _restore_old_paths_record,
    _collect_garbage,
)

histories = st.lists(
    st.lists(
        st.tuples(st.sampled_from(OPERATIONS), st.sampled_from(NAMES), st.sampled_from(CONTENTS)),
        min_size=1,
        max_size=3,
    ),
    min_size=2,
    max_size=5,
)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(history=histories, subdirectory=st.booleans())
def test_every_snapshot_equals_the_one_built_from_nothing(
    tmp_path_factory: pytest.TempPathFactory,
    history: list[list[tuple[Callable[[Path, str, bytes], None], str, bytes]]],
    subdirectory: bool,
) -> None:
    root = tmp_path_factory.mktemp("history") / "repo"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    for rel in ("a.txt", "src/c.py", "src/d/e.py"):
        _write(root / rel, f"{rel}\n".encode())
    _commit(root, "", b"")
    workspace = root / "src" if subdirectory else root
    for number, changes in enumerate(history):
        for operation, rel, data in changes:
            operation(root, rel, data)
        assert _tree(workspace, f"s{number}") == oracle(workspace), [
            [(op.__name__, rel, data) for op, rel, data in batch] for batch in history
        ]


# -- the cases the generator reaches by chance, each once, by name --------------------------


def test_a_file_whose_attributes_convert_it_keeps_its_bytes(repo: Path) -> None:
    (repo / ".gitattributes").write_text("*.txt text eol=lf\n")
    _write(repo / "a.txt", b"windows\r\nline ends\r\n")
    _tree(repo, "s0")
    _write(repo / "b.txt", b"more\r\n")
    assert _tree(repo, "s1") == oracle(repo)
    _git(repo, "add", "-A")  # the user's index now holds the converted blobs
    locate(repo).cache.unlink()
    assert _tree(repo, "s2") == oracle(repo)


def test_autocrlf_in_the_users_configuration_is_not_applied(repo: Path) -> None:
    _git(repo, "config", "core.autocrlf", "true")
    _write(repo / "a.txt", b"crlf\r\n")
    _git(repo, "add", "-A")
    assert _tree(repo, "s0") == oracle(repo)


def test_a_change_behind_restored_times_is_seen(repo: Path) -> None:
    _tree(repo, "s0")
    _same_size_same_time(repo, "a.txt", b"")
    assert _tree(repo, "s1") == oracle(repo)


def test_assume_unchanged_and_skip_worktree_are_not_trusted(repo: Path) -> None:
    _git(repo, "update-index", "--assume-unchanged", "a.txt")
    _git(repo, "update-index", "--skip-worktree", "b.txt")
    _write(repo / "a.txt", b"changed behind git's back\n")
    (repo / "b.txt").unlink()
    assert _tree(repo, "s0") == oracle(repo)


def test_ignored_files_follow_the_users_index(repo: Path) -> None:
    _tree(repo, "s0")
    (repo / "kept.log").unlink()
    _tree(repo, "s1")
    _write(repo / "kept.log", b"back again, tracked and ignored\n")
    _write(repo / "new.txt", b"untracked\n")
    _tree(repo, "s2")
    (repo / ".gitignore").write_text("*.log\nnew.txt\n")
    assert _tree(repo, "s3") == oracle(repo)
    _git(repo, "rm", "-q", "--cached", "kept.log")
    assert _tree(repo, "s4") == oracle(repo)


def test_a_torn_or_stale_cache_is_rebuilt(repo: Path) -> None:
    _write(repo / "new.txt", b"untracked\n")
    _tree(repo, "s0")
    cache = locate(repo).cache
    cache.write_bytes(cache.read_bytes()[:100])
    assert _tree(repo, "s1") == oracle(repo)
    # A power cut that kept the file's size but not its blocks: zeros where entries were.
    whole = cache.read_bytes()
    cache.write_bytes(whole[:12] + bytes(len(whole) - 32) + whole[-20:])
    assert _tree(repo, "s1b") == oracle(repo)
    _collect_garbage(repo, "", b"")
    assert _tree(repo, "s2") == oracle(repo)


def test_a_torn_shared_index_is_rebuilt(repo: Path) -> None:
    """acode's index is split; the shared part, which git checks only by its last bytes,
    is checked whole before it is trusted."""
    _write(repo / "new.txt", b"untracked\n")
    _tree(repo, "s0")
    _write(repo / "a.txt", b"changed\n")
    _tree(repo, "s1")  # the shared index found whole, and recorded so
    (shared,) = (repo / ".git").glob("sharedindex.*")
    # One name changed, in order still: git reads it without a word.
    shared.write_bytes(shared.read_bytes().replace(b"b.txt", b"c.txt"))
    assert b"c.txt" in _git(repo, "ls-files", env={"GIT_INDEX_FILE": str(locate(repo).cache)})
    assert _tree(repo, "s2") == oracle(repo)


def test_a_conflicted_index_is_snapshotted_as_the_files_are(repo: Path) -> None:
    _git(repo, "checkout", "-q", "-b", "other")
    _write(repo / "a.txt", b"theirs\n")
    _commit(repo, "", b"")
    _git(repo, "checkout", "-q", "main")
    _write(repo / "a.txt", b"ours\n")
    _commit(repo, "", b"")
    _person(repo, "merge", "-q", "other")
    assert b"a.txt" in _git(repo, "ls-files", "-u")
    assert _tree(repo, "s0") == oracle(repo)


def test_submodules_are_left_out(repo: Path) -> None:
    sub = repo / "vendor"
    sub.mkdir()
    _git(sub, "init", "-q")
    _write(sub / "x.txt", b"x\n")
    _commit(sub, "", b"")
    _git(repo, "add", "vendor")
    assert b"160000" in _git(repo, "ls-files", "-s", "vendor")
    assert _tree(repo, "s0") == oracle(repo)


def test_only_what_changed_is_hashed_again(repo: Path) -> None:
    """The kept index carries stat data: files left alone are not read again."""
    _tree(repo, "s0")
    _write(repo / "a.txt", b"changed\n")
    listing = _git(
        repo,
        "ls-files",
        "--modified",
        "--others",
        "--exclude-standard",
        env={"GIT_INDEX_FILE": str(locate(repo).cache)},
    )
    assert listing.split() == [b"a.txt"]


def test_the_users_index_is_never_written(repo: Path) -> None:
    index = repo / ".git" / "index"
    before = index.read_bytes(), index.stat().st_mtime_ns
    _write(repo / "a.txt", b"changed\n")
    _write(repo / "new.txt", b"new\n")
    _tree(repo, "s0")
    _tree(repo, "s1")
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before


def test_a_sha256_repository(tmp_path: Path) -> None:
    root = tmp_path / "sha256"
    root.mkdir()
    _git(root, "init", "-q", "--object-format=sha256")
    _write(root / "a.txt", b"a\n")
    _commit(root, "", b"")
    _tree(root, "s0")
    _write(root / "b.txt", b"b\n")
    assert _tree(root, "s1") == oracle(root)
    assert _load_cache(locate(root), tmp_path / "index"), "the cache's checksum is sha256"
    (root / "b.txt").unlink()  # a removal names its object id in the repository's format
    assert _tree(root, "s2") == oracle(root)
    empty = root / "empty"
    empty.mkdir()
    assert _tree(empty, "s3") == oracle(empty)  # the empty tree, in that format too
