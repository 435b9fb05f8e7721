"""A client of OpenAI-compatible chat servers (Ollama, llama.cpp, vLLM, OpenAI, ...).

Built on the standard library, imported inside the functions, so that importing this
module costs nothing for commands that never talk to a model. A request that may have
been answered is never sent again behind the caller's back (the caller records each
response and resends only what was never answered): a timeout, a dropped connection or
an error status is the caller's to handle. The one exception is a server that turns a
request away unanswered as busy, HTTP 429 or 503, which is what those statuses ask: the
request is sent again up to ``model.retries`` times, after the wait the server names
(Retry-After) or 1, 2, 4 ... seconds, at most 30 each.

Each request has a deadline over all of it, from connecting to the answer's last byte
(``model.timeout_seconds``; ``http_deadline``): a time-out on each read alone would let a
server that sends a byte a second hold a session for ever.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from acode.domain.backoff import Backoff
from acode.domain.config import ModelSettings
from acode.domain.json_text import read_json
from acode.errors import ModelBusyError, ModelError

__all__ = [
    "ChatResponse",
    "build_chat_payload",
    "busy_wait",
    "chat",
    "list_models",
    "request_hash",
    "send_chat",
]

_BODY_EXCERPT = 300
# The largest answer read: far beyond any chat completion, and it keeps a server that
# sends without end from filling the memory before the deadline.
_LIMIT = 64 * 1024 * 1024
# Statuses by which a server turns a request away unanswered, asking for it later.
_BUSY = frozenset({429, 503})
# 1, 2, 4 ... seconds when the server names no wait; any wait at most 30 s.
_BUSY_BACKOFF = Backoff(first=1.0, cap=30.0)
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_UNREACHABLE_HINT = (
    "is it running? For Ollama: `ollama serve`; check model.base_url in .agent/config.yml"
)


@dataclass(frozen=True)
class ChatResponse:
    content: str
    tool_calls: tuple[dict[str, Any], ...]
    finish_reason: str | None
    usage: dict[str, int]
    model: str
    raw: dict[str, Any]


def build_chat_payload(
    settings: ModelSettings,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: object | None = None,
) -> dict[str, Any]:
    """The exact JSON body ``chat`` sends."""
    payload: dict[str, Any] = {
        "model": settings.name,
        "messages": [dict(message) for message in messages],
        "temperature": settings.temperature,
        "max_tokens": settings.max_tokens,
        "stream": False,
    }
    if settings.seed is not None:
        payload["seed"] = settings.seed
    if tools is not None:
        payload["tools"] = [dict(tool) for tool in tools]
    if tool_choice is not None:
        payload["tool_choice"] = tool_choice
    return payload


def request_hash(payload: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a request body: equal requests hash equal."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def chat(
    settings: ModelSettings,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: object | None = None,
    api_key: str | None = None,
) -> ChatResponse:
    """Send one chat completion request; ``api_key`` overrides ``settings.api_key_env``."""
    payload = build_chat_payload(settings, messages, tools, tool_choice)
    return send_chat(settings, payload, api_key=api_key)


def send_chat(
    settings: ModelSettings, payload: Mapping[str, Any], *, api_key: str | None = None
) -> ChatResponse:
    """Send a request body built by ``build_chat_payload`` as it is."""
    url = _endpoint(settings, "chat/completions")
    body = json.dumps(payload).encode("utf-8")
    attempt = 0
    while True:
        try:
            data = _request_json(
                url, settings, api_key, body, settings.timeout_seconds, "model.timeout_seconds"
            )
        except ModelError as exc:
            wait = busy_wait(exc, attempt)
            if wait is None or attempt >= settings.retries:
                raise
            time.sleep(wait)
            attempt += 1
        else:
            return _parse_chat(url, data, settings.name)


def busy_wait(error: ModelError, attempt: int) -> float | None:
    """Seconds to wait before sending again a request that failed with ``error`` after
    ``attempt`` earlier retries; None when it is not to be sent again."""
    import urllib.error

    cause = error.__cause__
    if not isinstance(cause, urllib.error.HTTPError) or cause.code not in _BUSY:
        return None
    asked = _retry_after(cause.headers.get("Retry-After") if cause.headers else None)
    wait = asked if asked is not None else _BUSY_BACKOFF.ceiling(attempt + 1)
    return min(max(wait, 0.0), _BUSY_BACKOFF.cap)


def _retry_after(value: str | None) -> float | None:
    """RFC 9110's Retry-After: seconds, or an HTTP date; None when absent or unreadable."""
    from email.utils import parsedate_to_datetime

    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) else None
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return moment.timestamp() - time.time()


