"""The tree of a work-tree snapshot, built from an index kept between snapshots so that a
snapshot costs what changed, not what exists.

A snapshot holds every file git would see in the workspace: the files the user's index
tracks and the untracked files that are not ignored, each with its mode and its bytes as
they are on disk (no clean/smudge filter, no end-of-line conversion), ``.agent/state``
never, and no directory that is a repository of its own. Hashing every file each time
costs seconds in a repository of 50,000 files; git's own index answers "what changed"
from stat data in milliseconds. So the tree is written from a private index (the cache,
``acode-snapshot-index`` in the git directory) that git keeps up to date like its own:

- the cache is copied to a scratch file, git lists what differs from it (``diff-files``)
  and which untracked files there are (``ls-files --others`` on the user's index, with
  the user's untracked cache and fsmonitor where they enabled them), and only those
  paths are staged again; the cache is written split (``core.splitIndex``), so that a
  snapshot rewrites the entries that changed, not all of them;
- a staged file's bytes are hashed again unfiltered, and where git's filtered blob
  differs (a filter, ``text``, ``eol`` attributes, ``core.autocrlf``) the raw one
  replaces it: such an entry is left stat-dirty, so git compares it again next time;
- which files belong is the user's index's answer: the files it tracks (ignored or
  not), and the untracked files git shows now (not ignored, not inside a repository of
  their own). How the two indexes differ is recorded beside the cache with both
  checksums, so that while the user's index stays as it is neither is listed whole;
- with no cache, the user's index is the starting point: its stat data and blobs, minus
  the entries that could not be taken as they are (submodules, unmerged or
  assume-unchanged/skip-worktree entries, ``.agent/state``, files whose attributes
  convert their content, everything when ``core.autocrlf`` converts).

git compares every stat field (``core.checkStat=default``, ``core.trustctime``) and the
executable bit whatever the user's settings, so a file whose content changed behind
restored times (``touch -r``) is hashed again. The cache is a cache: a missing, torn or
stale one (its objects collected) costs one snapshot built from the user's index, never
a wrong tree. The user's index, HEAD and refs are never written.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from acode.errors import StepFailedError
from acode.system.beneath import Beneath
from acode.system.git_command import (
    GitCall,
    git_bytes,
    git_bytes_together,
    raise_git_failed,
    run_git_bytes,
)

__all__ = [
    "MODE_EXEC",
    "MODE_FILE",
    "MODE_LINK",
    "Repository",
    "find_repository",
    "is_state",
    "locate",
    "worktree_tree",
]

MODE_FILE = "100644"
MODE_EXEC = "100755"
MODE_LINK = "120000"
_MODE_GITLINK = "160000"
_CACHE_NAME = "acode-snapshot-index"
_RECORD_HEADER = b"acode snapshot record 1"
_HEX = re.compile(r"[0-9a-f]+")
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
    # acode's index is written split: a snapshot rewrites the few entries that changed,
    # not all of them (the user's index is only ever read).
    "-c",
    "core.splitIndex=true",
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

    @property
    def digest_size(self) -> int:
        """Bytes in an object id, and in the checksum that ends an index file."""
        return hashlib.new(self.object_format).digest_size

    @property
    def empty_tree(self) -> str:
        """The id of the tree with nothing in it, in this repository's object format."""
        return hashlib.new(self.object_format, b"tree 0\0").hexdigest()

    @property
    def no_object(self) -> str:
        """The all-zero object id (``update-index --index-info`` reads it as "remove")."""
        return "0" * 2 * self.digest_size


_LOCATE = (
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
)


def locate(workspace: Path) -> Repository:
    """Where the workspace sits in its repository; a failure is raised with git's words."""
    result = run_git_bytes(workspace, _LOCATE)
    repo = _located(workspace, result.returncode, result.stdout)
    if repo is None:
        raise_git_failed(workspace, _LOCATE, result)
    return repo


def find_repository(workspace: Path) -> Repository | None:
    """:func:`locate`, or None when the workspace is not in a git work tree (or git
    cannot be run there)."""
    try:
        result = run_git_bytes(workspace, _LOCATE)
    except StepFailedError:
        return None
    return _located(workspace, result.returncode, result.stdout)


