"""Running shell commands for ``run`` steps, with bounded output and no stray processes.

A command runs in a session of its own, so acode can signal every process it started
(grandchildren included) as one process group: on a time-out, on an interrupt, and when
the command returns leaving background jobs behind. A step that is over has no processes
left that could still change the workspace behind the log's back.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from acode.errors import StepFailedError, StorageError
from acode.security.child_env import child_environment
from acode.system.process_table import group_running

__all__ = [
    "TIMEOUT_EXIT_CODE",
    "CommandResult",
    "die_with_parent_hook",
    "run_command",
    "terminate_group",
]

TIMEOUT_EXIT_CODE = 124  # what coreutils' timeout(1) returns: familiar to shell users
_GRACE_SECONDS = 2.0
_DRAIN_SECONDS = 2.0
_KILL_SETTLE_SECONDS = 1.0
_SPAWN_SETTLE_SECONDS = 5.0
_POLL_SECONDS = 0.01
_READ_SIZE = 64 * 1024

_T = TypeVar("_T")


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str
    duration_ms: int
    timed_out: bool
    truncated: bool

    def to_json(self) -> dict[str, object]:
        return {
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "duration_ms": self.duration_ms,
            "timed_out": self.timed_out,
            "truncated": self.truncated,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> CommandResult:
        return cls(
            exit_code=_field(data, "exit_code", int),
            stdout=_field(data, "stdout", str),
            stderr=_field(data, "stderr", str),
            duration_ms=_field(data, "duration_ms", int),
            timed_out=_field(data, "timed_out", bool),
            truncated=_field(data, "truncated", bool),
        )


def _field(data: Mapping[str, object], key: str, kind: type[_T]) -> _T:
    value = data.get(key)
    # bool is an int subclass: a recorded True must not pass for an exit code.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise StorageError(
            f"recorded command result has no valid {key!r} (expected {kind.__name__}, "
            f"got {value!r})",
            hint="the step record is damaged; run `acode doctor` or re-run the step",
        )
    return value


class _Tail:
    """The last ``limit`` bytes of one pipe's output."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buffer = bytearray()
        self.truncated = False

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        excess = len(self._buffer) - self._limit
        if excess > 0:
            del self._buffer[:excess]
            self.truncated = True

    def text(self) -> str:
        data = bytes(self._buffer)
        if self.truncated:
            # The cut may split a UTF-8 sequence: drop its orphaned continuation bytes.
            data = data[_orphan_prefix_length(data) :]
        return data.decode("utf-8", errors="replace")


