"""One local model server that the real engine CLIs talk to offline, on 127.0.0.1.

It speaks the three protocols the engines use (docs/testing.md, "The real engines offline"):

- ``POST */responses``: OpenAI's Responses API, streamed as SSE (Codex CLI);
- ``POST */messages``: Anthropic's Messages API, streamed or not (Claude Code);
- ``POST */chat/completions``: chat completions, streamed or not (Aider, through litellm);
- ``GET */models``: a one-model list.

In a test::

    with EngineServer() as server:
        env = engine_env("codex", server.base_url, home)
        ...
        request = server.model_requests()[-1]
        assert ("user", "say hi") in conversation(request)

Every request is recorded (``server.requests``, and one JSON line each in ``log_path`` when
given) with its method, path, lower-cased headers and parsed body, before it is answered.
The answer text is ``answer(request)``, by default ``"echo: <the last user text>"``. A body
that contains ``FAIL400``, ``FAIL401``, ``FAIL429`` or ``FAIL500`` gets that status, with an
error body in the protocol's own shape.

As a process (a crash test that kills the client can read the log afterwards)::

    python -m tests.support.engine_servers --port 0 --log FILE

prints ``PORT <n>`` as its first line, then serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

from tests.support.serving import Lifecycle, Serving

__all__ = [
    "Answer",
    "EngineServer",
    "LoggedRequest",
    "Message",
    "chat_conversation",
    "conversation",
    "echo_answer",
    "first_line",
    "last_user_text",
    "main",
    "messages_conversation",
    "read_request_log",
    "responses_conversation",
]

MODEL = "fake-model"
_FAIL = re.compile(rb"FAIL(400|401|429|500)")


@dataclass(frozen=True)
class LoggedRequest:
    """One request as the server saw it."""

    method: str
    path: str  # with its query string, e.g. /v1/messages?beta=true
    protocol: str  # "responses", "messages", "chat", "models" or "other"
    headers: dict[str, str]  # names lower-cased
    body: Any  # the parsed JSON body; the raw text when it is not JSON; None when empty

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "path": self.path,
            "protocol": self.protocol,
            "headers": self.headers,
            "body": self.body,
        }


@dataclass(frozen=True)
class Message:
    """One user or assistant turn of a conversation an engine sent."""

    role: str  # "user" or "assistant"
    text: str


Answer = Callable[[LoggedRequest], str]


def _protocol(method: str, path: str) -> str:
    route = path.split("?", 1)[0].rstrip("/")
    if method == "POST" and route.endswith("/responses"):
        return "responses"
    if method == "POST" and route.endswith("/messages"):
        return "messages"
    if method == "POST" and route.endswith("/chat/completions"):
        return "chat"
    if method == "GET" and route.endswith("/models"):
        return "models"
    return "other"


# -- the conversation an engine sent -------------------------------------------------------


_INJECTED = re.compile(r"^<([a-z_-]+)>.*</\1>$", re.DOTALL)


def _parts_text(content: object, kinds: frozenset[str]) -> list[str]:
    """The texts of a message's content (a string, or a list of typed parts), less the
    context blocks an engine adds on its own (Claude Code's ``<system-reminder>``, Codex's
    ``<environment_context>``): what is left is what the user and the model said."""
    if isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        parts = [
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") in kinds
            and isinstance(part.get("text"), str)
        ]
    else:
        parts = []
    return [text for text in parts if not _INJECTED.match(text.strip())]


def _message(role: object, texts: list[str]) -> list[Message]:
    if role not in ("user", "assistant") or not texts:
        return []
    return [Message(str(role), "\n".join(texts))]


def responses_conversation(body: object) -> list[Message]:
    """The user and assistant turns of a Responses API request (``input`` items)."""
    items = body.get("input") if isinstance(body, dict) else None
    if isinstance(items, str):
        return [Message("user", items)]
    found: list[Message] = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("type", "message") == "message":
            texts = _parts_text(item.get("content"), frozenset({"input_text", "output_text"}))
            found += _message(item.get("role"), texts)
    return found


def messages_conversation(body: object) -> list[Message]:
    """The user and assistant turns of an Anthropic Messages request (tool blocks left out)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    found: list[Message] = []
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict):
            texts = _parts_text(message.get("content"), frozenset({"text"}))
            found += _message(message.get("role"), texts)
    return found


def chat_conversation(body: object) -> list[Message]:
    """The user and assistant turns of a chat completions request."""
    messages = body.get("messages") if isinstance(body, dict) else None
    found: list[Message] = []
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict):
            texts = _parts_text(message.get("content"), frozenset({"text"}))
            found += _message(message.get("role"), texts)
    return found


