"""Workspace file I/O: hashing, crash-safe writes, path containment and glob expansion.

Every path a plan or an agent supplies goes through :func:`resolve_in_workspace` before
anything touches the disk, and every write goes through :func:`atomic_write`, so a crash
at any instant leaves a file either wholly old or wholly new.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import posixpath
import stat
from collections.abc import Iterator, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import NamedTuple

from acode.errors import UsageError

__all__ = [
    "TEMP_PREFIX",
    "FileStat",
    "atomic_write",
    "expand_globs",
    "resolve_in_workspace",
    "sha256_bytes",
    "sha256_file",
    "stat_file",
]

TEMP_PREFIX = ".acode-tmp-"
_CHUNK = 1024 * 1024
_GLOB_MAGIC = frozenset("*?[")
_HINT = "write paths relative to the workspace root, e.g. src/app.py"


class FileStat(NamedTuple):
    """What tells, without reading a file, that it may have changed."""

    size: int
    mtime_ns: int


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str | None:
    """Hex SHA-256 of the file's content, or None when it does not exist."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return digest.hexdigest()


def stat_file(path: Path | str) -> FileStat | None:
    """Size and mtime (following symlinks), or None when the file does not exist."""
    try:
        result = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return FileStat(size=result.st_size, mtime_ns=result.st_mtime_ns)


