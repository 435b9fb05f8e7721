"""acode's own directories that guard a session (``.agent/state``, its ``locks``),
opened without following a symlink and refused unless they are private.

Whoever can replace what is in such a directory can replace a session's lock file, and
so take the session over (threat 1, docs/requirements.md): the directory must be a real
directory (not a symlink, checked on the descriptor that is then used), belong to you
and be writable by neither group nor others.
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
from pathlib import Path

from acode.errors import ErrorCode, SessionLockedError, StorageError

__all__ = ["check_state_dir", "open_private_dir"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def check_state_dir(state_dir: Path) -> None:
    """Refuse acode's state directory when it is a symlink, not yours, or writable by
    others, as the locks directory in it is refused: whoever could replace what is in it
    could take over a session."""
    fd = open_private_dir(state_dir, None, what="state")
    if fd is not None:
        os.close(fd)


def open_private_dir(path: Path, parent_fd: int | None, *, what: str) -> int | None:
    """Directory ``path`` (by its name in ``parent_fd`` when given), opened without
    following a symlink, refused unless it is yours and writable by no one else; None
    when it does not exist."""
    name = path if parent_fd is None else path.name
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _dir_error(path, parent_fd, what, err) from err
    try:
        _refuse_unsafe_dir(path, os.fstat(fd), what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _dir_error(path: Path, parent_fd: int | None, what: str, err: OSError) -> Exception:
    quoted = shlex.quote(str(path))
    try:
        target = os.readlink(path if parent_fd is None else path.name, dir_fd=parent_fd)
    except OSError:
        target = None
    if target is not None:
        keep = shlex.quote(str(path.parent / target))
        fix = (
            f"rm {quoted} (acode makes a new one)"
            if what == "locks"
            else f"rm {quoted} && mv {keep} {quoted} (to keep what it points to)"
        )
        return SessionLockedError(
            f"{what} directory {path} is a symbolic link to {target}; acode follows no link there",
            hint=f"check who made it, then: {fix}",
            code=ErrorCode.LOCK_PERMISSIONS,
        )
    if err.errno == errno.ENOTDIR:
        return SessionLockedError(
            f"{what} directory {path} is not a directory",
            hint=f"check who made it, then move it out of the way: mv {quoted} {quoted}.moved",
            code=ErrorCode.LOCK_PERMISSIONS,
        )
    return StorageError(
        f"cannot open {what} directory {path}: {err.strerror or err}",
        hint="check its permissions and those of the directories above it",
    )


def _refuse_unsafe_dir(path: Path, st: os.stat_result, what: str) -> None:
    """Threat 1, for a directory: whoever can write it can replace the lock file in it."""
    if st.st_uid != os.getuid():
        raise SessionLockedError(
            f"{what} directory {path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()})",
            hint="check who made it: acode's state must be yours; run acode as its owner",
            code=ErrorCode.LOCK_OWNER,
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise SessionLockedError(
            f"{what} directory {path} is writable by others (mode {mode:04o}): they could "
            "replace the session's lock",
            hint=f"check who changed it, then run: chmod go-w {shlex.quote(str(path))}",
            code=ErrorCode.LOCK_PERMISSIONS,
        )
