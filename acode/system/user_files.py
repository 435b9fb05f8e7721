"""Reading a file a person names: a plan, ``.agent/config.yml``, a task file.

Such a path can name anything. A FIFO blocks the reader until some writer comes, which
may be never; ``/dev/zero`` or ``/dev/urandom`` never end and fill the memory. So the
file is opened without waiting (``O_NONBLOCK``: a FIFO opens at once), refused unless
it is a regular file, and read only up to a limit.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["USER_FILE_LIMIT", "UnfitFile", "holds", "read_user_file"]

# Far beyond any plan, settings or task file a person writes.
USER_FILE_LIMIT = 1024 * 1024

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class UnfitFile(OSError):
    """The file exists but is no regular file, or is over the limit; ``strerror`` says
    which, as the OSError a caller already reports would."""


def read_user_file(path: Path, limit: int = USER_FILE_LIMIT) -> bytes:
    """The bytes of the regular file at ``path`` (symlinks followed), at most ``limit``.

    Raises FileNotFoundError and the other OSErrors of opening it, and UnfitFile for
    anything but a regular file and for a file larger than ``limit``.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "no regular file")
            raise UnfitFile(0, f"it is {kind}, not a regular file", str(path))
        if info.st_size > limit:
            raise UnfitFile(0, _too_large(info.st_size, limit), str(path))
        chunks: list[bytes] = []
        size = 0
        # Read to the end rather than st_size bytes: the file may be growing.
        while chunk := os.read(fd, min(limit + 1 - size, 1 << 16) or 1):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise UnfitFile(0, _too_large(size, limit), str(path))
    finally:
        os.close(fd)
    return b"".join(chunks)


def _too_large(size: int, limit: int) -> str:
    return f"it is larger than {_mib(limit)} ({size} bytes or more), the most acode reads"


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):g} MiB" if size >= 1024 * 1024 else f"{size} bytes"


def holds(path: Path, data: bytes) -> bool:
    """Whether the file at ``path`` is a regular file holding exactly ``data``: a file
    acode writes and a person may have replaced (by a FIFO, by anything), read without
    waiting and no further than ``data`` goes."""
    try:
        return read_user_file(path, limit=len(data)) == data
    except OSError:  # missing, no regular file, longer: not what acode wrote
        return False