def atomic_write(path: Path, data: bytes, *, temp_dir: Path | None = None) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file.

    The data goes to a temporary file in the same directory (same file system, so the
    rename is atomic), is fsynced, renamed over the target, and the directory is fsynced so
    the rename itself survives power loss. An existing file keeps its permission bits.
    A symlink at ``path`` is replaced, not followed: :func:`resolve_in_workspace` already
    returns resolved paths. On failure the temporary file is removed and the target is as
    it was. ``temp_dir`` (on the same file system) keeps the temporary file elsewhere:
    a SIGKILL between write and rename, which nothing can clean up at once, then leaves
    it there rather than in the user's tree.
    """
    parent = path.parent
    _make_dirs_durably(parent)
    if temp_dir is not None:
        _make_dirs_durably(temp_dir)
    mode = _existing_mode(path)
    fd, temp = _create_temp(temp_dir or parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        try:
            os.replace(temp, path)
        except OSError as exc:
            if exc.errno != errno.EXDEV or temp_dir is None:
                raise
            # The target lives on another file system than temp_dir: write beside it.
            os.unlink(temp)
            atomic_write(path, data)
            return
    except BaseException:
        # BaseException too: a Ctrl+C mid-write must not leave a stray temp file behind.
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _fsync_dir(parent)


def _existing_mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None


def _create_temp(directory: Path) -> tuple[int, Path]:
    # os.open with 0o644 lets the umask apply, unlike mkstemp's fixed 0o600.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    while True:
        # What secrets.token_hex(8) returns, without loading the random module for it.
        temp = directory / f"{TEMP_PREFIX}{os.urandom(8).hex()}"
        try:
            return os.open(temp, flags, 0o644), temp
        except FileExistsError:
            continue


def _make_dirs_durably(directory: Path) -> None:
    # A new directory's entry lives in its parent: fsync that too, or a power loss can
    # take the directory (and the file about to be written into it) away.
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for new_dir in reversed(missing):
        with contextlib.suppress(FileExistsError):
            new_dir.mkdir()
        _fsync_dir(new_dir.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some file systems cannot fsync a directory; the rename is as durable as they allow.
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def resolve_in_workspace(workspace: Path, relative: str) -> Path:
    """The absolute, symlink-resolved path of ``relative`` inside ``workspace``.

    Refuses (UsageError) empty and absolute paths, paths that leave the workspace through
    ``..`` or a symlink, and paths inside acode's own state (``.agent/state``) or git's
    metadata (any ``.git`` component).
    """
    parts = _relative_parts(relative, what="path")
    root = workspace.resolve()
    try:
        resolved = (root / relative).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
        raise UsageError(f"cannot resolve path {relative!r}: {exc}", hint=_HINT) from exc
    if not resolved.is_relative_to(root) or resolved == root:
        raise UsageError(
            f"path {relative!r} resolves to {resolved}, outside the workspace {root}: "
            "paths must be relative to the workspace and stay inside it",
            hint="remove the symlink or the '..' that leads outside the workspace",
        )
    for candidate in (parts, resolved.relative_to(root).parts):
        _refuse_protected(relative, candidate)
    return resolved


def _relative_parts(relative: str, *, what: str) -> tuple[str, ...]:
    """Lexically normalised parts of a workspace-relative path, refusing escapes."""
    if "\0" in relative:
        raise UsageError(f"{what} {relative!r} contains a NUL byte", hint=_HINT)
    if posixpath.isabs(relative):
        raise UsageError(
            f"{what} {relative!r} is absolute: paths must be relative to the workspace",
            hint=_HINT,
        )
    if relative == "~" or relative.startswith("~/"):
        # Not expanded, but almost certainly meant as the home directory: refuse, not guess.
        raise UsageError(
            f"{what} {relative!r} starts with '~': paths must be relative to the workspace",
            hint=_HINT,
        )
    normal = posixpath.normpath(relative) if relative else "."
    if normal == ".":
        raise UsageError(
            f"{what} {relative!r} is empty: paths must be relative to the workspace and "
            "name something inside it",
            hint=_HINT,
        )
    parts = tuple(normal.split("/"))
    if parts[0] == "..":
        raise UsageError(
            f"{what} {relative!r} leaves the workspace through '..': "
            "paths must be relative to the workspace and stay inside it",
            hint=_HINT,
        )
    return parts


def _refuse_protected(relative: str, parts: Sequence[str]) -> None:
    # casefold: on a case-insensitive file system '.GIT/config' is '.git/config'.
    folded = [part.casefold() for part in parts]
    if folded[:2] == [".agent", "state"]:
        raise UsageError(
            f"path {relative!r} is inside .agent/state, acode's own state",
            hint="steps may not read or write acode's state; choose another path",
        )
    if ".git" in folded:
        raise UsageError(
            f"path {relative!r} is inside git metadata (.git)",
            hint="use a commit step to change git history instead of touching .git",
        )


def expand_globs(workspace: Path, patterns: Sequence[str]) -> list[str]:
    """Sorted, unique workspace-relative POSIX paths of the files the patterns name.

    Patterns are relative to the workspace; ``*``, ``?`` and ``[...]`` match within one
    path component, ``**`` matches any number of directories (a trailing ``**`` matches
    every file below). Matches are regular files (a symlink counts when it resolves to one
    inside the workspace); nothing under ``.agent/`` or any ``.git/`` is ever returned.

    A pattern without wildcards is a plain path: an existing directory stands for every
    file below it, and a path that does not exist yet is returned as it is, so that a
    snapshot can record the file as absent and remove it on rollback.
    """
    root = workspace.resolve()
    found: set[str] = set()
    for pattern in patterns:
        found.update(_expand_one(workspace, root, pattern))
    return sorted(found)


def _expand_one(workspace: Path, root: Path, pattern: str) -> Iterator[str]:
    parts = _relative_parts(pattern, what="glob pattern")
    if ".." in parts:
        raise UsageError(
            f"glob pattern {pattern!r} contains '..': patterns must be relative to the "
            "workspace and stay inside it",
            hint=_HINT,
        )
    literal = list(_literal_prefix(parts))
    if len(literal) == len(parts):
        yield from _expand_plain(workspace, root, "/".join(parts))
        return
    # Without '**' a match has exactly len(parts) components: no need to walk deeper.
    depth = None if "**" in parts else len(parts)
    for relative in _walk_files(workspace, root, "/".join(literal), depth):
        if _match_parts(parts, tuple(relative.split("/"))):
            yield relative


def _literal_prefix(parts: Sequence[str]) -> Iterator[str]:
    for part in parts:
        if _GLOB_MAGIC.intersection(part):
            return
        yield part


def _expand_plain(workspace: Path, root: Path, relative: str) -> Iterator[str]:
    if _excluded(relative.split("/")):
        return
    path = workspace / relative
    if path.is_dir():
        yield from _walk_files(workspace, root, relative)
        return
    resolve_in_workspace(workspace, relative)  # refuses a missing path behind an escaping link
    if not path.exists() or _is_contained_file(root, path):
        yield relative


def _walk_files(
    workspace: Path, root: Path, base: str, max_parts: int | None = None
) -> Iterator[str]:
    start = workspace / base if base else workspace
    if not start.is_dir():
        return
    if base:
        resolve_in_workspace(workspace, base)  # the walk's root must not lead outside
    for directory, dirnames, filenames in os.walk(start):
        rel_dir = posixpath.relpath(Path(directory).as_posix(), workspace.as_posix())
        prefix = "" if rel_dir == "." else rel_dir + "/"
        # Pruning in place keeps os.walk out of .git and .agent entirely (they can be huge).
        dirnames[:] = [d for d in dirnames if not _excluded((prefix + d).split("/"))]
        if max_parts is not None and prefix.count("/") + 2 > max_parts:
            dirnames[:] = []
        for name in filenames:
            relative = prefix + name
            if not _excluded(relative.split("/")) and _is_contained_file(
                root, Path(directory, name)
            ):
                yield relative


def _excluded(parts: Sequence[str]) -> bool:
    folded = [part.casefold() for part in parts]
    return folded[0] == ".agent" or ".git" in folded


def _is_contained_file(root: Path, path: Path) -> bool:
    try:
        mode = path.lstat().st_mode
        if stat.S_ISREG(mode):
            return True
        if not stat.S_ISLNK(mode):
            return False
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    if not target.is_relative_to(root) or not target.is_file():
        return False
    return not _excluded(target.relative_to(root).parts)


def _match_parts(pattern: Sequence[str], parts: Sequence[str]) -> bool:
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        # A trailing '**' must still consume at least one component: the file itself.
        first = 1 if not rest else 0
        return any(_match_parts(rest, parts[i:]) for i in range(first, len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], head) and _match_parts(rest, parts[1:])
