"""Per-session lock files: at most one process executes a session at a time.

Each session has ``<locks_dir>/<session_id>.lock`` (mode 0600), held with
``flock(LOCK_EX | LOCK_NB)`` for the whole run. The kernel drops a flock when its holder
dies, even by SIGKILL, so a crash never leaves a stale lock behind. The file records who
holds it (JSON: pid, host, since, command) so that a refused acquire can name the holder.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shlex
import stat
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

from acode.errors import ErrorCode, SessionLockedError, StorageError, UsageError
from acode.security.redaction import redact

__all__ = [
    "LockOwner",
    "SessionLock",
    "acquire",
    "force_unlock",
    "is_locked",
    "lock_path",
    "read_owner",
]

_OPEN_FLAGS = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
_MAX_ATTEMPTS = 10
_MAX_OWNER_BYTES = 64 * 1024
# A session id becomes a file name: nothing that could climb out of locks_dir.
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class LockOwner(NamedTuple):
    """Who holds (or last held) a session lock."""

    pid: int
    host: str
    since: str
    command: str

    def describe(self) -> str:
        text = f"pid {self.pid} on host {self.host} since {self.since}"
        return f"{text} ({self.command})" if self.command else text

    def to_json(self) -> bytes:
        # The command line holds the task of `acode run "..."`: the file is there for
        # anyone who can read the workspace, so it gets the command as shown.
        command = redact(self.command)
        fields = {"pid": self.pid, "host": self.host, "since": self.since, "command": command}
        return json.dumps(fields, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> LockOwner | None:
        """None for anything that is not a complete owner record (absent, torn, edited)."""
        try:
            fields = json.loads(data)
        except ValueError:
            return None
        if not isinstance(fields, dict):
            return None
        pid, host, since, command = (fields.get(k) for k in ("pid", "host", "since", "command"))
        if type(pid) is not int:  # bool is an int subclass: refuse it too
            return None
        if not (isinstance(host, str) and isinstance(since, str) and isinstance(command, str)):
            return None
        return cls(pid, host, since, command)


class SessionLock:
    """A held session lock. Release it (or leave the ``with`` block) when the run ends."""

    def __init__(self, fd: int, path: Path, owner: LockOwner) -> None:
        self._fd: int | None = fd
        self._pid = os.getpid()
        self.path = path
        self.owner = owner

    @property
    def held(self) -> bool:
        return self._fd is not None

    def owns_path(self) -> bool:
        """True while ``path`` still names the file we locked; False after a force-unlock
        replaced or removed it (we then hold a lock nobody else can see)."""
        return self._fd is not None and _same_file(self._fd, self.path)

    def release(self) -> None:
        """Unlock and close. The file stays: deleting it would race with a new acquire."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        # A forked child shares our open file description: its LOCK_UN would free the
        # parent's lock too, so only the acquiring process unlocks; others just close.
        if os.getpid() == self._pid:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> SessionLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"SessionLock({str(self.path)!r}, held={self.held})"


def lock_path(locks_dir: Path, session_id: str) -> Path:
    if not _SESSION_ID.fullmatch(session_id):
        raise UsageError(
            f"session id {session_id!r} cannot name a lock file",
            hint="pass the session id as acode shows it (letters, digits and dashes)",
        )
    return locks_dir / f"{session_id}.lock"


def acquire(
    locks_dir: Path, session_id: str, *, command: str, now_iso: str, label: str | None = None
) -> SessionLock:
    """Take the session's lock without waiting, or raise SessionLockedError (exit 16).
    ``label`` is how messages name the session (its short id)."""
    path = lock_path(locks_dir, session_id)
    _make_locks_dir(locks_dir)
    for _ in range(_MAX_ATTEMPTS):
        fd = _open_lock_file(path)
        if fd is None:
            continue  # unlinked between our two opens: start again
        try:
            if not _try_flock(fd, fcntl.LOCK_EX):
                raise _locked_error(path, label or session_id, _owner_from_fd(fd))
            # A force-unlock may have unlinked the file after we opened it: our flock is
            # then on an orphan while a newcomer locks the new file. Only the file the
            # path names counts.
            if not _same_file(fd, path):
                os.close(fd)
                continue
            # The host name as socket.gethostname() gives it (the kernel's node name),
            # without loading the socket module on every resume.
            owner = LockOwner(os.getpid(), os.uname().nodename, now_iso, command)
            _write_owner(fd, path, owner)
        except BaseException:
            os.close(fd)
            raise
        return SessionLock(fd, path, owner)
    raise SessionLockedError(
        f"lock file {path} was replaced {_MAX_ATTEMPTS} times while acquiring it",
        hint=(
            "something keeps removing it: stop whatever runs "
            f"`acode session unlock {session_id}`, then try again"
        ),
    )