_CONVERSATIONS: dict[str, Callable[[object], list[Message]]] = {
    "responses": responses_conversation,
    "messages": messages_conversation,
    "chat": chat_conversation,
}


def conversation(request: LoggedRequest) -> list[Message]:
    """The user and assistant turns a model request carried, whatever its protocol."""
    extract = _CONVERSATIONS.get(request.protocol)
    return extract(request.body) if extract is not None else []


def first_line(text: str) -> str:
    """The first non-empty line of ``text``, stripped: a prompt as an engine sent it back
    (Aider appends its format rules to the prompt, and restores it from Markdown with
    trailing spaces)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def last_user_text(request: LoggedRequest) -> str:
    """The first line of the last user turn: the prompt of this turn."""
    users = [m.text for m in conversation(request) if m.role == "user"]
    return first_line(users[-1]) if users else ""


def echo_answer(request: LoggedRequest) -> str:
    """The default answer: ``echo: <the last user text>``."""
    return f"echo: {last_user_text(request)[:200]}"


def read_request_log(path: Path) -> list[LoggedRequest]:
    """The requests a (possibly killed) server process recorded in its ``--log`` file."""
    if not path.exists():
        return []
    requests = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            requests.append(LoggedRequest(**json.loads(line)))
    return requests


# -- the answers, in each protocol's shape ---------------------------------------------------


def _sse(events: Sequence[tuple[str | None, dict[str, Any] | str]]) -> bytes:
    chunks = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {name}\n" if name else ""
        chunks.append(f"{head}data: {payload}\n\n")
    return "".join(chunks).encode("utf-8")


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


def _responses_stream(text: str, number: int, prompt_tokens: int) -> bytes:
    response_id, item_id = f"resp_fake_{number}", f"msg_fake_{number}"
    base = {"id": response_id, "object": "response", "created_at": 0, "model": MODEL}
    item = {"id": item_id, "type": "message", "role": "assistant"}
    done_item = {
        **item,
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    usage = {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": _tokens(text),
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt_tokens + _tokens(text),
    }
    return _sse(
        [
            (
                "response.created",
                {
                    "type": "response.created",
                    "response": {**base, "status": "in_progress", "output": []},
                },
            ),
            (
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {**item, "status": "in_progress", "content": []},
                },
            ),
            (
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": item_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": text,
                },
            ),
            (
                "response.output_item.done",
                {"type": "response.output_item.done", "output_index": 0, "item": done_item},
            ),
            (
                "response.completed",
                {
                    "type": "response.completed",
                    "response": {
                        **base,
                        "status": "completed",
                        "output": [done_item],
                        "usage": usage,
                    },
                },
            ),
        ]
    )


def _anthropic_message(text: str, number: int, prompt_tokens: int) -> dict[str, Any]:
    return {
        "id": f"msg_fake_{number}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": _tokens(text)},
    }


def _messages_stream(text: str, number: int, prompt_tokens: int) -> bytes:
    start = _anthropic_message(text, number, prompt_tokens)
    start.update(
        content=[], stop_reason=None, usage={"input_tokens": prompt_tokens, "output_tokens": 1}
    )
    return _sse(
        [
            ("message_start", {"type": "message_start", "message": start}),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            ("ping", {"type": "ping"}),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": _tokens(text)},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )


def _chat_completion(text: str, number: int, prompt_tokens: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-fake-{number}",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": _tokens(text),
            "total_tokens": prompt_tokens + _tokens(text),
        },
    }


def _chat_stream(text: str, number: int, prompt_tokens: int) -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    last = chunk({}, "stop")
    last["usage"] = _chat_completion(text, number, prompt_tokens)["usage"]
    return _sse(
        [
            (None, chunk({"role": "assistant", "content": text}, None)),
            (None, last),
            (None, "[DONE]"),
        ]
    )


def _error_body(protocol: str, status: int, message: str) -> dict[str, Any]:
    if protocol == "messages":
        kinds = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error"}
        return {
            "type": "error",
            "error": {"type": kinds.get(status, "api_error"), "message": message},
        }
    return {"error": {"message": message, "type": "fake_error", "code": str(status)}}


# -- the server ------------------------------------------------------------------------------


class EngineServer(Lifecycle):
    """The three engine protocols on 127.0.0.1, in a daemon thread, scripted by the test."""

    def __init__(
        self, *, answer: Answer | None = None, log_path: Path | None = None, port: int = 0
    ) -> None:
        self.answer: Answer = answer or echo_answer
        self.log_path = log_path
        self._port = port
        self._lock = threading.Lock()
        self._requests: list[LoggedRequest] = []
        self._answered = 0
        self._serving: Serving | None = None

    def start(self) -> Self:
        self._serving = Serving(_Server(("127.0.0.1", self._port), _Handler, self), "engine-server")
        return self

    def stop(self) -> None:
        if self._serving is not None:
            self._serving.stop()
            self._serving = None

    @property
    def port(self) -> int:
        if self._serving is None:
            raise RuntimeError("EngineServer is not started")
        return self._serving.port

    @property
    def base_url(self) -> str:
        """Without ``/v1``: Claude Code appends ``/v1/messages`` itself; the others get
        ``base_url + "/v1"``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[LoggedRequest]:
        """Every request so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    def model_requests(self, protocol: str | None = None) -> list[LoggedRequest]:
        """The requests that asked the model for an answer (optionally of one protocol)."""
        kinds = {"responses", "messages", "chat"} if protocol is None else {protocol}
        return [r for r in self.requests if r.protocol in kinds]

    def clear(self) -> None:
        """Forget the requests so far (the log file keeps them)."""
        with self._lock:
            self._requests.clear()

    def _record(self, request: LoggedRequest) -> int:
        with self._lock:
            self._requests.append(request)
            self._answered += 1
            if self.log_path is not None:
                # Flushed before answering: the record survives a client killed mid-turn.
                with self.log_path.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(request.to_json(), sort_keys=True) + "\n")
            return self._answered


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a handler stuck on a slow client must not block stop()

    def __init__(
        self, address: tuple[str, int], handler: type[_Handler], owner: EngineServer
    ) -> None:
        super().__init__(address, handler)
        self.owner = owner

    def handle_error(self, request: Any, client_address: Any) -> None:
        # An engine killed mid-request hangs up; anything else is a bug worth seeing.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    # No method here may be called `responses`: BaseHTTPRequestHandler.responses is the
    # status-text table that send_response() reads.
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read .requests; stderr stays quiet

    def do_GET(self) -> None:
        request, _ = self._record(b"")
        if request.protocol == "models":
            model = {"id": MODEL, "object": "model", "created": 0, "owned_by": "fake"}
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._send_json(404, _error_body("other", 404, f"no route GET {self.path}"))

    def do_HEAD(self) -> None:
        self._record(b"")
        self._send_raw(200, b"", "text/plain")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request, number = self._record(raw)
        failure = _FAIL.search(raw)
        if request.protocol in ("other", "models"):
            self._send_json(404, _error_body("other", 404, f"no route POST {self.path}"))
        elif failure is not None:
            status = int(failure.group(1))
            message = f"scripted failure FAIL{status}"
            self._send_json(status, _error_body(request.protocol, status, message))
        elif not isinstance(request.body, dict):
            message = "the request body is not a JSON object"
            self._send_json(400, _error_body(request.protocol, 400, message))
        else:
            self._answer(request, number)

    def _record(self, raw: bytes) -> tuple[LoggedRequest, int]:
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        request = LoggedRequest(
            method=self.command,
            path=self.path,
            protocol=_protocol(self.command, self.path),
            headers={name.lower(): value for name, value in self.headers.items()},
            body=body,
        )
        return request, self.server.owner._record(request)

    def _answer(self, request: LoggedRequest, number: int) -> None:
        text = self.server.owner.answer(request)
        prompt_tokens = sum(_tokens(m.text) for m in conversation(request))
        streamed = bool(request.body.get("stream"))
        if request.protocol == "responses":
            self._send_raw(200, _responses_stream(text, number, prompt_tokens), "text/event-stream")
        elif request.protocol == "messages" and streamed:
            self._send_raw(200, _messages_stream(text, number, prompt_tokens), "text/event-stream")
        elif request.protocol == "messages":
            self._send_json(200, _anthropic_message(text, number, prompt_tokens))
        elif streamed:
            self._send_raw(200, _chat_stream(text, number, prompt_tokens), "text/event-stream")
        else:
            self._send_json(200, _chat_completion(text, number, prompt_tokens))

    def _send_json(self, status: int, payload: object) -> None:
        self._send_raw(status, json.dumps(payload).encode("utf-8"), "application/json")

    def _send_raw(self, status: int, data: bytes, content_type: str) -> None:
        # The whole answer is known at once, so even a stream goes with a length: the
        # engines' HTTP clients then keep the connection without guessing where it ends.
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if content_type == "text/event-stream":
            self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.engine_servers")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", type=Path, default=None, help="append each request here")
    args = parser.parse_args(argv)

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with EngineServer(log_path=args.log, port=args.port) as server:
        print(f"PORT {server.port}", flush=True)
        while not stop.wait(0.2):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
