"""The tree of a work-tree snapshot, built from an index kept between snapshots so that a
snapshot costs what changed, not what exists.

A snapshot holds every file git would see in the workspace: the files the user's index
tracks and the untracked files that are not ignored, each with its mode and its bytes as
they are on disk (no clean/smudge filter, no end-of-line conversion), ``.agent/state``
never, and no directory that is a repository of its own. Hashing every file each time
costs seconds in a repository of 50,000 files; git's own index answers "what changed"
from stat data in milliseconds. So the tree is written from a private index (the cache,
``acode-snapshot-index`` in the git directory) that git keeps up to date like its own:

- the cache is copied to a scratch file, git lists what differs from it (``diff-files``
  and ``ls-files --others``, with the user's untracked cache and fsmonitor where
  they enabled them), and only those paths are staged again;
- a staged file's bytes are hashed again unfiltered, and where git's filtered blob
  differs (a filter, ``text``, ``eol`` attributes, ``core.autocrlf``) the raw one
  replaces it: such an entry is left stat-dirty, so git compares it again next time;
- which files belong is the user's index's answer: a tracked file counts even when
  ignored, an untracked one only when not ignored (the ignored files of both indexes are
  compared on every snapshot);
- with no cache, the user's index is the starting point: its stat data and blobs, minus
  the entries that could not be taken as they are (submodules, unmerged or
  assume-unchanged/skip-worktree entries, ``.agent/state``, files whose attributes
  convert their content, everything when ``core.autocrlf`` converts).

git compares every stat field (``core.checkStat=default``, ``core.trustctime``) and the
executable bit whatever the user's settings, so a file whose content changed behind
restored times (``touch -r``) is hashed again. The cache is a cache: a missing, torn or
stale one (its objects collected) costs one snapshot built from the start, never a
wrong tree. The user's index, HEAD and refs are never written.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from acode.errors import StepFailedError
from acode.runtime.beneath import Beneath
from acode.runtime.git_command import (
    GitCall,
    git_bytes,
    git_bytes_together,
    raise_git_failed,
    run_git_bytes,
)

__all__ = ["MODE_EXEC", "MODE_FILE", "MODE_LINK", "Repository", "is_state", "worktree_tree"]

MODE_FILE = "100644"
MODE_EXEC = "100755"
MODE_LINK = "120000"
_MODE_GITLINK = "160000"
_NO_OBJECT = "0" * 40
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_CACHE_NAME = "acode-snapshot-index"
_STATE_PARTS = [".agent", "state"]
# What git must compare for acode's snapshot to be right, whatever the user configured.
_EXACT = (
    "-c",
    "core.fileMode=true",
    "-c",
    "core.trustctime=true",
    "-c",
    "core.checkStat=default",
    "-c",
    "core.symlinks=true",
    # A conversion git deems irreversible must not fail the snapshot: raw bytes are kept.
    "-c",
    "core.safecrlf=false",
)
# Attributes that make git's blob differ from the bytes on disk.
_CONVERTING = ("filter", "text", "eol", "crlf", "ident", "working-tree-encoding")


class Repository(NamedTuple):
    """Where the workspace sits in its repository (one ``rev-parse``)."""

    top: Path  # the top of the work tree
    prefix: str  # the workspace's path inside it: "" at the top, else "dir/"
    head: str | None  # HEAD's commit; None before the first commit
    user_index: Path  # the user's index
    cache: Path  # acode's snapshot index
    object_format: str  # "sha1" or "sha256": the checksum that ends an index file


def locate(workspace: Path) -> Repository:
    args = [
        "rev-parse",
        "--show-toplevel",
        "--show-prefix",
        "--show-object-format",
        "--git-path",
        "index",
        "--git-path",
        _CACHE_NAME,
        "--verify",
        "--quiet",
        "HEAD^{commit}",
    ]
    result = run_git_bytes(workspace, args)
    lines = result.stdout.split(b"\n")
    # Exit 1 with the paths printed is an unborn HEAD; anything else is a real failure.
    if result.returncode not in (0, 1) or len(lines) < 6:
        raise_git_failed(workspace, args, result)
    top, prefix, object_format, index, cache = (os.fsdecode(line) for line in lines[:5])
    head = lines[5].decode().strip() if result.returncode == 0 else None
    return Repository(Path(top), prefix, head, workspace / index, workspace / cache, object_format)


def is_state(rel: str) -> bool:
    """Whether a workspace path is in acode's state directory."""
    # .agent/state ignores itself, but a user who once committed it must still never see a
    # restore write an old database over the live one.
    return rel.split("/")[:2] == _STATE_PARTS