def list_models(settings: ModelSettings, *, timeout: float = 3.0) -> list[str]:
    """The ids of the models the server offers (a quick reachability check too)."""
    url = _endpoint(settings, "models")
    data = _request_json(url, settings, None, None, timeout, "the availability check's limit")
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise _malformed(url, "no 'data' list of models", data)
    return [entry["id"] for entry in entries if isinstance(entry, dict) and "id" in entry]


def _endpoint(settings: ModelSettings, path: str) -> str:
    return f"{settings.base_url.rstrip('/')}/{path}"


def _headers(settings: ModelSettings, api_key: str | None) -> dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": "acode"}
    if api_key is None and settings.api_key_env:
        api_key = os.environ.get(settings.api_key_env) or None
        if api_key is None:
            # Sending without the key would only earn a 401 that hides the real cause.
            raise ModelError(
                f"the environment variable {settings.api_key_env} (named by "
                "model.api_key_env) is not set",
                hint=f"export {settings.api_key_env}=<your key>, or remove model.api_key_env "
                "from .agent/config.yml for a server that needs no key",
            )
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _request_json(
    url: str,
    settings: ModelSettings,
    api_key: str | None,
    body: bytes | None,
    timeout: float,
    limit_name: str,
) -> Any:
    """The JSON answer to one request, all of it within ``timeout`` seconds (named
    ``limit_name`` in the error that says it ran out)."""
    import http.client
    import urllib.error
    import urllib.request
    from urllib.parse import urlsplit

    from acode.system.http_deadline import AnswerTooLarge, Deadline, fetch

    try:
        parts = urlsplit(url)
        hostname = parts.hostname if parts.scheme in ("http", "https") else None
    except ValueError:  # an unclosed IPv6 bracket, a port that is no number
        hostname = None
    if not hostname:
        raise ModelError(
            f"invalid model server URL {url!r}: expected http:// or https:// and a host",
            hint="set model.base_url in .agent/config.yml to a URL such as "
            "http://localhost:11434/v1",
        )
    headers = _headers(settings, api_key)
    if body is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=body, headers=headers)
    # A corporate http_proxy must not capture a model server on this machine.
    direct = hostname in _LOOPBACK_HOSTS
    with Deadline(timeout) as deadline:
        try:
            raw = fetch(request, timeout=timeout, deadline=deadline, direct=direct, limit=_LIMIT)
        except urllib.error.HTTPError as exc:
            raise _http_error(url, exc.code, _read_error_body(exc), settings) from exc
        except AnswerTooLarge as exc:
            raise _malformed(url, str(exc), "") from exc
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if deadline.expired or _timed_out(exc):
                if deadline.connected:
                    raise _too_late(url, timeout, limit_name) from exc
                raise ModelError(
                    f"cannot reach the model server at {url}: no connection within "
                    f"{timeout:g} s ({limit_name})",
                    hint=_UNREACHABLE_HINT,
                ) from exc
            raise ModelError(
                f"cannot reach the model server at {url}: {_describe(exc)}",
                hint=_UNREACHABLE_HINT,
            ) from exc
        # A connection cut by the deadline may also read as a short answer, not an error.
        if deadline.expired:
            raise _too_late(url, timeout, limit_name)
    return _decode(url, raw)


