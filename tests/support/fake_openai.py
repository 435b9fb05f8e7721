"""A stand-in for a remote OpenAI-compatible model service, speaking real HTTP on 127.0.0.1.

In a test::

    with FakeOpenAI() as fake:
        fake.script(["hello", {"tool_calls": [{"name": "read", "arguments": {"path": "a"}}]}])
        settings = ModelSettings(base_url=fake.base_url)
        ...
        assert len(fake.chat_requests) == 2

As a process (crash tests kill the client and count the requests in the log)::

    python -m tests.support.fake_openai --port 0 --log FILE [--models a,b] [--script FILE]

prints ``PORT <n>`` as its first line, then serves until SIGTERM or SIGINT.

A scripted reply is one of:
  - ``"text"``: the assistant's content;
  - ``{"content": ..., "tool_calls": [...], "finish_reason": ..., "usage": {...}}``: any of
    these keys; a tool call may be the short ``{"name": n, "arguments": {...}}``;
  - a fault: ``{"status": 500, "body": "..."}`` or ``{"malformed": True}``; a status may
    come with ``"headers": {"Retry-After": "1"}``;
  - ``{"raw": "..."}``: that text as the body of a 200 answer, as it is;
  - ``{"delay": seconds, ...}``: wait, then answer with the rest (or the default answer).
When the script is empty, the reply is ``"echo: <first 60 chars of the last user message>"``.

A conversation that a killed client sends again must get the same answers, whatever was
sent before: ``fake.converse(rules)`` (or ``--script FILE`` holding ``{"rules": [...]}``)
answers by the request itself. A rule ``{"match": text, "tool": name, "replies": [...]}``
applies when ``text`` is in the request's system and user messages and (if given) a tool
of that name is offered; its reply is ``replies[n]``, n being the number of assistant
messages in the request (past the end: the default answer). The first rule that applies
wins; a queued ``script`` reply goes first.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

from tests.support.serving import Lifecycle, Serving

__all__ = ["FakeOpenAI", "Reply", "default_content", "main", "read_request_log"]

Reply = str | dict[str, Any]

_REPLY_KEYS = frozenset(
    {
        "content",
        "tool_calls",
        "finish_reason",
        "usage",
        "status",
        "body",
        "headers",
        "malformed",
        "raw",
        "delay",
    }
)


def default_content(messages: object) -> str:
    """The deterministic answer to an unscripted request."""
    text = ""
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                text = _text_of(message.get("content"))
                break
    return f"echo: {text[:60]}"


def read_request_log(path: Path) -> list[dict[str, Any]]:
    """The requests a (possibly killed) fake server recorded in its ``--log`` file."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # the multi-part form: [{"type": "text", "text": ...}]
        return " ".join(
            part["text"] for part in content if isinstance(part, dict) and "text" in part
        )
    return ""


def _check_reply(reply: Reply) -> None:
    if isinstance(reply, str):
        return
    if not isinstance(reply, dict) or not set(reply) <= _REPLY_KEYS:
        raise ValueError(f"not a scripted reply: {reply!r}; keys: {sorted(_REPLY_KEYS)}")


