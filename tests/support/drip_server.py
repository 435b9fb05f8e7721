"""A model server that answers one byte at a time, OpenAI-compatible, on 127.0.0.1.

Each byte comes well within any socket time-out, so only a deadline over the whole
answer stops a client from waiting as long as the server likes::

    with DripServer(interval=0.05) as server:
        settings = ModelSettings(base_url=server.base_url, timeout_seconds=1)
        chat(settings, messages)        # ModelBusyError after 1 s, not 30 s later
        server.hung_up.wait(5)          # the client closed the connection

``headers_too=True`` drips the status line and headers as well, not only the body;
``models_at_once=True`` sends the list of models whole (only chat answers drip), so that
a client gets past its availability check; ``tls`` (a server-side SSL context) serves
over HTTPS.
"""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from tests.support.serving import Lifecycle, Serving

__all__ = ["MODEL", "DripServer"]

MODEL = "drip-model"
# Long enough that dripping an answer takes some 600 intervals.
_CONTENT = "slow " * 100
_MODELS = [{"id": f"{MODEL}-{n}", "object": "model"} for n in range(20)] + [{"id": MODEL}]


class DripServer(Lifecycle):
    def __init__(
        self,
        *,
        interval: float = 0.05,
        headers_too: bool = False,
        models_at_once: bool = False,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.interval = interval
        self.headers_too = headers_too
        self.models_at_once = models_at_once
        self.tls = tls
        self.requests: list[str] = []  # "GET /v1/models", in the order they came
        self.hung_up = threading.Event()  # set when a client closes its connection early
        self.closing = threading.Event()
        self._serving: Serving | None = None

    def start(self) -> Self:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        if self.tls is not None:
            server.socket = self.tls.wrap_socket(server.socket, server_side=True)
        self._serving = Serving(server, "drip-model")
        return self

    def stop(self) -> None:
        self.closing.set()  # ends every drip
        if self._serving is not None:
            self._serving.stop()
            self._serving = None

    @property
    def base_url(self) -> str:
        assert self._serving is not None
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self._serving.port}/v1"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: DripServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hangs up mid-drip is what the tests expect


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._drip({"object": "list", "data": _MODELS}, at_once=self.server.owner.models_at_once)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        message = {"role": "assistant", "content": _CONTENT}
        self._drip(
            {
                "id": "chatcmpl-drip",
                "object": "chat.completion",
                "model": MODEL,
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
        )

    def _drip(self, payload: object, *, at_once: bool = False) -> None:
        owner = self.server.owner
        owner.requests.append(f"{self.command} {self.path}")
        body = json.dumps(payload).encode("utf-8")
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode("ascii")
        if at_once:
            self._send(head + body)
            self.close_connection = True
            return
        if not self._send_head(head):
            return
        for index in range(len(body)):
            if owner.closing.wait(owner.interval):
                return
            if not self._send(body[index : index + 1]):
                return
        self.close_connection = True

    def _send_head(self, head: bytes) -> bool:
        owner = self.server.owner
        if not owner.headers_too:
            return self._send(head)
        for index in range(len(head)):
            if owner.closing.wait(owner.interval) or not self._send(head[index : index + 1]):
                return False
        return True

    def _send(self, data: bytes) -> bool:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            self.server.owner.hung_up.set()
            self.close_connection = True
            return False
        return True