def worktree_tree(workspace: Path, repo: Repository) -> str:
    """The id of the tree of the workspace's files as they are now (see the module)."""
    with tempfile.TemporaryDirectory(prefix="acode-index-") as scratch:
        work = Path(scratch) / "index"
        cached = _load_cache(repo, work)
        try:
            if not cached:
                _seed(repo, work)
            tree = _update_and_write(workspace, repo, work)
        except StepFailedError:
            if not cached:
                raise
            # A cache git cannot read (torn by a power cut) or naming objects git has
            # collected since: one snapshot built from the user's index instead.
            work.unlink(missing_ok=True)
            _seed(repo, work)
            tree = _update_and_write(workspace, repo, work)
        _keep(work, repo.cache)
    return tree


def _copy(source: Path, target: Path) -> bool:
    """Copy an index keeping its modification time: git tells a racily clean entry (a
    file changed within the index's own timestamp) by comparing the two."""
    try:
        shutil.copy2(source, target)
    except FileNotFoundError:
        return False
    return True


def _load_cache(repo: Repository, work: Path) -> bool:
    """Copy the cache to ``work`` if it is whole: git reads an index without checking the
    checksum that ends it, and a torn one would read as a work tree with files missing."""
    try:
        with open(repo.cache, "rb") as cache:
            data = cache.read()
            info = os.fstat(cache.fileno())
    except FileNotFoundError:
        return False
    digest = hashlib.new(repo.object_format)
    size = digest.digest_size
    digest.update(memoryview(data)[:-size])
    if len(data) <= size or not data.startswith(b"DIRC") or digest.digest() != data[-size:]:
        return False
    work.write_bytes(data)
    os.utime(work, ns=(info.st_atime_ns, info.st_mtime_ns))  # see _copy
    return True


def _keep(work: Path, cache: Path) -> None:
    # No fsync: a cache lost or torn by a power cut is rebuilt, never trusted wrongly
    # (_load_cache checks it whole).
    with contextlib.suppress(OSError):  # a read-only .git: the next snapshot starts over
        fd, name = tempfile.mkstemp(prefix=f"{_CACHE_NAME}.", dir=cache.parent)
        os.close(fd)
        try:
            _copy(work, Path(name))
            os.replace(name, cache)
        except OSError:
            os.unlink(name)
            raise


def _env(work: Path) -> dict[str, str]:
    return {"GIT_INDEX_FILE": str(work), "GIT_LITERAL_PATHSPECS": "1"}


def _git(repo: Repository, work: Path, args: Sequence[str], stdin: bytes = b"") -> bytes:
    """git at the top of the work tree, on the scratch index, names taken literally."""
    return git_bytes(repo.top, [*_EXACT, *args], env=_env(work), stdin=stdin)


def _seed(repo: Repository, work: Path) -> None:
    """Start the scratch index from the user's, minus what cannot be taken as it is."""
    if not _copy(repo.user_index, work):
        return  # no index yet: everything is new
    autocrlf = run_git_bytes(repo.top, ["config", "--get", "core.autocrlf"]).stdout.strip()
    if autocrlf.lower() in (b"true", b"input"):
        work.unlink()  # any text file may be converted: hash everything
        return
    drop: set[str] = set()
    files: list[str] = []
    for record in _git(repo, work, ["ls-files", "-z", "--stage", "-v"]).split(b"\0"):
        if not record:
            continue
        meta, _, raw = record.partition(b"\t")
        tag, mode, _blob, stage = meta.decode().split()
        path = os.fsdecode(raw)
        if tag != "H" or mode == _MODE_GITLINK or stage != "0" or _is_state_top(repo, path):
            drop.add(path)
        elif mode != MODE_LINK:
            files.append(path)
    drop.update(_converted(repo, work, files))
    if drop:
        _remove(repo, work, drop)