def _tool_call(index: int, call: dict[str, Any]) -> dict[str, Any]:
    if "function" in call:
        return call
    arguments = call.get("arguments", {})
    return {
        "id": call.get("id", f"call_{index}"),
        "type": "function",
        "function": {
            "name": call["name"],
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


class FakeOpenAI(Lifecycle):
    """An OpenAI-compatible HTTP server in a daemon thread, scripted by the test."""

    def __init__(
        self,
        *,
        models: Sequence[str] = ("fake-model",),
        log_path: Path | None = None,
        port: int = 0,
    ) -> None:
        self.models = list(models)
        self.log_path = log_path
        self._port = port
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._script: deque[Reply] = deque()
        self._rules: list[dict[str, Any]] = []
        self._closing = threading.Event()
        self._serving: Serving | None = None
        self._completions = 0

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> Self:
        self._serving = Serving(_Server(("127.0.0.1", self._port), _Handler, self), "fake-openai")
        return self

    def stop(self) -> None:
        if self._serving is not None:
            self._closing.set()  # wakes handlers sleeping on a scripted delay
            self._serving.stop()
            self._serving = None

    # -- what tests use ----------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._serving is None:
            raise RuntimeError("FakeOpenAI is not started")
        return self._serving.port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request so far: ``{"method", "path", "headers", "body"}`` (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    def script(self, responses: Iterable[Reply]) -> None:
        """Queue replies for the next chat completion requests, in order."""
        replies = list(responses)
        for reply in replies:
            _check_reply(reply)
        with self._lock:
            self._script.extend(replies)

    def unscript(self) -> None:
        """Forget the queued replies no request has taken yet."""
        with self._lock:
            self._script.clear()

    def converse(self, rules: Iterable[dict[str, Any]]) -> None:
        """Answer by the conversation (see the module's docstring)."""
        checked = list(rules)
        for rule in checked:
            if not set(rule) <= {"match", "tool", "replies"} or "replies" not in rule:
                raise ValueError(f"not a rule: {rule!r}")
            for reply in rule["replies"]:
                _check_reply(reply)
        with self._lock:
            self._rules = checked

    # -- used by the handler -----------------------------------------------------------

    def _record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._requests.append(entry)
            if self.log_path is not None:
                # Appended and flushed at once, before answering: the count survives a
                # client killed while waiting.
                with self.log_path.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(entry, sort_keys=True) + "\n")

    def _next_reply(self, body: dict[str, Any]) -> tuple[Reply | None, int]:
        with self._lock:
            self._completions += 1
            if self._script:
                return self._script.popleft(), self._completions
            return _by_rules(self._rules, body), self._completions


def _by_rules(rules: Sequence[dict[str, Any]], body: dict[str, Any]) -> Reply | None:
    messages = [m for m in body["messages"] if isinstance(m, dict)]
    said = " ".join(
        _text_of(m.get("content")) for m in messages if m.get("role") in ("system", "user")
    )
    offered = {
        tool.get("function", {}).get("name")
        for tool in body.get("tools") or []
        if isinstance(tool, dict)
    }
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    for rule in rules:
        if rule.get("match", "") not in said:
            continue
        if rule.get("tool") is not None and rule["tool"] not in offered:
            continue
        replies: list[Reply] = rule["replies"]
        return replies[turn] if turn < len(replies) else None
    return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a handler stuck on a slow client must not block stop()

    def __init__(self, address: tuple[str, int], handler: type[_Handler], fake: FakeOpenAI) -> None:
        super().__init__(address, handler)
        self.fake = fake

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is expected here; anything else is a bug.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read .requests; stderr stays quiet

    def do_GET(self) -> None:
        self._record(None)
        if self.path.rstrip("/") == "/v1/models":
            models = [
                {"id": m, "object": "model", "created": 0, "owned_by": "fake"}
                for m in self.server.fake.models
            ]
            self._send_json(200, {"object": "list", "data": models})
        else:
            self._send_error(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            self._record(raw.decode("utf-8", "replace"))
            self._send_error(400, "the request body is not JSON")
            return
        self._record(body)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_error(404, f"no route POST {self.path}")
        elif not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            self._send_error(400, "a chat completion needs a 'messages' list")
        else:
            reply, number = self.server.fake._next_reply(body)
            self._answer(body, reply, number)

    def _record(self, body: object) -> None:
        self.server.fake._record(
            {
                "method": self.command,
                "path": self.path,
                "headers": {name.lower(): value for name, value in self.headers.items()},
                "body": body,
            }
        )

    def _answer(self, body: dict[str, Any], reply: Reply | None, number: int) -> None:
        spec: dict[str, Any] = {"content": reply} if isinstance(reply, str) else dict(reply or {})
        delay = spec.pop("delay", 0)
        if delay and self.server.fake._closing.wait(delay):
            self.close_connection = True  # the server is stopping: hang up unanswered
            return
        if "status" in spec:
            self._send_error(
                spec["status"], spec.get("body", "scripted failure"), spec.get("headers", {})
            )
        elif spec.get("malformed"):
            self._send_raw(200, b"{this is not json", "application/json")
        elif "raw" in spec:
            self._send_raw(200, spec["raw"].encode("utf-8"), "application/json")
        else:
            self._send_json(200, self._completion(body, spec, number))

    def _completion(self, body: dict[str, Any], spec: dict[str, Any], number: int) -> Any:
        calls = [_tool_call(i, c) for i, c in enumerate(spec.get("tool_calls", []))]
        content = spec.get("content")
        if content is None and not calls:
            content = default_content(body["messages"])
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        prompt_tokens = sum(len(_text_of(m.get("content")).split()) for m in body["messages"])
        completion_tokens = len((content or "").split())
        return {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "fake-model"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": spec.get("finish_reason", "tool_calls" if calls else "stop"),
                }
            ],
            "usage": spec.get(
                "usage",
                {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            ),
        }

    def _send_error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        error = {"error": {"message": message, "type": "fake_error", "code": status}}
        self._send_raw(status, json.dumps(error).encode("utf-8"), "application/json", headers)

    def _send_json(self, status: int, payload: object) -> None:
        self._send_raw(status, json.dumps(payload).encode("utf-8"), "application/json")

    def _send_raw(
        self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.fake_openai")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", type=Path, default=None, help="append each request here")
    parser.add_argument("--models", default="fake-model", help="comma-separated model ids")
    parser.add_argument("--script", type=Path, default=None, help="a JSON list of replies")
    args = parser.parse_args(argv)

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    models = [m for m in args.models.split(",") if m]
    with FakeOpenAI(models=models, log_path=args.log, port=args.port) as fake:
        if args.script is not None:
            script = json.loads(args.script.read_text(encoding="utf-8"))
            if isinstance(script, dict):
                fake.converse(script["rules"])
            else:
                fake.script(script)
        print(f"PORT {fake.port}", flush=True)
        while not stop.wait(0.2):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