class _Output:
    """A command's stdout and stderr, read by the thread that waits for its exit: one
    poll on both pipes and on the process's pidfd (Linux 5.3), which becomes readable the
    instant it exits. A reader thread a pipe and Popen.wait with a time-out (which polls,
    sleeping between polls) cost a short command about as much again
    (docs/benchmarks.md, "Figures behind design choices")."""

    def __init__(self, proc: subprocess.Popen[bytes], limit: int) -> None:
        assert proc.stdout is not None
        assert proc.stderr is not None
        self._proc = proc
        self._pipes = (proc.stdout, proc.stderr)
        self.out, self.err = _Tail(limit), _Tail(limit)
        self._tails = {proc.stdout.fileno(): self.out, proc.stderr.fileno(): self.err}
        self._poller = select.poll()
        for fd in self._tails:
            self._poller.register(fd, select.POLLIN)
        self._open = set(self._tails)
        self._pidfd = _pidfd(proc.pid)
        if self._pidfd is not None:
            self._poller.register(self._pidfd, select.POLLIN)

    @property
    def truncated(self) -> bool:
        return self.out.truncated or self.err.truncated

    def wait(self, timeout: float | None) -> bool:
        """Read the output until the process exits (and reap it); True when ``timeout``
        seconds passed first. A signal handler that raises (a pause) ends the wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._pidfd is not None or self._proc.poll() is None:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return True
            if self._pidfd is None and not self._open:
                try:  # no pidfd, no pipe left to wake us: as before pidfds were
                    self._proc.wait(timeout=remaining)
                except subprocess.TimeoutExpired:
                    return True
                break
            if self._pidfd is not None:
                wait_ms = None if remaining is None else math.ceil(remaining * 1000)
            else:  # the pipes wake us for output, not for the exit: look now and then
                wait_ms = math.ceil(min(remaining or _POLL_SECONDS, _POLL_SECONDS) * 1000)
            if self._ready(wait_ms):
                break
        self._proc.wait()
        return False

    def drain(self, seconds: float) -> None:
        """Read what is left, until both pipes reach their end or ``seconds`` pass (a
        process outside the group may hold one open); then close them."""
        deadline = time.monotonic() + seconds
        while self._open:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._ready(math.ceil(remaining * 1000))
        self.close()

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        for pipe in self._pipes:
            pipe.close()

    def _ready(self, wait_ms: int | None) -> bool:
        """Read the pipes that have something; True when the process has exited (its
        pidfd then leaves the poll: it would stay readable)."""
        exited = False
        for fd, _ in self._poller.poll(wait_ms):
            if fd == self._pidfd:
                self._poller.unregister(fd)
                exited = True
            elif fd in self._open:
                chunk = os.read(fd, _READ_SIZE)
                if chunk:
                    self._tails[fd].feed(chunk)
                else:
                    self._poller.unregister(fd)
                    self._open.discard(fd)
        return exited


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux, an old kernel, or a seccomp filter
        return None


def _orphan_prefix_length(data: bytes) -> int:
    count = 0
    while count < min(3, len(data)) and data[count] & 0xC0 == 0x80:
        count += 1
    return count


def run_command(
    command: str,
    *,
    cwd: Path,
    timeout: float | None,
    max_output: int = 64 * 1024,
    env: Mapping[str, str] | None = None,
) -> CommandResult:
    """Run ``command`` with ``/bin/sh -c`` in ``cwd`` and wait for it, in this process's
    environment with ``env`` added and acode's secrets left out (:func:`child_environment`).

    Each of stdout and stderr keeps its last ``max_output`` bytes (``truncated`` says some
    were dropped). On a time-out the process group is terminated and the exit code is 124.
    A death by signal N is reported as 128+N, as shells do. Processes the command leaves
    running in its group are terminated once it returns. Any BaseException while waiting
    (KeyboardInterrupt, PauseRequested) terminates the group and is re-raised.
    """
    started = time.monotonic()
    spawner = _Spawner(command, cwd, env)
    output: _Output | None = None
    # Everything from the spawn on is inside the try: an interrupt at any instant finds the
    # child through the spawner, even before `proc` is assigned.
    try:
        spawner.start()
        proc = spawner.result()
        output = _Output(proc, max_output)
        timed_out = output.wait(timeout)
        if timed_out:
            terminate_group(proc, _GRACE_SECONDS)
    except BaseException:
        if output is not None:
            output.close()
        child = spawner.settle()
        if child is not None:
            terminate_group(child, _GRACE_SECONDS)
        raise
    if not timed_out:
        # Background jobs still in the group would hold our pipes open and go on changing
        # the workspace after the step was recorded as done.
        _terminate_leftovers(proc)
    output.drain(_DRAIN_SECONDS)
    return CommandResult(
        exit_code=TIMEOUT_EXIT_CODE if timed_out else _exit_code(proc),
        stdout=output.out.text(),
        stderr=output.err.text(),
        duration_ms=int((time.monotonic() - started) * 1000),
        timed_out=timed_out,
        truncated=output.truncated,
    )


class _Spawner:
    """Starts the command from a helper thread.

    Python runs signal handlers only in the main thread: a Ctrl+C arriving while Popen is
    between its fork and its return would otherwise leave a child no one knows to kill.
    Whatever the main thread is doing when interrupted, :meth:`settle` finds the child.
    """

    def __init__(self, command: str, cwd: Path, env: Mapping[str, str] | None) -> None:
        self._command = command
        self._cwd = cwd
        self._env = child_environment(env)
        self._outcome: list[subprocess.Popen[bytes] | Exception] = []
        # An Event, not Thread.join: an interrupted join can mark a running thread as
        # finished (CPython 3.11), and a second join would then not wait.
        self._done = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, name="acode-spawn").start()

    def _run(self) -> None:
        try:
            self._outcome.append(
                subprocess.Popen(
                    ["/bin/sh", "-c", self._command],
                    cwd=self._cwd,
                    env=self._env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            )
        except Exception as exc:  # handed to the main thread, which raises it
            self._outcome.append(exc)
        finally:
            self._done.set()

    def result(self) -> subprocess.Popen[bytes]:
        self._done.wait()
        outcome = self._outcome[0]
        if isinstance(outcome, OSError | ValueError):
            raise StepFailedError(
                f"cannot start command {self._command!r} in {self._cwd}: {outcome}",
                hint="check that the workspace directory exists and /bin/sh is available",
            ) from outcome
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def settle(self) -> subprocess.Popen[bytes] | None:
        """The child, once the spawn has finished; None if none was made.

        Bounded: if the interrupt landed inside Thread.start before the thread existed,
        nothing will ever be spawned and there is nothing to wait for.
        """
        if not self._done.wait(_SPAWN_SETTLE_SECONDS) or not self._outcome:
            return None
        outcome = self._outcome[0]
        return outcome if isinstance(outcome, subprocess.Popen) else None


def _terminate_leftovers(proc: subprocess.Popen[bytes]) -> None:
    if _group_alive(proc.pid):
        terminate_group(proc, _GRACE_SECONDS)


def _exit_code(proc: subprocess.Popen[bytes]) -> int:
    code = proc.returncode
    return 128 - code if code < 0 else code


def terminate_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group led by ``proc``, wait up to ``grace`` seconds for all of
    it to exit, then SIGKILL whatever is left and reap ``proc``.

    ``proc`` must have been started with ``start_new_session=True``: its pid is the group id.
    """
    group = proc.pid
    gone = False
    try:
        _signal_group(group, signal.SIGTERM)
        gone = _wait_group_gone(proc, grace)
    finally:
        # In a finally: a second Ctrl+C during the grace period must still kill the group.
        if not gone:
            _signal_group(group, signal.SIGKILL)
            # SIGKILL is delivered asynchronously: wait (briefly) until it has taken effect.
            _wait_group_gone(proc, _KILL_SETTLE_SECONDS)
        proc.wait()


def _wait_group_gone(proc: subprocess.Popen[bytes], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        proc.poll()  # reap the leader, or it stays in the group as a zombie
        if not _group_alive(proc.pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_SECONDS)


def _signal_group(group: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signum)


def _group_alive(group: int) -> bool:
    """True while a process of the group is running (zombies do not count)."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # a member changed its uid: it exists, though we may not signal it
    # killpg(0) also succeeds for zombies: ask whether a member still runs.
    return group_running(group)


def die_with_parent_hook() -> Callable[[], None] | None:
    """What the child runs before exec so that it gets SIGTERM when its parent dies
    (Linux's PR_SET_PDEATHSIG, kept across exec). Resolved here, in the parent: the
    child of a threaded process should do as little as possible before exec."""
    if sys.platform != "linux":
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return hook
