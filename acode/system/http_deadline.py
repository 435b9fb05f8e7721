"""One HTTP exchange with a deadline over the whole of it.

A socket time-out bounds each wait for the next bytes, not the exchange: a server that
sends one byte a second never trips it and holds the caller for as long as it likes.
``Deadline`` shuts down the socket of every connection the exchange opens when its time
is up; that ends whatever read or write waits on it, and ``Deadline.expired`` tells the
caller why its exchange failed. A name lookup that hangs is not covered (the system
resolver cannot be interrupted); the socket time-out bounds the connection itself.

Imported only by code that talks HTTP, so that a command that never does pays nothing.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import urllib.request
from types import TracebackType
from typing import Any, Self

__all__ = ["AnswerTooLarge", "Deadline", "fetch"]


class Deadline:
    """``with Deadline(seconds) as deadline:`` arms it; leaving the block disarms it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> Self:
        self._timer.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._timer.cancel()

    @property
    def connected(self) -> bool:
        """Whether the exchange got as far as a connection: a time-out before that is
        a server that cannot be reached, after it one that does not answer."""
        with self._lock:
            return bool(self._sockets)

    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` down when the time is up (at once if it is up already)."""
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    # A socket closed already ended its exchange. The plain socket's shutdown, also for a
    # TLS socket: SSLSocket.shutdown would also unwrap TLS under the reading thread's feet.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def fetch(
    request: urllib.request.Request,
    *,
    timeout: float,
    deadline: Deadline,
    direct: bool,
    limit: int,
) -> bytes:
    """The body of the answer to ``request``, read within ``deadline``; ``timeout`` bounds
    each wait for bytes. ``direct`` ignores any proxy of the environment. Raises
    urllib.error.HTTPError for an error status (its body still to read, within the
    deadline), OSError or http.client.HTTPException when the exchange fails, and
    ``AnswerTooLarge`` for a body over ``limit`` bytes."""
    handlers: list[urllib.request.BaseHandler] = [
        _HTTPHandler(deadline),
        _HTTPSHandler(deadline),
    ]
    if direct:
        handlers.append(urllib.request.ProxyHandler({}))
    opener = urllib.request.build_opener(*handlers)
    with opener.open(request, timeout=timeout) as response:
        body: bytes = response.read(limit + 1)
    if len(body) > limit:
        raise AnswerTooLarge(limit)
    return body


class AnswerTooLarge(ValueError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the answer is larger than {limit // (1024 * 1024)} MiB")


class _Connection(http.client.HTTPConnection):
    def __init__(self, *args: Any, deadline: Deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def connect(self) -> None:
        super().connect()
        self._deadline.watch(self.sock)


class _TLSConnection(_Connection, http.client.HTTPSConnection):
    """The deadline watches the TLS socket: HTTPSConnection.connect wraps it first."""


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_Connection, req, deadline=self._deadline)  # type: ignore[arg-type]


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        # No context: HTTPSConnection makes the default one, as urllib's own handler does.
        return self.do_open(_TLSConnection, req, deadline=self._deadline)  # type: ignore[arg-type]
