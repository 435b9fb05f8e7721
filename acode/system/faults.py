"""Which failures are the environment's, not a step's: a full disk, a read-only file
system, a name the file system cannot hold. A step that meets one is not recorded as
failed: the session pauses, and resume runs the step again once the cause is gone
(docs/architecture.md, "When a step fails")."""

from __future__ import annotations

import errno

from acode.errors import EnvironmentFaultError, ErrorCode

__all__ = ["environment_fault"]

# errno -> (code, what it means, what to do).
_FAULTS: dict[int, tuple[ErrorCode, str, str]] = {
    errno.ENOSPC: (ErrorCode.DISK_FULL, "the disk is full", "free some space"),
    errno.EDQUOT: (ErrorCode.DISK_FULL, "the disk quota is used up", "free some space"),
    errno.EFBIG: (
        ErrorCode.DISK_FULL,
        "the file would grow past the size this process may write",
        "raise the limit (`ulimit -f`)",
    ),
    errno.EROFS: (
        ErrorCode.READ_ONLY,
        "the file system is read-only",
        "remount it writable",
    ),
    errno.ENAMETOOLONG: (
        ErrorCode.NAME_TOO_LONG,
        "a name is too long for this file system",
        "move the workspace to a file system that takes it",
    ),
}


def environment_fault(exc: BaseException, what: str) -> EnvironmentFaultError | None:
    """``exc`` as the environment's fault, met while doing ``what`` (such as "step 'w'");
    None when it is not one."""
    if not isinstance(exc, OSError) or exc.errno not in _FAULTS:
        return None
    code, meaning, remedy = _FAULTS[exc.errno]
    where = f" ({exc.filename})" if exc.filename else ""
    return EnvironmentFaultError(
        f"{what} could not finish: {meaning}{where}",
        hint=f"{remedy}, then continue with `acode resume`: the step runs again",
        code=code,
    )