def _located(workspace: Path, returncode: int, out: bytes) -> Repository | None:
    lines = out.split(b"\n")
    # Exit 1 with the paths printed is an unborn HEAD; anything else is a real failure.
    if returncode not in (0, 1) or len(lines) < 6:
        return None
    top, prefix, object_format, index, cache = (os.fsdecode(line) for line in lines[:5])
    head = lines[5].decode().strip() if returncode == 0 else None
    return Repository(
        top=Path(top),
        prefix=prefix,
        head=head,
        user_index=workspace / index,
        cache=workspace / cache,
        object_format=object_format,
    )


def is_state(rel: str) -> bool:
    """Whether a workspace path is in acode's state directory."""
    # .agent/state ignores itself, but a user who once committed it must still never see a
    # restore write an old database over the live one.
    return rel.split("/")[:2] == _STATE_PARTS


def worktree_tree(workspace: Path, repo: Repository) -> str:
    """The id of the tree of the workspace's files as they are now (see the module)."""
    size = repo.digest_size
    # Read before git lists anything: a user's index changed meanwhile reads as changed.
    user = _checksum(repo.user_index, size)
    record = _read_record(repo)
    with tempfile.TemporaryDirectory(prefix="acode-index-") as scratch:
        work = Path(scratch) / "index"
        content = _load_cache(repo, work)
        shared = None if content is None else _whole_shared_index(repo, content, record)
        cached = None if content is None or shared is None else content[-size:]
        known = None
        if record is not None and cached == record.cache and user and user == record.user:
            known = record.membership
        try:
            if cached is None:
                _seed(repo, work)
            tree, known = _update_and_write(workspace, repo, work, known)
        except StepFailedError:
            if cached is None:
                raise
            # A cache naming objects git has collected since: one snapshot built from
            # the user's index instead.
            work.unlink(missing_ok=True)
            _seed(repo, work)
            tree, known = _update_and_write(workspace, repo, work, None)
            shared = None
        _replace(repo.cache, lambda target: _copy(work, target))
        # A shared index git has just written is checked by the next snapshot: the one
        # after a power cut that may have torn it.
        new = _Record(
            cache=_checksum(work, size),
            user=user,
            shared=shared or _SharedIndex(""),
            membership=known,
        )
        _replace(_record_file(repo), lambda target: target.write_bytes(new.encode()))
    return tree


def _copy(source: Path, target: Path) -> bool:
    """Copy an index keeping its modification time: git tells a racily clean entry (a
    file changed within the index's own timestamp) by comparing the two."""
    try:
        shutil.copy2(source, target)
    except FileNotFoundError:
        return False
    return True


def _checksum(index: Path, size: int) -> bytes:
    """The checksum that ends an index file; empty when there is none."""
    try:
        with open(index, "rb") as file:
            file.seek(-size, os.SEEK_END)
            return file.read(size)
    except OSError:  # no index, or one shorter than a checksum
        return b""


def _whole(data: bytes, object_format: str) -> bool:
    """Whether an index file's content ends with its own checksum: git does not check
    that when it reads one, and a torn index would read as a work tree with files
    missing."""
    digest = hashlib.new(object_format)
    size = digest.digest_size
    digest.update(memoryview(data)[:-size])
    return len(data) > size and data.startswith(b"DIRC") and digest.digest() == data[-size:]


def _load_cache(repo: Repository, work: Path) -> bytes | None:
    """Copy the cache to ``work`` if it is whole; return its content."""
    try:
        with open(repo.cache, "rb") as cache:
            data = cache.read()
            info = os.fstat(cache.fileno())
    except FileNotFoundError:
        return None
    if not _whole(data, repo.object_format):
        return None
    work.write_bytes(data)
    os.utime(work, ns=(info.st_atime_ns, info.st_mtime_ns))  # see _copy
    return data


class _SharedIndex(NamedTuple):
    """The shared part of a split index (``sharedindex.<id>`` beside it), as it was when
    it was found whole; "" when the index is not split."""

    path: str
    size: int = 0
    mtime_ns: int = 0
    inode: int = 0