def read_owner(locks_dir: Path, session_id: str) -> LockOwner | None:
    """The owner recorded in the lock file; None when absent, unreadable or garbled."""
    path = lock_path(locks_dir, session_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return _owner_from_fd(fd)
    finally:
        os.close(fd)


def is_locked(locks_dir: Path, session_id: str) -> bool:
    """True when some open file other than this probe holds the lock (another process, or
    another SessionLock of this one). The probe takes a shared lock for an instant, so
    probes never see each other and a holder is not disturbed."""
    path = lock_path(locks_dir, session_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    except OSError as err:
        raise _open_error(path, err) from err
    try:
        if not _try_flock(fd, fcntl.LOCK_SH):
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def force_unlock(locks_dir: Path, session_id: str) -> LockOwner | None:
    """Remove the lock file and return the owner it recorded. A live holder keeps its
    flock on the orphaned file, which is why acquire checks the inode it locked."""
    path = lock_path(locks_dir, session_id)
    owner = read_owner(locks_dir, session_id)
    try:
        path.unlink()
    except FileNotFoundError:
        return owner
    except OSError as err:
        raise StorageError(
            f"cannot remove lock file {path}: {err.strerror}",
            hint="check the permissions of its directory",
        ) from err
    return owner


def _make_locks_dir(locks_dir: Path) -> None:
    try:
        locks_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise StorageError(
            f"cannot create lock directory {locks_dir}: {err.strerror}",
            hint="check that the path is a writable directory",
        ) from err


def _open_lock_file(path: Path) -> int | None:
    """Open (creating if needed) and vet the lock file; None if it vanished meanwhile."""
    try:
        fd = os.open(path, _OPEN_FLAGS | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError as err:
        raise _open_error(path, err) from err
    else:
        os.fchmod(fd, 0o600)  # the umask may have narrowed the mode we asked for
        return fd
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _open_error(path, err) from err
    try:
        _refuse_unsafe(path, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_error(path: Path, err: OSError) -> Exception:
    """Explain a failed open: an unsafe file is a lock error, anything else storage."""
    try:
        _refuse_unsafe(path, os.lstat(path))
    except SessionLockedError as unsafe:
        return unsafe
    except OSError:
        pass
    return StorageError(
        f"cannot open lock file {path}: {err.strerror or err}",
        hint="check the permissions of the lock directory",
    )


def _refuse_unsafe(path: Path, st: os.stat_result) -> None:
    """Threat 1: a lock file someone else controls could be used to take over a session."""
    quoted = shlex.quote(str(path))
    if stat.S_ISLNK(st.st_mode):
        raise SessionLockedError(
            f"lock file {path} is a symbolic link; refusing to follow it",
            hint=f"check who created it, then remove it: rm {quoted}",
            code=ErrorCode.LOCK_PERMISSIONS,
        )
    if not stat.S_ISREG(st.st_mode):
        raise SessionLockedError(
            f"lock file {path} is not a regular file",
            hint="check who created it, then move it out of the way",
            code=ErrorCode.LOCK_PERMISSIONS,
        )
    # Owner before mode: chmod, the fix for a wrong mode, is not ours to run on it.
    if st.st_uid != os.getuid():
        raise SessionLockedError(
            f"lock file {path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()})",
            hint=f"check who created it; if it should not be there, remove it: rm {quoted}",
            code=ErrorCode.LOCK_OWNER,
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode != 0o600:
        raise SessionLockedError(
            f"lock file {path} has mode {mode:04o}, expected 0600",
            hint=f"check who changed it, then run: chmod 600 {quoted}",
            code=ErrorCode.LOCK_PERMISSIONS,
        )


def _try_flock(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as err:
        if err.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
            return False
        raise
    return True


def _same_file(fd: int, path: Path) -> bool:
    try:
        named = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _locked_error(path: Path, session_id: str, owner: LockOwner | None) -> SessionLockedError:
    # The holder writes its owner record just after locking; we may look in between.
    holder = owner.describe() if owner else "another process (it has not recorded itself yet)"
    return SessionLockedError(
        f"session {session_id} is locked by {holder}; lock file {path}",
        hint=(
            "wait for it to finish, or stop that process; run "
            f"`acode session unlock {session_id}` only if you are sure it is gone"
        ),
    )


def _owner_from_fd(fd: int) -> LockOwner | None:
    try:
        data = os.pread(fd, _MAX_OWNER_BYTES, 0)
    except OSError:
        return None
    return LockOwner.from_json(data)


def _write_owner(fd: int, path: Path, owner: LockOwner) -> None:
    data = owner.to_json()
    try:
        os.ftruncate(fd, 0)
        written = 0
        while written < len(data):
            written += os.pwrite(fd, data[written:], written)
        os.fsync(fd)
    except OSError as err:
        raise StorageError(
            f"cannot record the owner in lock file {path}: {err.strerror}",
            hint="check free disk space and the permissions of the lock directory",
        ) from err