def _converted(repo: Repository, work: Path, paths: Sequence[str]) -> set[str]:
    """The paths whose attributes may make git's blob differ from the file's bytes."""
    if not paths:
        return set()
    names = b"".join(os.fsencode(p) + b"\0" for p in paths)
    out = _git(repo, work, ["check-attr", "-z", "--stdin", *_CONVERTING], stdin=names)
    fields = out.split(b"\0")
    return {
        os.fsdecode(fields[i])
        for i in range(0, len(fields) - 2, 3)
        if fields[i + 2] not in (b"unspecified", b"unset")
    }


def _is_state_top(repo: Repository, path: str) -> bool:
    return path.startswith(repo.prefix) and is_state(path[len(repo.prefix) :])


def _remove(repo: Repository, work: Path, paths: Iterable[str]) -> None:
    lines = b"".join(f"0 {_NO_OBJECT}\t".encode() + os.fsencode(p) + b"\0" for p in paths)
    _git(repo, work, ["update-index", "-z", "--index-info"], stdin=lines)


def _update_and_write(workspace: Path, repo: Repository, work: Path) -> str:
    scope = ["--", repo.prefix] if repo.prefix else []
    ours, theirs = _env(work), _env(repo.user_index)  # a missing index reads as empty
    modified, untracked, held, tracked = (
        set(out.split(b"\0")) - {b""}
        for out in git_bytes_together(
            repo.top,
            [
                # diff-files, not ls-files --modified: it stats the files on several threads.
                GitCall([*_EXACT, "diff-files", "--name-only", "-z", *scope], ours),
                GitCall(
                    [*_EXACT, "ls-files", "-z", "--others", "--exclude-standard", *scope], theirs
                ),
                GitCall([*_EXACT, "ls-files", "-z", "--cached", *scope], ours),
                GitCall([*_EXACT, "ls-files", "-z", "--cached", *scope], theirs),
            ],
        )
    )
    # What belongs is the user's index's answer: the files it tracks, and the untracked
    # ones git shows (not ignored, not inside a repository of their own).
    wanted = tracked | untracked
    gone = held - wanted
    changed = (modified | (wanted - held)) - gone
    if changed or gone:
        _stage(workspace, repo, work, _decoded(changed), _decoded(gone))
    return _write_tree(repo, work)


def _decoded(names: set[bytes]) -> set[str]:
    return {os.fsdecode(name) for name in names}


def _stage(
    workspace: Path, repo: Repository, work: Path, changed: set[str], gone: set[str]
) -> None:
    """Stage ``changed`` (top-relative) as it is on disk now, removing what is no file
    (deleted, a directory, acode's state) and ``gone``.

    git stages a file with its stat data, so that the next listing passes over it while
    it stays as it is; but git's blob is the file's content after conversion (a filter,
    ``text``/``eol`` attributes, ``core.autocrlf``). Where that differs from the bytes on
    disk, the raw blob is staged without stat data: git then compares the file again
    every time, finds it differs and lists it, and it is hashed again.
    """
    modes = _modes(workspace, repo, sorted(changed))
    files = [p for p, mode in modes.items() if mode != MODE_LINK]
    raw, converted = _hashes(repo, files)
    exact = [p for p in modes if p not in raw or raw[p] == converted[p]]
    removed = (changed - modes.keys()) | gone
    raw_entries = [(p, modes[p], raw[p]) for p in files if raw[p] != converted[p]]
    if removed or raw_entries:
        lines = b"".join(f"0 {_NO_OBJECT}\t".encode() + os.fsencode(p) + b"\0" for p in removed)
        lines += b"".join(
            f"{mode} {blob}\t".encode() + os.fsencode(p) + b"\0" for p, mode, blob in raw_entries
        )
        _git(repo, work, ["update-index", "-z", "--index-info"], stdin=lines)
    if exact:
        names = b"".join(os.fsencode(p) + b"\0" for p in exact)
        _git(repo, work, ["update-index", "--add", "--replace", "-z", "--stdin"], stdin=names)