def _whole_shared_index(
    repo: Repository, index: bytes, record: _Record | None
) -> _SharedIndex | None:
    """The shared index that ``index`` (the cache's content) is split from, if it is
    whole: checked once, since it is never written again. None if it is not whole."""
    size = repo.digest_size
    body = index[:-size]
    for name in os.listdir(repo.cache.parent):
        prefix, _, oid = name.partition(".")
        # The split index names its shared index by its checksum ("link" extension).
        if prefix != "sharedindex" or len(oid) != 2 * size or not _HEX.fullmatch(oid):
            continue
        if bytes.fromhex(oid) not in body:
            continue
        path = repo.cache.with_name(name)
        try:
            info = path.stat()
            shared = _SharedIndex(
                path=str(path), size=info.st_size, mtime_ns=info.st_mtime_ns, inode=info.st_ino
            )
            if record is not None and record.shared == shared:
                return shared
            return shared if _whole(path.read_bytes(), repo.object_format) else None
        except OSError:
            return None
    return _SharedIndex("")  # not split, or its shared index is gone: git will say


class _Record(NamedTuple):
    """What a snapshot leaves for the next beside the cache: the checksums of the cache
    and of the user's index it was made with, the shared index found whole, and how the
    two indexes differ."""

    cache: bytes
    user: bytes
    shared: _SharedIndex
    membership: _Membership

    def encode(self) -> bytes:
        lines = [
            _RECORD_HEADER,
            self.cache.hex().encode(),
            self.user.hex().encode(),
            b" ".join(str(v).encode() for v in self.shared[1:])
            + b" "
            + os.fsencode(self.shared.path),
        ]
        paths = [b"u" + p for p in self.membership.untracked]
        paths += [b"m" + p for p in self.membership.missing]
        return b"\n".join(lines) + b"\n" + b"\0".join(paths)


def _record_file(repo: Repository) -> Path:
    return repo.cache.with_name(f"{_CACHE_NAME}-record")


def _read_record(repo: Repository) -> _Record | None:
    try:
        data = _record_file(repo).read_bytes()
    except FileNotFoundError:
        return None
    parts = data.split(b"\n", 4)
    if len(parts) != 5 or parts[0] != _RECORD_HEADER:
        return None
    try:
        cache, user = bytes.fromhex(parts[1].decode()), bytes.fromhex(parts[2].decode())
        size, mtime_ns, inode, path = parts[3].split(b" ", 3)
        shared = _SharedIndex(
            path=os.fsdecode(path), size=int(size), mtime_ns=int(mtime_ns), inode=int(inode)
        )
    except ValueError:
        return None
    known = _Membership(untracked=set(), missing=set())
    for entry in parts[4].split(b"\0"):
        if entry[:1] == b"u":
            known.untracked.add(entry[1:])
        elif entry[:1] == b"m":
            known.missing.add(entry[1:])
    return _Record(cache=cache, user=user, shared=shared, membership=known)


def _replace(target: Path, write: Callable[[Path], object]) -> None:
    """Write ``target`` whole or not at all. No fsync: a cache lost or torn by a power
    cut is rebuilt, never trusted wrongly (:func:`_load_cache` checks it whole, and the
    paths file names the cache's checksum)."""
    with contextlib.suppress(OSError):  # a read-only .git: the next snapshot starts over
        fd, name = tempfile.mkstemp(prefix=f"{target.name}.", dir=target.parent)
        os.close(fd)
        try:
            write(Path(name))
            os.replace(name, target)
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
    lines = b"".join(f"0 {repo.no_object}\t".encode() + os.fsencode(p) + b"\0" for p in paths)
    _git(repo, work, ["update-index", "-z", "--index-info"], stdin=lines)


class _Membership(NamedTuple):
    """How the scratch index's paths differ from the user's index's: the untracked files
    it holds, and the tracked paths it does not hold (not files, or gone). With the
    checksums of both indexes, it spares a snapshot listing either whole while the
    user's index stays as it is."""

    untracked: set[bytes]
    missing: set[bytes]


