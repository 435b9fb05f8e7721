"""Workspace paths resolved from directory descriptors (invariant 11, docs/invariants.md).

A path string handed to the kernel is resolved when the call runs: a directory on it
swapped for a symlink between acode's check and its use (threat 5, TOCTOU) would send a
write, a read or a rollback wherever the link points. Here the kernel never resolves more
than one name, in a directory acode holds open, and never follows a symlink
(``O_NOFOLLOW``): the workspace's root is opened once, each directory on a path is opened
from its parent's descriptor, and a symlink met on the way is read (``readlinkat``) and
its target resolved the same way from the root, refused when it leads out. Files are
then opened, created, renamed (``renameat`` between two held directories) and removed by
their name in their held directory. Whatever is swapped at any instant, an operation
lands on a file reached from the root through directories that were inside the workspace
when they were opened.

What this cannot stop: a directory already held open that someone moves out of the
workspace (``mv ws/d /elsewhere``) still receives what is written into it, as any open
directory does; and the workspace's own path is resolved as given, once per
:class:`Beneath`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import posixpath
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

from acode.errors import StepFailedError, StorageError, UsageError
from acode.system.atomic import fsync_dir, write_at

__all__ = [
    "Beneath",
    "Target",
    "most_held",
    "open_subdir",
    "refuse_protected",
    "relative_parts",
]

_HINT = "write paths relative to the workspace root, e.g. src/app.py"
_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_DIR_FLAGS = _ROOT_FLAGS | os.O_NOFOLLOW
# O_NONBLOCK: a FIFO put where a file was expected must not hang the open.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CHUNK = 1024 * 1024
_MAX_LINKS = 40  # the kernel's own limit on symlinks in one lookup
# A name that changes kind under us this many times in a row: someone keeps swapping it.
_MAX_RACES = 100


class Target(NamedTuple):
    """Where a workspace path leads: a name in a directory held open."""

    dir_fd: int | None  # None: a directory on the way is missing, or is not a directory
    name: str
    parts: tuple[str, ...]  # the resolved path, relative to the workspace
    info: os.stat_result | None = None  # the name's lstat when it was resolved, if taken


class _Link(NamedTuple):
    target: str


class _Kind:
    """What a name in a held directory turned out to be, besides a directory or a link."""


_ABSENT = _Kind()  # the last name is not there (or is no longer a link): look again
_MISSING = _Kind()
_NOT_DIR = _Kind()


class Beneath:
    """A workspace held open by a descriptor; every path below it resolved without the
    kernel following a symlink. Directories opened on the way stay open (and are reused)
    until :meth:`close`, so that many paths in one batch cost one open per directory."""

    def __init__(self, workspace: Path | str) -> None:
        # A step's workspace is a Path already: parsing it again costs more than the open.
        self.workspace = workspace if isinstance(workspace, Path) else Path(workspace)
        self._dirs: dict[tuple[str, ...], int] = {(): os.open(workspace, _ROOT_FLAGS)}
        self._roots: tuple[str, ...] | None = None

    @property
    def root_fd(self) -> int:
        return self._dirs[()]

    def close(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()

    def __enter__(self) -> Beneath:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- resolving --------------------------------------------------------------------

    def resolve(self, relative: str, *, create: bool = False) -> Target:
        """Where the workspace-relative path ``relative`` leads, symlinks inside the
        workspace followed by acode itself. ``create`` makes the missing directories on
        the way. Refuses (UsageError) what :func:`relative_parts` refuses, a symlink or
        ``..`` leading out, and paths in acode's state or git's metadata."""
        parts = relative_parts(relative, what="path")
        if ".agent" in relative or ".git" in relative.casefold():
            refuse_protected(relative, parts)  # as written, whatever links lie on the way
        # ``here``: the directory reached so far; ``pending``, a stack: pop() gives the
        # next name. A directory already held (a batch's files share a few) is where
        # walking it again, one held descriptor after another, would lead.
        here: tuple[str, ...] = parts[:-1]
        pending = [parts[-1]]
        if here not in self._dirs:
            here, pending = (), list(reversed(parts))
        links = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if not here:
                    raise self._outside(relative, [part, *reversed(pending)])
                here = here[:-1]
                continue
            path = (*here, part)
            if (part[:1] == "." and part.casefold() == ".git") or (
                len(path) == 2 and part.casefold() == "state"
            ):
                refuse_protected(relative, path)  # reached through a link, or '..'
            parent = self._dirs[here]
            found = self._final(parent, part) if not pending else self._enter(path, create)
            if found is None:
                here = path
            elif isinstance(found, _Link):
                links += 1
                if links > _MAX_LINKS:
                    raise UsageError(
                        f"cannot resolve path {relative!r}: more than {_MAX_LINKS} symbolic "
                        "links on the way (a symlink loop)",
                        hint=_HINT,
                    )
                here = self._follow(relative, found.target, here, pending)
            elif isinstance(found, os.stat_result):
                return Target(dir_fd=parent, name=part, parts=path, info=found)
            elif found is _ABSENT:
                return Target(dir_fd=parent, name=part, parts=path)
            elif found is _NOT_DIR and create:
                raise StepFailedError(
                    f"cannot write {relative}: {'/'.join(path)} is a file, not a directory",
                    hint=f"remove or rename {'/'.join(path)}, or write somewhere else",
                )
            else:
                return Target(dir_fd=None, name=part, parts=(*path, *reversed(pending)))
        if not here:
            raise UsageError(
                f"path {relative!r} resolves to the workspace itself, not to a file in it",
                hint=_HINT,
            )
        return Target(dir_fd=self._dirs[here[:-1]], name=here[-1], parts=here)

    def open_dir(self, target: Target) -> int | None:
        """The descriptor of the directory ``target`` is (held until :meth:`close`);
        None when it is anything else, or nothing."""
        if target.dir_fd is None:
            return None
        for _ in range(_MAX_RACES):
            found = self._enter(target.parts, create=False)
            if found is None:
                return self._dirs[target.parts]
            if not isinstance(found, _Link):
                return None
            # A directory when resolved, a link now: resolve it again.
            target = self.resolve("/".join(target.parts))
            if target.dir_fd is None:
                return None
        raise _unstable("/".join(target.parts))

    @staticmethod
    def lstat(target: Target) -> os.stat_result | None:
        """What is at ``target`` now, not following a link; None when nothing is. (A
        link there was put since it was resolved.)"""
        if target.dir_fd is None:
            return None
        try:
            return os.stat(target.name, dir_fd=target.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def directory(self, parts: Sequence[str], *, create: bool, replace: bool = False) -> int | None:
        """The descriptor of acode's own directory ``parts`` (in its state, or one git
        restores). No symlink is followed at all. Without ``create``, None when the path
        is not a directory all the way. With ``create``, missing directories are made and
        a symlink or a file on the way is refused, or with ``replace`` removed to make
        way for the directory."""
        here: tuple[str, ...] = ()
        for part in parts:
            path = (*here, part)
            for _ in range(_MAX_RACES):
                found = self._enter(path, create)
                if found is None or not (create and replace):
                    break
                os.unlink(part, dir_fd=self._dirs[here])  # a file or link in the way
            if found is not None:
                if not create:
                    return None
                raise _not_a_directory(self.workspace.joinpath(*path), found)
            here = path
        return self._dirs[here]

    @property
    def held(self) -> int:
        """How many directories are held open, the root included."""
        return len(self._dirs)

    def release(self) -> None:
        """Close every directory held but the root: a batch over more directories than
        a process may hold open lets go of them between two of its paths (never while
        it uses a :class:`Target`, whose descriptor this closes)."""
        self.forget(())

    def each(self, paths: Iterable[str]) -> Iterator[str]:
        """``paths``, one at a time, for a batch that resolves each and is done with it
        before the next: the directories held are let go of whenever they are more than
        :func:`most_held`, so that a batch over a tree of thousands never runs out of
        descriptors (EMFILE)."""
        limit = most_held()
        for path in paths:
            if len(self._dirs) >= limit:
                self.release()
            yield path

    def forget(self, parts: Sequence[str]) -> None:
        """Close what is held of directory ``parts`` and below: it was removed."""
        prefix = tuple(parts)
        for path in [p for p in self._dirs if p[: len(prefix)] == prefix and p]:
            os.close(self._dirs.pop(path))

    def _enter(self, path: tuple[str, ...], create: bool) -> _Link | _Kind | None:
        """Open directory ``path`` from its parent (None when done), or say what is there."""
        if path in self._dirs:
            return None
        parent, name = self._dirs[path[:-1]], path[-1]
        for _ in range(_MAX_RACES):
            try:
                self._dirs[path] = os.open(name, _DIR_FLAGS, dir_fd=parent)
                return None
            except FileNotFoundError:
                if not create:
                    return _MISSING
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=parent)
                    fsync_dir(parent)  # a new directory's entry lives in its parent
                continue
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
            # Not a directory: a symlink (O_NOFOLLOW refused it), or a file.
            try:
                return _Link(os.readlink(name, dir_fd=parent))
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
            try:
                if not stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                    return _NOT_DIR
            except FileNotFoundError:
                pass
            # It became a directory meanwhile: open it again.
        raise _unstable("/".join(path))

    @staticmethod
    def _final(parent: int, name: str) -> _Link | os.stat_result | _Kind:
        """The last name: its lstat, or a link to follow."""
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if not stat.S_ISLNK(info.st_mode):
                return info
            return _Link(os.readlink(name, dir_fd=parent))
        except FileNotFoundError:
            return _ABSENT
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # no longer a link
                return _ABSENT
            raise

    def _follow(
        self, relative: str, target: str, here: tuple[str, ...], pending: list[str]
    ) -> tuple[str, ...]:
        """Queue a link's target; the directory it is resolved from."""
        if not target.startswith("/"):
            pending.extend(reversed(target.split("/")))
            return here
        for root in self._root_paths():
            prefix = root.rstrip("/") + "/"
            if target == root or target.startswith(prefix):
                pending.extend(reversed(target[len(prefix) :].split("/")))
                return ()
        raise self._outside(relative, [target, *reversed(pending)], here=[])

    def _root_paths(self) -> tuple[str, ...]:
        # An absolute link into the workspace may spell it as given or as resolved.
        if self._roots is None:
            given = os.path.abspath(self.workspace)
            self._roots = (given, os.path.realpath(given))
        return self._roots

    def _outside(
        self, relative: str, rest: Sequence[str], here: Sequence[str] | None = None
    ) -> UsageError:
        root = self._root_paths()[1]
        on_the_way = here if here is not None else ()
        resolved = posixpath.normpath(posixpath.join(root, *on_the_way, *rest))
        return UsageError(
            f"path {relative!r} resolves to {resolved}, outside the workspace {root}: "
            "paths must be relative to the workspace and stay inside it",
            hint="remove the symlink or the '..' that leads outside the workspace",
        )

    # -- files ------------------------------------------------------------------------

    def open_read(self, relative: str) -> tuple[int, os.stat_result] | None:
        """A descriptor of the regular file ``relative`` names, open for reading, and its
        stat; None when there is no such file."""
        for _ in range(_MAX_RACES):
            target = self.resolve(relative)
            if target.dir_fd is None:
                return None
            try:
                fd = os.open(target.name, _READ_FLAGS, dir_fd=target.dir_fd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                continue  # it became a symlink since it was resolved: resolve it again
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode):
                return fd, info
            os.close(fd)
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), relative)
            raise StepFailedError(
                f"{relative} is not a regular file (a device, a FIFO or a socket)",
                hint="steps read and write regular files only",
            )
        raise _unstable(relative)

    def read_bytes(self, relative: str) -> bytes | None:
        """The file's content; None when there is no such file."""
        opened = self.open_read(relative)
        if opened is None:
            return None
        with open(opened[0], "rb", closefd=True) as handle:
            return handle.read()

    def sha256(self, relative: str) -> str | None:
        """Hex SHA-256 of the file's content; None when there is no such file."""
        opened = self.open_read(relative)
        if opened is None:
            return None
        digest = hashlib.sha256()
        with open(opened[0], "rb", closefd=True) as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def stat(self, relative: str) -> os.stat_result | None:
        """What the path leads to, as lstat says (the links on the way followed by
        :meth:`resolve`); None when nothing is there."""
        target = self.resolve(relative)
        return target.info or self.lstat(target)

    def write(
        self, relative: str, data: bytes, *, staging: Sequence[str] | None = None
    ) -> os.stat_result:
        """Replace the file ``relative`` names with ``data``, atomically (:func:`write_at`);
        return the new file's lstat, taken by its name in the directory it was renamed
        into (no path is resolved again). ``staging``: acode's own directory
        (workspace-relative parts, created when missing) where the temporary file is
        written, so that a kill before the rename leaves it there rather than in the
        user's tree."""
        target = self.resolve(relative, create=True)
        assert target.dir_fd is not None  # create=True made every directory on the way
        temp_fd = None if staging is None else self.directory(staging, create=True)
        write_at(target.dir_fd, target.name, data, temp_fd=temp_fd)
        return os.stat(target.name, dir_fd=target.dir_fd, follow_symlinks=False)

    def unlink(self, relative: str) -> None:
        """Remove the file ``relative`` names; nothing when there is none."""
        target = self.resolve(relative)
        if target.dir_fd is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target.name, dir_fd=target.dir_fd)


