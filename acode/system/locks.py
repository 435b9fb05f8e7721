"""Per-session lock files: at most one process executes a session at a time.

Each session has ``<locks_dir>/<session_id>.lock`` (mode 0600), held with
``flock(LOCK_EX | LOCK_NB)`` for the whole run. The kernel drops a flock when its holder
dies, even by SIGKILL, so a crash never leaves a stale lock behind. The file records who
holds it (JSON: pid, host, since, command) so that a refused acquire can name the holder.

Threat 1 (session hijacking through the lock file) is refused before anything is written:
the locks directory and acode's state directory that holds it are opened without
following a symlink and must be yours and writable by no one else; the lock file is
opened in that held directory, never through a link, and must be a regular file of yours,
mode 0600, with one name (a hard link to another file would have it overwritten). A flock
held while the process the file records no longer holds the file (it is gone, or its pid
now runs another program) is held by a program that is not the acode that took it: the
refusal says so (ACODE-LOCK-003), naming that program.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shlex
import stat
import time
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

from acode.errors import ErrorCode, SessionLockedError, StorageError, UsageError
from acode.security.redaction import redact
from acode.system.private_dirs import open_private_dir
from acode.system.process_table import command_line, holders

__all__ = [
    "LockOwner",
    "SessionLock",
    "acquire",
    "force_unlock",
    "holder",
    "is_locked",
    "lock_path",
    "read_owner",
]

_OPEN_FLAGS = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
_MAX_ATTEMPTS = 10
# A new holder records itself just after it locks: how long a holder that the record does
# not name is given to do so before it is reported as not acode.
_RECORD_GRACE = (0.02, 0.05, 0.1, 0.2)
_SHOWN_COMMAND = 120
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
        return self._fd is not None and _same_file(self._fd, None, self.path)

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
    dir_fd = _open_locks_dir(locks_dir, create=True)
    assert dir_fd is not None  # create=True made it
    try:
        for _ in range(_MAX_ATTEMPTS):
            fd = _open_lock_file(dir_fd, path)
            if fd is None:
                continue  # unlinked between our two opens: start again
            try:
                if not _try_flock(fd, fcntl.LOCK_EX):
                    raise _held_error(fd, path, label or session_id)
                # A force-unlock may have unlinked the file after we opened it: our flock
                # is then on an orphan while a newcomer locks the new file. Only the file
                # the path names counts.
                if not _same_file(fd, dir_fd, path.name):
                    os.close(fd)
                    continue
                # The host name as socket.gethostname() gives it (the kernel's node name),
                # without loading the socket module on every resume.
                owner = LockOwner(
                    pid=os.getpid(), host=os.uname().nodename, since=now_iso, command=command
                )
                _write_owner(fd, path, owner)
            except BaseException:
                os.close(fd)
                raise
            return SessionLock(fd, path, owner)
    finally:
        os.close(dir_fd)
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
    dir_fd = _open_locks_dir(locks_dir, create=False)
    if dir_fd is None:
        return None
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    try:
        return _owner_from_fd(fd)
    finally:
        os.close(fd)


def _open_to_probe(locks_dir: Path, session_id: str) -> int | None:
    """The lock file, opened to read and probe; None when there is none."""
    path = lock_path(locks_dir, session_id)
    dir_fd = _open_locks_dir(locks_dir, create=False)
    if dir_fd is None:
        return None
    try:
        return os.open(path.name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _open_error(dir_fd, path, err) from err
    finally:
        os.close(dir_fd)


def is_locked(locks_dir: Path, session_id: str) -> bool:
    """True when some open file other than this probe holds the lock (another process, or
    another SessionLock of this one). The probe takes a shared lock for an instant, so
    probes never see each other and a holder is not disturbed."""
    fd = _open_to_probe(locks_dir, session_id)
    if fd is None:
        return False
    try:
        if not _try_flock(fd, fcntl.LOCK_SH):
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def holder(locks_dir: Path, session_id: str) -> str | None:
    """Who holds the lock, as a person reads it; None when it is free. A record naming a
    process that no longer holds the file (gone, or its pid reused) names nobody."""
    fd = _open_to_probe(locks_dir, session_id)
    if fd is None:
        return None
    try:
        if _try_flock(fd, fcntl.LOCK_SH):
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        owner = _owner_from_fd(fd)
        foreign = _foreign_holders(fd, lock_path(locks_dir, session_id).name, owner)
        if foreign:
            return f"{_held_by(foreign)}, not the acode that took it"
        return owner.describe() if owner else "a process that has not recorded itself yet"
    finally:
        os.close(fd)


def force_unlock(locks_dir: Path, session_id: str) -> LockOwner | None:
    """Remove the lock file and return the owner it recorded. A live holder keeps its
    flock on the orphaned file, which is why acquire checks the inode it locked."""
    path = lock_path(locks_dir, session_id)
    owner = read_owner(locks_dir, session_id)
    dir_fd = _open_locks_dir(locks_dir, create=False)
    if dir_fd is None:
        return owner
    try:
        os.unlink(path.name, dir_fd=dir_fd)
    except FileNotFoundError:
        return owner
    except OSError as err:
        raise StorageError(
            f"cannot remove lock file {path}: {err.strerror}",
            hint="check the permissions of its directory",
        ) from err
    finally:
        os.close(dir_fd)
    return owner


def _open_locks_dir(locks_dir: Path, *, create: bool) -> int | None:
    """The locks directory, held open once it and the state directory that holds it are
    checked (:func:`_open_private_dir`); None when either is missing and not created."""
    if create:
        # Made private; a name already there (a link, a file) is left for the check.
        with contextlib.suppress(FileExistsError):
            locks_dir.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    state_fd = open_private_dir(locks_dir.parent, None, what="state")
    if state_fd is None:
        return None
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(locks_dir.name, 0o700, dir_fd=state_fd)
        return open_private_dir(locks_dir, state_fd, what="locks")
    finally:
        os.close(state_fd)


def _open_lock_file(dir_fd: int, path: Path) -> int | None:
    """Open (creating if needed) and vet the lock file; None if it vanished meanwhile."""
    try:
        fd = os.open(path.name, _OPEN_FLAGS | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
    except FileExistsError:
        pass
    except OSError as err:
        raise _open_error(dir_fd, path, err) from err
    else:
        os.fchmod(fd, 0o600)  # the umask may have narrowed the mode we asked for
        return fd
    try:
        fd = os.open(path.name, _OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _open_error(dir_fd, path, err) from err
    try:
        _refuse_unsafe(path, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_error(dir_fd: int, path: Path, err: OSError) -> Exception:
    """Explain a failed open: an unsafe file is a lock error, anything else storage."""
    try:
        _refuse_unsafe(path, os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False))
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
    if st.st_nlink > 1:
        # Another name for the same file, maybe outside the workspace: writing the owner
        # record would overwrite that file.
        raise SessionLockedError(
            f"lock file {path} has {st.st_nlink} links: it is also another file; refusing "
            "to write to it",
            hint="check who linked it, then remove this name (the other keeps its content): "
            f"rm {quoted}",
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


def _same_file(fd: int, dir_fd: int | None, name: Path | str) -> bool:
    try:
        named = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _held_error(fd: int, path: Path, session_id: str) -> SessionLockedError:
    """Why the flock on ``fd`` is not ours: the acode the file records holds it
    (ACODE-RESUME-003), or only processes it does not name do (ACODE-LOCK-003)."""
    for pause in (*_RECORD_GRACE, None):
        owner = _owner_from_fd(fd)
        foreign = _foreign_holders(fd, path.name, owner)
        if not foreign:
            return _locked_error(path, session_id, owner)
        if pause is None:
            return _not_acode_error(path, session_id, owner, foreign)
        time.sleep(pause)  # a new holder may be about to record itself
    raise AssertionError("unreachable")


def _foreign_holders(fd: int, name: str, owner: LockOwner | None) -> list[int]:
    """The processes that hold the lock file ``name`` open when the owner it records is not one
    of them; empty when it is, when this process may be the holder (its own other
    SessionLock), or when the system does not tell (another user's processes)."""
    me = os.getpid()
    others = [pid for pid in holders(os.fstat(fd), name) if pid != me]
    if owner is not None and owner.pid in (me, *others):
        return []
    return others


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


def _not_acode_error(
    path: Path, session_id: str, owner: LockOwner | None, pids: list[int]
) -> SessionLockedError:
    held_by = _held_by(pids)
    if owner is None:
        took = "the lock file names no acode that took it"
    else:
        took = f"not the acode that took it ({owner.describe()}), which no longer holds it"
    return SessionLockedError(
        f"session {session_id} is held by {held_by}: {took}; lock file {path}",
        hint=(
            "a process the session started that kept the lock open, or another program: "
            f"if it should not hold it, stop it (kill {' '.join(map(str, pids))}), then run "
            "the command again"
        ),
        code=ErrorCode.LOCK_HELD,
    )


def _held_by(pids: list[int]) -> str:
    return ", ".join(f"pid {pid} ({_shown_command(pid)})" for pid in pids)


def _shown_command(pid: int) -> str:
    # One line, and short: a `python -c` program would fill the screen.
    text = " ".join(command_line(pid).split()) or "command unknown"
    return text if len(text) <= _SHOWN_COMMAND else text[: _SHOWN_COMMAND - 3] + "..."


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
