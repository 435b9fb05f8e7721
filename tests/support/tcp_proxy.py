"""A TCP proxy on 127.0.0.1 in front of PostgreSQL (a Unix socket or host:port) that a
test can turn into a bad network: ``pass``, ``blackhole`` (accepts, forwards nothing,
never answers), ``reset`` (every connection dropped with a TCP RST), ``down()`` (nothing
listens: connection refused), and one-shot cuts at the N-th COMMIT a client sends,
before it reaches the server or after the server committed it.

asyncio in a daemon thread; the test thread steers it through thread-safe calls.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

__all__ = ["COMMIT", "Proxy"]

# A simple-protocol query message "COMMIT": how psycopg ends a transaction block.
COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"
Mode = Literal["pass", "blackhole", "reset"]
Then = Literal["reset", "hold"]
T = TypeVar("T")


@dataclass
class _Cut:
    pattern: bytes
    remaining: int
    after: bool  # forward the pattern (the server commits) and lose the reply
    then: Then  # reset the client, or hold it: it waits for an answer that never comes
    fired: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter | None = None
    mute: bool = False  # forwards nothing more, in either direction
    lose_reply: _Cut | None = None  # a COMMIT went through: lose its answer


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (linger 0), not a polite FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.fileno() >= 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Proxy:
    def __init__(self, target: Path | tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.mode: Mode = "pass"
        self._cut: _Cut | None = None
        self._links: list[_Link] = []
        self._server: asyncio.Server | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    # -- steering, from the test's thread ------------------------------------------

    def start(self) -> Proxy:
        self._thread.start()
        self.up()
        return self

    def up(self) -> None:
        self._call(self._listen())

    def down(self) -> None:
        """Stop listening (connection refused) and drop every connection."""
        self._call(self._stop_listening())
        self.set_mode("reset")
        self.mode = "pass"

    def set_mode(self, mode: Mode) -> None:
        self._call(self._set_mode(mode))

    def cut_at_commit(self, nth: int = 1, *, after: bool, then: Then = "reset") -> threading.Event:
        """At the ``nth`` COMMIT from now: withhold it (``after`` False: the server rolls
        the transaction back) or let it through and lose the reply (``after`` True: the
        server committed, the client never hears it). Returns an Event set when done."""
        cut = _Cut(COMMIT, nth, after, then)
        self._call(self._set_cut(cut))
        return cut.fired

    def clear_cut(self) -> None:
        """Forget a cut that has not happened."""
        self._call(self._set_cut(None))

    def close(self) -> None:
        self._call(self._stop_listening())
        self._call(self._set_mode("reset"))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(5)

    # -- the loop ------------------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _set_mode(self, mode: Mode) -> None:
        self.mode = mode
        if mode == "reset":
            for link in list(self._links):
                self._drop(link)
        elif mode == "blackhole":
            for link in self._links:
                link.mute = True

    async def _set_cut(self, cut: _Cut | None) -> None:
        self._cut = cut

    def _drop(self, link: _Link) -> None:
        link.mute = True
        _abort(link.client)
        if link.server is not None:
            link.server.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(writer)
        if self.mode == "reset":
            _abort(writer)
            return
        self._links.append(link)
        if self.mode == "blackhole":
            link.mute = True
            await self._drain(reader)
            self._links.remove(link)
            return
        if isinstance(self.target, Path):
            up_reader, link.server = await asyncio.open_unix_connection(self.target)
        else:
            up_reader, link.server = await asyncio.open_connection(*self.target)
        await asyncio.gather(
            self._upstream(link, reader), self._downstream(link, up_reader), return_exceptions=True
        )
        writer.close()
        link.server.close()
        self._links.remove(link)

    async def _drain(self, reader: asyncio.StreamReader) -> None:
        while await reader.read(65536):
            pass

    async def _upstream(self, link: _Link, reader: asyncio.StreamReader) -> None:
        assert link.server is not None
        while data := await reader.read(65536):
            if link.mute:
                continue
            cut = self._cut
            at = data.find(cut.pattern) if cut is not None else -1
            if cut is not None and at >= 0:
                cut.remaining -= 1
                if cut.remaining == 0:
                    self._cut = None
                    await self._fire(link, cut, data, at)
                    continue
            link.server.write(data)
            await link.server.drain()
        link.server.close()

    async def _fire(self, link: _Link, cut: _Cut, data: bytes, at: int) -> None:
        assert link.server is not None
        if cut.after:
            link.lose_reply = cut
            link.server.write(data)
            await link.server.drain()
            return  # the reply decides, downstream
        link.server.write(data[:at])
        link.server.close()  # the server sees the client vanish mid-transaction
        link.mute = True
        if cut.then == "reset":
            _abort(link.client)
        cut.fired.set()

    async def _downstream(self, link: _Link, reader: asyncio.StreamReader) -> None:
        while data := await reader.read(65536):
            if link.mute:
                continue
            cut = link.lose_reply
            if cut is not None:
                link.mute = True  # the COMMIT's answer: it committed, and nobody hears it
                if cut.then == "reset":
                    _abort(link.client)
                cut.fired.set()
                continue
            link.client.write(data)
            await link.client.drain()
        if not link.mute:
            link.client.close()
