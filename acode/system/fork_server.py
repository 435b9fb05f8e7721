"""A fork server: one single-threaded process, started once, with the modules its children
need already imported, that forks a child per request instead of starting an interpreter
(gunicorn's preload, multiprocessing's forkserver).

A request is a command line, a working directory, an environment and three descriptors
(standard input, output and error), sent over a Unix socket with ``SCM_RIGHTS``. The
child is each request's own process: a session of its own (``setsid``, so one ``killpg``
reaches what it starts), its own descriptors, gone with the server on Linux
(``PR_SET_PDEATHSIG``). The server answers on a socket of the request's own: the child's
pid at once, its exit status (as ``Popen.returncode``: ``-N`` for signal N) when it ends.
The server ends when the client's end of its control socket closes (the client exited or
was killed), and its children with it.

The client (:class:`ForkServer`) starts the server when first asked, and again when it
finds it dead; a child whose server died before telling its status raises
:class:`ForkServerGone` from :meth:`Spawned.wait`.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ForkServer", "ForkServerGone", "Spawned", "serve"]

# A request's command line and environment, as one message: far more than any environment.
_MESSAGE_LIMIT = 1 << 20
_STDIO = 3  # standard input, output and error; the reply socket comes after them


class ForkServerGone(OSError):
    """The fork server ended before it said how a child ended (or before it started it)."""


class Spawned:
    """A child of the fork server, as the client sees it: its pid, and its exit status once
    the server has told it (``poll``, ``wait``), from any thread."""

    def __init__(self, pid: int, reply: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._reply = reply
        self._gone = False
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        """Its exit status, None while it runs (or when its server died before saying)."""
        return self._read(block=False)

    def wait(self) -> int:
        code = self._read(block=True)
        assert code is not None
        return code

    def _read(self, block: bool) -> int | None:
        while True:
            with self._lock:
                if self.returncode is None and not self._gone:
                    try:
                        message = self._reply.recv(64, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        message = None
                    if message == b"":
                        self._gone = True
                    elif message is not None:
                        self.returncode = int(message)
                if self.returncode is not None or self._gone:
                    if block:
                        # Closed by the waiting thread alone, the one that selects on it.
                        self._reply.close()
                        if self.returncode is None:
                            raise ForkServerGone(f"the fork server ended before {self.pid} did")
                    return self.returncode
            if not block:
                return None
            select.select([self._reply], [], [])


class ForkServer:
    """The client of one fork server process, started by ``command`` (which must call
    :func:`serve` with the descriptor number given as its last argument), with ``env``;
    ``on_start(pid)`` is told of each server started, ``on_death(pid, status)`` once of
    each found dead while this client was open."""

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        on_start: Callable[[int], None] | None = None,
        on_death: Callable[[int, int | None], None] | None = None,
    ) -> None:
        self._command = list(command)
        self._env = dict(env)
        self._on_start = on_start
        self._on_death = on_death
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def spawn(
        self,
        argv: Sequence[str],
        cwd: Path,
        env: Mapping[str, str],
        stdio: tuple[int, int, int],
    ) -> Spawned:
        """Fork a child running ``argv`` in ``cwd`` with ``env`` and the descriptors
        ``stdio`` as its standard input, output and error (the caller keeps and closes
        its own)."""
        request = json.dumps({"argv": list(argv), "cwd": str(cwd), "env": dict(env)}).encode()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with self._lock:
                control = self._running()
                try:
                    socket.send_fds(control, [request], [*stdio, theirs.fileno()])
                except OSError:  # it died since it was last seen: once more, with a new one
                    if self._proc is not None:
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            self._proc.wait(1)  # its socket closes a moment before it ends
                    control = self._running()
                    socket.send_fds(control, [request], [*stdio, theirs.fileno()])
        finally:
            theirs.close()
        answer = mine.recv(64)
        if not answer:
            mine.close()
            raise ForkServerGone(f"the fork server ended before it started {argv[:1]}")
        return Spawned(int(answer), mine)

    def _running(self) -> socket.socket:
        """The control socket of a live server: this one, else a new one."""
        if self._closed:
            raise ForkServerGone("the fork server was closed")
        if self._proc is not None and self._proc.poll() is None and self._control is not None:
            return self._control
        self._forget_dead()
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [*self._command, str(theirs.fileno())],
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                # Neither a terminal's Ctrl+C nor a signal to the client's group reaches
                # it: the client decides, and its children are stopped one by one.
                start_new_session=True,
            )
        finally:
            theirs.close()
        if self._on_start is not None:
            self._on_start(self._proc.pid)
        return self._control

    def start(self) -> None:
        """Start the server now rather than at the first :meth:`spawn`."""
        with self._lock:
            self._running()

    def check(self) -> None:
        """Tell ``on_death`` now if the server has died (a child's :class:`ForkServerGone`
        says it may have), rather than at the next :meth:`spawn`."""
        with self._lock:
            if self._proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(1)
                if self._proc.poll() is not None:
                    self._forget_dead()

    def _forget_dead(self) -> None:
        if self._proc is not None and self._on_death is not None:
            self._on_death(self._proc.pid, self._proc.returncode)
        self._proc = None
        if self._control is not None:
            self._control.close()
            self._control = None

    def close(self) -> None:
        """End the server (its children, if any are left, get SIGTERM)."""
        with self._lock:
            self._closed = True
            if self._control is not None:
                self._control.close()
            if self._proc is not None:
                self._proc.wait()


def serve(control_fd: int) -> list[str]:
    """The server's loop, on the control socket ``control_fd``; returns only in a child,
    with its command line, once its descriptors, directory and environment are its
    request's. The server itself exits (status 0) when the control socket closes."""
    control = socket.socket(fileno=control_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    replies: dict[int, socket.socket] = {}
    orphaned = _orphan_signal()
    while True:
        ready, _, _ = select.select([control_fd, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(replies)
        if control_fd not in ready:
            continue
        message, fds, flags, _ = socket.recv_fds(control, _MESSAGE_LIMIT, _STDIO + 1)
        if not message:
            sys.exit(0)
        try:
            if len(fds) != _STDIO + 1 or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                raise ValueError("a request cut short")
            request = json.loads(message)
            pid = os.fork()
        except (ValueError, OSError):
            # Refused (its reply socket closes unanswered): the server and the children
            # it runs go on.
            for fd in fds:
                os.close(fd)
            continue
        if pid == 0:
            for reply in replies.values():
                reply.close()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (wake_r, wake_w, fds[_STDIO]):
                os.close(fd)
            control.close()
            _become(request, fds[:_STDIO], orphaned)
            return list(request["argv"])
        for fd in fds[:_STDIO]:
            os.close(fd)
        reply = socket.socket(fileno=fds[_STDIO])
        with contextlib.suppress(OSError):  # the client gave up on it: it is reaped all the same
            reply.send(str(pid).encode())
        replies[pid] = reply


def _reap(replies: dict[int, socket.socket]) -> None:
    """Tell each ended child's status on its reply socket."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        reply = replies.pop(pid, None)
        if reply is not None:
            with contextlib.suppress(OSError):
                reply.send(str(os.waitstatus_to_exitcode(status)).encode())
            reply.close()


def _become(request: dict[str, Any], stdio: list[int], orphaned: Callable[[], None]) -> None:
    """In the child: a session of its own that ends with the server, the request's
    descriptors, directory and environment."""
    os.setsid()
    parent = os.getppid()
    orphaned()
    if os.getppid() != parent:  # the server died before that: nothing would stop this child
        os._exit(1)
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
        os.close(fd)
    try:
        os.chdir(request["cwd"])
    except OSError as exc:
        os.write(2, f"error cannot enter {request['cwd']}: {exc.strerror}\n".encode())
        os._exit(1)
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _orphan_signal() -> Callable[[], None]:
    """What a child calls to get SIGTERM when the server dies (Linux's PR_SET_PDEATHSIG),
    resolved once in the server rather than in each child."""
    from acode.system.process import die_with_parent_hook

    return die_with_parent_hook() or (lambda: None)
