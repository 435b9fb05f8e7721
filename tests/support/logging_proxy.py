"""A reverse proxy on 127.0.0.1 in front of an OpenAI-compatible server that logs every
request it forwards, so a test can see exactly what a client sent to the model.

In a test::

    with LoggingProxy(server.base_url, tmp_path / "requests.jsonl") as proxy:
        settings = ModelSettings(base_url=proxy.base_url, ...)
        ...
        assert [r["path"] for r in proxy.requests()] == ["/v1/models", ...]

As a process (a crash test kills its client, never the proxy)::

    python -m tests.support.logging_proxy --upstream URL --log FILE [--port 0]

prints ``PORT <n>`` as its first line, then serves until SIGTERM or SIGINT.

Each request becomes one JSON line once its answer is known (or the upstream failed)::

    {"n", "method", "path", "request", "request_sha256", "status", "response", "ts", "seconds"}

A test can script the model: ``LoggingProxy(..., rewrite=f)`` sends ``f(request, answer)``
(both parsed JSON) in place of each chat completion's answer, and logs what it sent.

``n`` and ``ts`` are taken when the request arrives, so they order requests by when they
were sent even though lines are written as answers come back. ``request_sha256`` is the
SHA-256 of the body's canonical JSON (sorted keys, no spaces): the hash acode records
for a model call. Only GET and POST under ``/v1`` are forwarded; anything else is a 404.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

from tests.support.serving import Lifecycle, Serving

__all__ = ["LoggingProxy", "canonical_sha256", "main", "read_proxy_log"]

_PREFIX = "/v1"
# A model call on a loaded 2-core machine can take a while; the client decides when to
# give up, not the proxy.
_UPSTREAM_TIMEOUT = 600.0
_FORWARDED_HEADERS = ("Content-Type", "Accept", "Authorization", "User-Agent")


def canonical_sha256(body: object) -> str:
    """SHA-256 of ``body`` as canonical JSON: equal bodies hash equal."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def read_proxy_log(path: Path) -> list[dict[str, Any]]:
    """The requests a (possibly separate) proxy logged in ``path``, in the order they
    arrived; a line being written is not one yet."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines(keepends=True) if line.endswith("\n")]
    entries = [json.loads(line) for line in lines if line.strip()]
    return sorted(entries, key=lambda entry: int(entry["n"]))


def _parsed(raw: bytes) -> Any:
    """The JSON in ``raw``, or None when there is none (an empty or non-JSON body)."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


class _Upstream:
    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"upstream must be an http:// URL, got {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.base_path = parts.path.rstrip("/")

    def send(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, str]:
        """Forward one request; its status, body and content type."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=_UPSTREAM_TIMEOUT)
        try:
            conn.request(method, self.base_path + path, body=body or None, headers=headers)
            reply = conn.getresponse()
            data = reply.read()
            return reply.status, data, reply.getheader("Content-Type", "application/json")
        finally:
            conn.close()


class _Log:
    """The append-only JSON-lines file, shared by the handler threads, and the count of
    requests still waiting for their answer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._changed = threading.Condition()
        self._next = 0
        self._pending = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    def begin(self) -> int:
        """A request arrived: its number."""
        with self._changed:
            self._next += 1
            self._pending += 1
            return self._next

    def finish(self, entry: dict[str, Any] | None) -> None:
        """A request was answered (``entry`` is its line) or given up (None)."""
        with self._changed:
            if entry is not None:
                with self.path.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(entry, sort_keys=True) + "\n")
            self._pending -= 1
            self._changed.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._pending == 0, timeout)


# Given a chat request and the upstream's answer (both parsed), the answer to send.
Rewrite = Callable[[Any, Any], Any]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, upstream: _Upstream, log: _Log, rewrite: Rewrite | None) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.upstream = upstream
        self.log = log
        self.rewrite = rewrite

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client killed mid-request is what the crash tests do; anything else is a bug.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def log_message(self, format: str, *args: Any) -> None:
        """The JSON log is the record; nothing goes to stderr."""

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self.path.startswith(_PREFIX + "/"):
            self._answer(404, b'{"error": "the logging proxy forwards /v1/... only"}', None)
            return
        log = self.server.log
        n, ts = log.begin(), time.time()
        entry: dict[str, Any] | None = None
        try:
            status, data, content_type = self._relay(raw)
            request = _parsed(raw)
            rewrite = self.server.rewrite
            if rewrite is not None and status == 200 and self.path.endswith("/chat/completions"):
                data = json.dumps(rewrite(request, _parsed(data))).encode("utf-8")
            entry = {
                "n": n,
                "method": self.command,
                "path": self.path,
                "request": request,
                "request_sha256": canonical_sha256(request) if request is not None else None,
                "status": status,
                "response": _parsed(data),
                "ts": ts,
                "seconds": round(time.time() - ts, 3),
            }
        finally:
            log.finish(entry)
        self._answer(status, data, content_type)

    def _relay(self, raw: bytes) -> tuple[int, bytes, str]:
        headers = {name: self.headers[name] for name in _FORWARDED_HEADERS if name in self.headers}
        try:
            return self.server.upstream.send(self.command, self.path[len(_PREFIX) :], raw, headers)
        except (OSError, http.client.HTTPException) as exc:
            error = {"error": f"upstream unreachable: {exc}"}
            return 502, json.dumps(error).encode("utf-8"), "application/json"

    def _answer(self, status: int, data: bytes, content_type: str | None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type or "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            # The client was killed while it waited: the request is logged all the same.
            self.close_connection = True


class LoggingProxy(Lifecycle):
    """A logging reverse proxy to ``upstream_base_url`` (such as http://127.0.0.1:8765/v1).

    ``log_path`` defaults to a new temporary file, which is left for the caller.
    ``rewrite`` scripts the model: it may replace each chat answer (logged as sent)."""

    def __init__(
        self,
        upstream_base_url: str,
        log_path: Path | None = None,
        *,
        port: int = 0,
        rewrite: Rewrite | None = None,
    ) -> None:
        if log_path is None:
            handle, name = tempfile.mkstemp(prefix="acode-proxy-", suffix=".jsonl")
            os.close(handle)
            log_path = Path(name)
        self.upstream_base_url = upstream_base_url
        self.log_path = log_path
        self._server = _Server(port, _Upstream(upstream_base_url), _Log(log_path), rewrite)
        self._serving: Serving | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{_PREFIX}"

    def start(self) -> Self:
        self._serving = Serving(self._server, "logging-proxy")
        return self

    def stop(self) -> None:
        if self._serving is not None:
            self._serving.stop()
            self._serving = None

    def wait_idle(self, timeout: float = 600.0) -> bool:
        """Wait until no forwarded request waits for its answer (a killed client's
        request runs on upstream); False if ``timeout`` passed first."""
        return self._server.log.wait_idle(timeout)

    def requests(self) -> list[dict[str, Any]]:
        """Every request logged so far, in the order they arrived."""
        return read_proxy_log(self.log_path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.logging_proxy",
        description="Forward /v1/... to an OpenAI-compatible server, logging every request.",
    )
    parser.add_argument("--upstream", required=True, help="the server's base URL, with /v1")
    parser.add_argument("--log", required=True, type=Path, help="the JSON-lines log file")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    proxy = LoggingProxy(args.upstream, args.log, port=args.port)
    stopped = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopped.set())
    with proxy:
        print(f"PORT {proxy.port}", flush=True)
        stopped.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