def _modes(workspace: Path, repo: Repository, paths: Sequence[str]) -> dict[str, str]:
    """The git mode of each path that is a file or a symlink in the workspace now."""
    modes: dict[str, str] = {}
    with Beneath(workspace) as tree:
        for path in paths:
            if path.endswith("/") or not path.startswith(repo.prefix):
                continue  # a repository of its own, listed as a directory
            rel = path[len(repo.prefix) :]
            if is_state(rel):
                continue
            mode = _mode_of(tree, rel)
            if mode is not None:
                modes[path] = mode
    return modes


def _mode_of(tree: Beneath, rel: str) -> str | None:
    *parents, name = rel.split("/")
    dir_fd = tree.directory(parents, create=False)
    if dir_fd is None:
        return None  # a directory on the way is gone, or is now a file or a symlink
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return MODE_LINK
    if stat.S_ISREG(info.st_mode):
        return MODE_EXEC if info.st_mode & stat.S_IXUSR else MODE_FILE
    return None  # a directory here is a repository of its own: not ours to snapshot


def _hashes(repo: Repository, paths: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The blob id of each file's bytes as they are on disk (written to the repository),
    and as git would stage them (converted as its attributes say)."""
    # --stdin-paths reads lines (and unquotes a leading '"'): names it would misread go
    # one by one.
    batch = [p for p in paths if "\n" not in p and "\r" not in p and not p.startswith('"')]
    raw: dict[str, str] = {}
    converted: dict[str, str] = {}
    if batch:
        names = b"".join(os.fsencode(p) + b"\n" for p in batch)
        unfiltered, filtered = git_bytes_together(
            repo.top,
            [
                GitCall(
                    [*_EXACT, "hash-object", "-w", "--no-filters", "--stdin-paths"], None, names
                ),
                GitCall([*_EXACT, "hash-object", "--stdin-paths"], None, names),
            ],
        )
        raw.update(zip(batch, unfiltered.decode().split(), strict=True))
        converted.update(zip(batch, filtered.decode().split(), strict=True))
    for path in paths:
        if path not in raw:
            raw[path] = _one_hash(repo, ["-w", "--no-filters", "--", path])
            converted[path] = _one_hash(repo, ["--", path])
    return raw, converted


def _one_hash(repo: Repository, args: Sequence[str]) -> str:
    return git_bytes(repo.top, [*_EXACT, "hash-object", *args]).decode().strip()


def _write_tree(repo: Repository, work: Path) -> str:
    if not repo.prefix:
        return _git(repo, work, ["write-tree"]).decode().strip()
    result = run_git_bytes(
        repo.top, [*_EXACT, "write-tree", f"--prefix={repo.prefix}"], env=_env(work)
    )
    if result.returncode != 0:
        # git refuses a prefix with no files under it: the workspace is empty.
        listed = _git(repo, work, ["ls-files", "-z", "--", repo.prefix])
        if listed:
            raise_git_failed(repo.top, ["write-tree"], result)
        return EMPTY_TREE
    subtree = result.stdout.decode().strip()
    return _nest(repo, subtree, repo.prefix.rstrip("/").split("/"))


def _nest(repo: Repository, tree: str, parts: Sequence[str]) -> str:
    """The tree that holds ``tree`` at ``parts``, and nothing else."""
    if tree == EMPTY_TREE:
        return EMPTY_TREE
    for name in reversed(parts):
        entry = f"040000 tree {tree}\t".encode() + os.fsencode(name) + b"\0"
        tree = git_bytes(repo.top, ["mktree", "-z"], stdin=entry).decode().strip()
    return tree