_MOST_HELD = 256


def most_held() -> int:
    """How many directories a batch holds open at once: a big repository has more
    than a process may open (1,024 by default), and the store and git need some too.
    Batches go through paths in order, so a directory let go of is seldom needed again."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _MOST_HELD
    return max(8, min(_MOST_HELD, soft // 4))


def open_subdir(dir_fd: int, name: str) -> int | None:
    """Directory ``name`` of ``dir_fd``, opened without following a link; None when it
    is not (or no longer) a directory."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
        raise


def _unstable(relative: str) -> StepFailedError:
    return StepFailedError(
        f"path {relative!r} kept changing while acode resolved it: a directory or link on "
        f"it was replaced {_MAX_RACES} times in a row",
        hint="stop whatever keeps replacing it, then run the step again",
    )


def _not_a_directory(path: Path, found: _Link | _Kind) -> StorageError:
    what = "a symbolic link" if isinstance(found, _Link) else "not a directory"
    return StorageError(
        f"{path} is {what}; acode follows no link in its own directories",
        hint=f"check who made it, then move it out of the way: mv {path} {path}.moved",
    )


def relative_parts(relative: str, *, what: str) -> tuple[str, ...]:
    """Lexically normalised parts of a workspace-relative path, refusing escapes."""
    parts = tuple(relative.split("/"))
    # Already normal (as recorded paths are): a resume checks thousands of them.
    if (
        relative[:1] not in ("", "/", "~")
        and "\0" not in relative
        and "" not in parts
        and "." not in parts
        and ".." not in parts
    ):
        return parts
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


def refuse_protected(relative: str, parts: Sequence[str]) -> None:
    """Refuse a path in acode's own state (``.agent/state``) or in git's metadata."""
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