def _update_and_write(
    workspace: Path, repo: Repository, work: Path, known: _Membership | None
) -> tuple[str, _Membership]:
    """Bring the scratch index up to date and write its tree; ``known`` is how it differs
    from the user's index, when the last snapshot recorded that and neither index has
    changed since."""
    scope = ["--", repo.prefix] if repo.prefix else []
    ours, theirs = _env(work), _env(repo.user_index)  # a missing index reads as empty
    listings = [
        # diff-files, not ls-files --modified: it stats the files on several threads.
        GitCall(args=[*_EXACT, "diff-files", "--name-only", "-z", *scope], env=ours),
        GitCall(
            args=[*_EXACT, "ls-files", "-z", "--others", "--exclude-standard", *scope], env=theirs
        ),
    ]
    if known is None:
        listings += [
            GitCall(args=[*_EXACT, "ls-files", "-z", "--cached", *scope], env=ours),
            GitCall(args=[*_EXACT, "ls-files", "-z", "--cached", *scope], env=theirs),
        ]
    modified, others, *whole = (
        set(out.split(b"\0")) - {b""} for out in git_bytes_together(repo.top, listings)
    )
    if known is None:
        held, tracked = whole
        known = _Membership(untracked=held - tracked, missing=tracked - held)
    # What belongs is the user's index's answer: the files it tracks, and the untracked
    # ones git shows now (not ignored, not inside a repository of their own).
    untracked, missing = known
    gone = untracked - others
    changed = (modified | missing | (others - untracked)) - gone
    if changed or gone:
        staged, removed = _stage(
            workspace,
            repo,
            work,
            _decoded(changed),
            _decoded(gone),
            held=lambda p: p in modified or p in untracked,
        )
        tracked_now = {p for p in staged | removed if p in missing or p in modified - untracked}
        known = _Membership(
            untracked=(untracked - removed) | (staged - tracked_now),
            missing=(missing - staged) | (removed & tracked_now),
        )
    return _write_tree(repo, work), known


def _decoded(names: set[bytes]) -> set[str]:
    return {os.fsdecode(name) for name in names}


def _stage(
    workspace: Path,
    repo: Repository,
    work: Path,
    changed: set[str],
    gone: set[str],
    *,
    held: Callable[[bytes], bool],
) -> tuple[set[bytes], set[bytes]]:
    """Stage ``changed`` (top-relative) as it is on disk now, removing what is no file
    (deleted, a directory, acode's state) and ``gone``; ``held`` says which paths the
    scratch index has. Returns the paths staged and those removed.

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
    removed = {p for p in changed - modes.keys() if held(os.fsencode(p))} | gone
    raw_entries = [(p, modes[p], raw[p]) for p in files if raw[p] != converted[p]]
    if removed or raw_entries:
        lines = b"".join(f"0 {repo.no_object}\t".encode() + os.fsencode(p) + b"\0" for p in removed)
        lines += b"".join(
            f"{mode} {blob}\t".encode() + os.fsencode(p) + b"\0" for p, mode, blob in raw_entries
        )
        _git(repo, work, ["update-index", "-z", "--index-info"], stdin=lines)
    if exact:
        names = b"".join(os.fsencode(p) + b"\0" for p in exact)
        _git(repo, work, ["update-index", "--add", "--replace", "-z", "--stdin"], stdin=names)
    return {os.fsencode(p) for p in modes}, {os.fsencode(p) for p in removed}


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
                    args=[*_EXACT, "hash-object", "-w", "--no-filters", "--stdin-paths"],
                    env=None,
                    stdin=names,
                ),
                GitCall(args=[*_EXACT, "hash-object", "--stdin-paths"], env=None, stdin=names),
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
        return repo.empty_tree
    subtree = result.stdout.decode().strip()
    return _nest(repo, subtree, repo.prefix.rstrip("/").split("/"))


def _nest(repo: Repository, tree: str, parts: Sequence[str]) -> str:
    """The tree that holds ``tree`` at ``parts``, and nothing else."""
    if tree == repo.empty_tree:
        return tree
    for name in reversed(parts):
        entry = f"040000 tree {tree}\t".encode() + os.fsencode(name) + b"\0"
        tree = git_bytes(repo.top, ["mktree", "-z"], stdin=entry).decode().strip()
    return tree
