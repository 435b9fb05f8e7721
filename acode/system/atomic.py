"""Crash-safe replacement of a file by its name in a directory held open.

A file is never written in place: the new content goes to a temporary file, is fsynced,
and is renamed over the target (``renameat`` between two held directories, so no path is
resolved again at that instant); the directory is then fsynced so that the rename itself
survives a power loss. A crash at any instant leaves the file either wholly old or wholly
new.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

__all__ = ["TEMP_PREFIX", "fsync_dir", "replacing", "write_at"]

TEMP_PREFIX = ".acode-tmp-"
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_at(
    dir_fd: int,
    name: str,
    data: bytes,
    *,
    temp_fd: int | None = None,
    executable: bool | None = None,
    private: bool = False,
) -> None:
    """Replace ``name`` in directory ``dir_fd`` with ``data`` so that a crash leaves
    either the old or the new file.

    The data goes to a temporary file (in ``temp_fd``, by default the same directory), is
    fsynced, renamed over the target between the two held directories, and the directory
    is fsynced so the rename itself survives power loss. An existing file keeps its
    permission bits; ``executable`` sets or clears the execute bits (for whoever may
    read, as git does); ``private`` makes it readable by its owner alone (0600), from the
    temporary file on. A symlink at ``name`` is replaced, not followed. On failure the
    temporary file is removed and the target is as it was. When ``temp_fd`` is on another
    file system, the temporary file is written beside the target instead.
    """
    temp_dir = dir_fd if temp_fd is None else temp_fd
    mode = 0o600 if private else _existing_mode(dir_fd, name)
    fd, temp = _create_temp(temp_dir, 0o600 if private else 0o644)
    try:
        with open(fd, "wb", closefd=True) as handle:
            handle.write(data)
            handle.flush()
            if mode is None and executable is not None:
                mode = stat.S_IMODE(os.fstat(fd).st_mode)
            if mode is not None:
                os.fchmod(fd, _with_exec(mode, executable))
            os.fsync(fd)
        try:
            os.rename(temp, name, src_dir_fd=temp_dir, dst_dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno != errno.EXDEV or temp_dir == dir_fd:
                raise
            os.unlink(temp, dir_fd=temp_dir)
            write_at(dir_fd, name, data, executable=executable, private=private)
            return
    except BaseException:
        # BaseException too: a Ctrl+C mid-write must not leave a stray temp file behind.
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=temp_dir)
        raise
    fsync_dir(dir_fd)


@contextlib.contextmanager
def replacing(dir_fd: int, name: str) -> Iterator[BinaryIO]:
    """A file to write ``name`` in directory ``dir_fd`` through, for content too large to
    hold (an archive): it is a temporary file, readable by its owner alone, that replaces
    ``name`` (fsynced, renamed, the directory fsynced) only when the block ends without
    an error. Otherwise, or if the process is killed, ``name`` is as it was."""
    fd, temp = _create_temp(dir_fd, 0o600)
    try:
        with open(fd, "wb", closefd=True) as handle:
            yield handle
            handle.flush()
            os.fsync(fd)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    fsync_dir(dir_fd)


def _with_exec(mode: int, executable: bool | None) -> int:
    if executable is None:
        return mode
    # Like git: execute permission for whoever may read the file, or for no one.
    return mode | ((mode & 0o444) >> 2) if executable else mode & ~0o111


def _existing_mode(dir_fd: int, name: str) -> int | None:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else None


def _create_temp(dir_fd: int, mode: int) -> tuple[int, str]:
    while True:
        # What secrets.token_hex(8) returns, without loading the random module for it.
        temp = f"{TEMP_PREFIX}{os.urandom(8).hex()}"
        try:
            # 0o644 lets the umask apply, unlike mkstemp's fixed 0o600.
            return os.open(temp, _TEMP_FLAGS, mode, dir_fd=dir_fd), temp
        except FileExistsError:
            continue


def fsync_dir(fd: int) -> None:
    """fsync a held directory, where the file system can."""
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some file systems cannot fsync a directory; the rename is as durable as they allow.
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
