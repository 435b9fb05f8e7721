"""A model server that is busy: it takes every connection at once but answers each only
when the earlier request is done, as llama.cpp's server does while it finishes a request
a killed client left. OpenAI-compatible, on 127.0.0.1, serving the model ``MODEL``::

    with BusyModelServer() as server:
        server.busy()                   # from now on, answers wait
        client = subprocess.Popen(...)
        server.done_once_asked(client)  # its request waits, then all answers go out
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from tests.support.serving import Lifecycle, Serving

__all__ = ["MODEL", "BusyModelServer"]

MODEL = "busy-model"


class BusyModelServer(Lifecycle):
    """An OpenAI-compatible server on 127.0.0.1 that, while busy, takes every connection
    at once and answers each only when the earlier request is done."""

    def __init__(self) -> None:
        self.seen: list[str] = []  # "GET /v1/models", in the order they came
        self.idle = threading.Event()
        self.idle.set()
        self._serving: Serving | None = None

    def start(self) -> Self:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        self._serving = Serving(server, "busy-model")
        return self

    def stop(self) -> None:
        self.idle.set()  # wakes the handlers still waiting
        if self._serving is not None:
            self._serving.stop()

    @property
    def base_url(self) -> str:
        assert self._serving is not None
        return f"http://127.0.0.1:{self._serving.port}/v1"

    def busy(self) -> None:
        self.idle.clear()

    def earlier_request_done(self) -> None:
        self.idle.set()

    def done_once_asked(self, client: subprocess.Popen[str], timeout: float = 20.0) -> None:
        """Wait until ``client`` has sent its chat request (or ended), then let the
        earlier request finish, and with it the queue."""
        deadline = time.monotonic() + timeout
        while "POST /v1/chat/completions" not in self.seen and client.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"no chat request reached the busy server in {timeout} s")
            time.sleep(0.02)
        self.earlier_request_done()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: BusyModelServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the availability check hangs up before its answer: expected here


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        message = {"role": "assistant", "content": "Hi."}
        self._answer(
            {
                "id": "chatcmpl-busy",
                "object": "chat.completion",
                "model": MODEL,
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
        )

    def _answer(self, payload: object) -> None:
        owner = self.server.owner
        owner.seen.append(f"{self.command} {self.path}")
        owner.idle.wait(60)
        data = json.dumps(payload).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
