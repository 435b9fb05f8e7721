"""Workspace file I/O: hashing, crash-safe writes of acode's own files and glob expansion.

Every path a plan or an agent supplies is resolved by :class:`~acode.system.beneath.Beneath`,
from the workspace's descriptor, before anything touches the disk; every write is atomic,
so a crash at any instant leaves a file either wholly old or wholly new.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator, Sequence
from fnmatch import fnmatchcase
from pathlib import Path

from acode.errors import UsageError
from acode.system.atomic import TEMP_PREFIX, fsync_dir, write_at
from acode.system.beneath import Beneath, open_subdir, relative_parts

__all__ = [
    "TEMP_PREFIX",
    "atomic_write",
    "covers",
    "expand_globs",
    "sha256_bytes",
]

_GLOB_MAGIC = frozenset("*?[")
_HINT = "write paths relative to the workspace root, e.g. src/app.py"
_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def atomic_write(
    path: Path, data: bytes, *, temp_dir: Path | None = None, private: bool = False
) -> None:
    """Replace ``path``, a file of acode's own (its configuration, progress file,
    exports), with ``data`` so that a crash leaves either the old or the new file
    (:func:`~acode.system.beneath.write_at`). Missing parent directories are made, and
    fsynced into their parents. ``temp_dir`` (on the same file system) keeps the
    temporary file elsewhere: a SIGKILL between write and rename, which nothing can
    clean up at once, then leaves it there. ``private``: the file is its owner's alone
    (0600), and so are the directories made for it (0700). Workspace files go through
    :meth:`Beneath.write`, which resolves the path without following symlinks.
    """
    dir_mode = 0o700 if private else 0o777
    _make_dirs_durably(path.parent, dir_mode)
    if temp_dir is not None:
        _make_dirs_durably(temp_dir, dir_mode)
    with contextlib.ExitStack() as held:
        dir_fd = os.open(path.parent, _ROOT_FLAGS)
        held.callback(os.close, dir_fd)
        temp_fd = dir_fd
        if temp_dir is not None:
            temp_fd = os.open(temp_dir, _ROOT_FLAGS)
            held.callback(os.close, temp_fd)
        write_at(dir_fd, path.name, data, temp_fd=temp_fd, private=private)


def _make_dirs_durably(directory: Path, mode: int) -> None:
    # A new directory's entry lives in its parent: fsync that too, or a power loss can
    # take the directory (and the file about to be written into it) away.
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for new_dir in reversed(missing):
        with contextlib.suppress(FileExistsError):
            new_dir.mkdir(mode)
        fd = os.open(new_dir.parent, _ROOT_FLAGS)
        try:
            fsync_dir(fd)
        finally:
            os.close(fd)


def expand_globs(tree: Beneath, patterns: Sequence[str]) -> list[str]:
    """Sorted, unique workspace-relative POSIX paths of the files the patterns name.

    Patterns are relative to the workspace ``tree`` holds; ``*``, ``?`` and ``[...]``
    match within one path component, ``**`` matches any number of directories (a
    trailing ``**`` matches every file below). Matches are regular files (a symlink counts
    when it resolves to one inside the workspace); nothing under ``.agent/`` or any
    ``.git/`` is ever returned. Directories are listed from descriptors opened without
    following symlinks: a symlinked directory is not walked.

    A pattern without wildcards is a plain path: an existing directory stands for every
    file below it, and a path that does not exist yet is returned as it is, so that a
    snapshot can record the file as absent and remove it on rollback.
    """
    found: set[str] = set()
    for pattern in patterns:
        found.update(_expand_one(tree, pattern))
    return sorted(found)


def covers(pattern: str, path: str) -> bool:
    """Whether ``expand_globs`` names the workspace-relative ``path`` for ``pattern``,
    told without the disk (a file that is gone counts too): a plain path stands for
    itself and every file below it."""
    parts = tuple(part for part in pattern.split("/") if part not in ("", "."))
    target = tuple(path.split("/"))
    if not any(_GLOB_MAGIC.intersection(part) for part in parts):
        return target[: len(parts)] == parts
    return _match_parts(parts, target)


def _expand_one(tree: Beneath, pattern: str) -> Iterator[str]:
    parts = relative_parts(pattern, what="glob pattern")
    if ".." in parts:
        raise UsageError(
            f"glob pattern {pattern!r} contains '..': patterns must be relative to the "
            "workspace and stay inside it",
            hint=_HINT,
        )
    literal = list(_literal_prefix(parts))
    if len(literal) == len(parts):
        yield from _expand_plain(tree, "/".join(parts))
        return
    # Without '**' a match has exactly len(parts) components: no need to walk deeper.
    depth = None if "**" in parts else len(parts)
    base = "/".join(literal)
    # The walk's root must not lead outside: resolving it refuses a link that does.
    fd = tree.open_dir(tree.resolve(base)) if base else tree.root_fd
    if fd is None:
        return
    for relative in _walk_dir(tree, fd, f"{base}/" if base else "", depth):
        if _match_parts(parts, tuple(relative.split("/"))):
            yield relative


def _literal_prefix(parts: Sequence[str]) -> Iterator[str]:
    for part in parts:
        if _GLOB_MAGIC.intersection(part):
            return
        yield part


def _expand_plain(tree: Beneath, relative: str) -> Iterator[str]:
    if _excluded(relative.split("/")):
        return
    target = tree.resolve(relative)  # refuses a missing path behind an escaping link
    if target.info is not None and stat.S_ISREG(target.info.st_mode):
        # A regular file as resolved (a declared file, as a `run` step's paths mostly
        # are): no directory to try opening, no second lstat.
        if not _excluded(target.parts):
            yield relative
        return
    fd = tree.open_dir(target)
    if fd is not None:
        yield from _walk_dir(tree, fd, f"{relative}/", None)
        return
    info = tree.lstat(target)
    if info is None or (stat.S_ISREG(info.st_mode) and not _excluded(target.parts)):
        yield relative


def _walk_dir(tree: Beneath, fd: int, prefix: str, max_parts: int | None) -> Iterator[str]:
    with os.scandir(fd) as listing:
        entries = list(listing)
    deeper = max_parts is None or prefix.count("/") + 2 <= max_parts
    for entry in entries:
        relative = prefix + entry.name
        # Pruning here keeps the walk out of .git and .agent entirely (they can be huge).
        if _excluded(relative.split("/")):
            continue
        if entry.is_dir(follow_symlinks=False):
            sub = open_subdir(fd, entry.name) if deeper else None
            if sub is not None:
                try:
                    yield from _walk_dir(tree, sub, f"{relative}/", max_parts)
                finally:
                    os.close(sub)
        elif entry.is_file(follow_symlinks=False) or (
            entry.is_symlink() and _links_to_file(tree, relative)
        ):
            yield relative


def _excluded(parts: Sequence[str]) -> bool:
    folded = [part.casefold() for part in parts]
    return folded[0] == ".agent" or ".git" in folded


def _links_to_file(tree: Beneath, relative: str) -> bool:
    """A symlink that leads to a regular file inside the workspace, out of .agent/.git."""
    try:
        target = tree.resolve(relative)
    except UsageError:
        return False  # it leads out, loops, or into acode's state or git's metadata
    info = tree.lstat(target)
    return info is not None and stat.S_ISREG(info.st_mode) and not _excluded(target.parts)


def _match_parts(pattern: Sequence[str], parts: Sequence[str]) -> bool:
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        # A trailing '**' must still consume at least one component: the file itself.
        first = 1 if not rest else 0
        return any(_match_parts(rest, parts[i:]) for i in range(first, len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], head) and _match_parts(rest, parts[1:])
