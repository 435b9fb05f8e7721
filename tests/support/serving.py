"""What the test servers share: an HTTP server answering from a daemon thread, and the
start/stop lifecycle of a context manager."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer
from types import TracebackType
from typing import Self

__all__ = ["Lifecycle", "Serving"]


class Serving:
    """``server`` answering from a daemon thread named ``name`` until ``stop()``."""

    def __init__(self, server: ThreadingHTTPServer, name: str) -> None:
        self.server = server
        # A short poll keeps stop() fast: shutdown() waits for the loop to notice.
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.02,), name=name, daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


class Lifecycle:
    """``with Server() as s:`` starts it and stops it, whatever happens in the block."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