def _too_late(url: str, timeout: float, limit_name: str) -> ModelBusyError:
    return ModelBusyError(
        f"no complete answer from the model server at {url} within {timeout:g} s ({limit_name})",
        hint="the server is busy or slow: run the command again later, or raise "
        "model.timeout_seconds in .agent/config.yml",
    )


def _decode(url: str, raw: bytes) -> Any:
    """The answer's JSON, as acode can record it (``read_json``); half a surrogate pair
    is a broken character of the model's text, and becomes U+FFFD like any other."""
    try:
        return read_json(raw, replace_surrogates=True)
    except ValueError as exc:
        problem = f"the body is not JSON acode can use ({exc})"
        raise _malformed(url, problem, _excerpt(raw)) from exc


def _excerpt(raw: bytes) -> str:
    return raw[:_BODY_EXCERPT].decode("utf-8", "replace")


def _read_error_body(exc: Any) -> str:
    import http.client

    try:
        return bytes(exc.read(_BODY_EXCERPT)).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException):
        return ""


def _timed_out(exc: BaseException) -> bool:
    import socket
    import urllib.error

    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return isinstance(reason, TimeoutError | socket.timeout)


def _describe(exc: BaseException) -> str:
    import socket
    import urllib.error

    reason: BaseException | str = exc
    if isinstance(exc, urllib.error.URLError):
        reason = exc.reason
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, socket.gaierror):
        return f"unknown host ({reason})"
    return str(reason) or type(reason).__name__


def _http_error(url: str, status: int, body: str, settings: ModelSettings) -> ModelError:
    if status in (401, 403):
        hint = (
            "the server refused the credentials: set model.api_key_env in .agent/config.yml "
            "to the name of the variable holding a valid key"
        )
    elif status == 404:
        hint = (
            f"check model.name ({settings.name!r}) and model.base_url (it usually ends in /v1); "
            f"for Ollama: `ollama pull {settings.name}`"
        )
    elif status in _BUSY:
        sent = settings.retries + 1
        hint = (
            "the server is busy or limits the rate of requests; acode sent this request "
            f"{sent} time{'s' if sent > 1 else ''} (model.retries: {settings.retries}). "
            "Wait, then run the command again, or raise model.retries in .agent/config.yml"
        )
    elif status >= 500:
        hint = "the model server failed; look at its log, then run the command again"
    else:
        hint = "check the model settings in .agent/config.yml"
    return ModelError(
        f"the model server at {url} answered HTTP {status}: {body[:_BODY_EXCERPT]}", hint=hint
    )


def _malformed(url: str, what: str, body: object) -> ModelError:
    text = body if isinstance(body, str) else json.dumps(body)
    return ModelError(
        f"malformed response from the model server at {url}: {what}: {text[:_BODY_EXCERPT]}",
        hint="check that model.base_url points at an OpenAI-compatible API (usually ending in /v1)",
    )


def _parse_chat(url: str, data: Any, requested_model: str) -> ChatResponse:
    if not isinstance(data, dict):
        raise _malformed(url, "expected a JSON object", data)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        error = data.get("error")
        what = f"error {json.dumps(error)}" if error is not None else "no choices"
        raise _malformed(url, what, data)
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise _malformed(url, "the first choice has no message", data)
    content = message.get("content")
    tool_calls = message.get("tool_calls") or []
    finish_reason = choices[0].get("finish_reason")
    usage = data.get("usage")
    model = data.get("model")
    return ChatResponse(
        content=content if isinstance(content, str) else "",
        tool_calls=tuple(call for call in tool_calls if isinstance(call, dict)),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        usage={
            key: value
            for key, value in (usage.items() if isinstance(usage, dict) else [])
            if isinstance(value, int) and not isinstance(value, bool)
        },
        model=model if isinstance(model, str) else requested_model,
        raw=data,
    )
