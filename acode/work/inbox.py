"""Breadcrumbs from inside an engine's turn, recorded by the acode that runs the turn.

acode keeps its checkpoint key from every process it starts (acode.security.child_env),
so an `acode wsession breadcrumb add` run by an engine cannot sign the work session's
history itself. The acode running the turn listens, for as long as the turn lasts, on a
Unix socket in a directory of its own (mode 0700), named to the engine in
``ACODE_WORK_INBOX``; the breadcrumb commands send their cookie and message there, and
the listener checks and records them exactly as the command would have (the cookie must
be the turn's work session's), then answers with the breadcrumbs or the error. The
socket grants no more than the cookie: adding and listing that session's breadcrumbs.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from acode.domain.work import Breadcrumb
from acode.engine.lifecycle import Workspace
from acode.errors import AcodeError, ErrorCode, StorageError

__all__ = ["INBOX_ENV", "add_through", "breadcrumb_inbox", "list_through"]

INBOX_ENV = "ACODE_WORK_INBOX"
_POLL_SECONDS = 0.1
_ANSWER_SECONDS = 30.0  # a breadcrumb waits at most this long for the session's lock
_MAX_REQUEST = 1 << 20


@contextlib.contextmanager
def breadcrumb_inbox(ws: Workspace, wsession_id: str) -> Iterator[str]:
    """Record the breadcrumbs sent to the yielded socket path while the block runs."""
    directory = Path(tempfile.mkdtemp(prefix="acode-inbox-"))  # 0700: this user's only
    path = directory / "socket"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stop = threading.Event()
    try:
        listener.bind(str(path))
        listener.listen()
        listener.settimeout(_POLL_SECONDS)
        thread = threading.Thread(
            target=_serve, args=(listener, stop, ws, wsession_id), name="acode-inbox", daemon=True
        )
        thread.start()
        try:
            yield str(path)
        finally:
            stop.set()
            thread.join()  # a breadcrumb being recorded is finished, not cut
    finally:
        listener.close()
        shutil.rmtree(directory, ignore_errors=True)


def _serve(listener: socket.socket, stop: threading.Event, ws: Workspace, wsession: str) -> None:
    while not stop.is_set():
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            continue
        with connection:
            connection.settimeout(_ANSWER_SECONDS)
            with contextlib.suppress(OSError):  # the sender gave up: nothing to answer
                connection.sendall(json.dumps(_answer(_receive(connection), ws, wsession)).encode())


def _receive(connection: socket.socket) -> bytes:
    data = bytearray()
    while len(data) <= _MAX_REQUEST and (chunk := connection.recv(65536)):
        data += chunk
    return bytes(data)


def _answer(raw: bytes, ws: Workspace, wsession: str) -> dict[str, Any]:
    from acode.work.sessions import add_breadcrumb, list_breadcrumbs

    try:
        request = json.loads(raw)
        op, cookie = request["op"], request.get("cookie")
        if op == "add":
            crumb = add_breadcrumb(ws, cookie, str(request["message"]), expected=wsession)
            return {"breadcrumbs": [crumb.to_dict()]}
        if op == "list":
            listed = list_breadcrumbs(ws, cookie, expected=wsession)
            return {"breadcrumbs": [b.to_dict() for b in listed.breadcrumbs]}
        raise KeyError(op)
    except AcodeError as error:
        return {
            "error": {
                "code": error.code.value,
                "message": error.message,
                "hint": error.hint,
                "exit": error.exit_code,
            }
        }
    except (ValueError, KeyError, TypeError) as bad:
        return {
            "error": {
                "code": ErrorCode.WORK_CONTRACT.value,
                "message": f"not a breadcrumb request: {bad!r}",
                "exit": 2,
            }
        }


def add_through(inbox: str, cookie: str | None, message: str) -> Breadcrumb:
    """Record a breadcrumb through the inbox of the acode running this turn."""
    [crumb] = _ask(inbox, {"op": "add", "cookie": cookie, "message": message})
    return crumb


def list_through(inbox: str, cookie: str | None) -> list[Breadcrumb]:
    """The breadcrumbs of the turn's work session, through its inbox."""
    return _ask(inbox, {"op": "list", "cookie": cookie})


def _ask(inbox: str, request: dict[str, Any]) -> list[Breadcrumb]:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(_ANSWER_SECONDS)
            connection.connect(inbox)
            connection.sendall(json.dumps(request).encode())
            connection.shutdown(socket.SHUT_WR)
            answer = json.loads(_receive(connection))
    except (OSError, ValueError) as exc:
        raise StorageError(
            f"the acode running this engine's turn did not answer at {inbox}: {exc}",
            hint=f"run the breadcrumb command during the engine's turn, or unset {INBOX_ENV} "
            "and run it from your own shell",
        ) from exc
    if "error" in answer:
        raise _error(answer["error"])
    return [Breadcrumb.from_dict(b) for b in answer["breadcrumbs"]]


def _error(fields: dict[str, Any]) -> AcodeError:
    error = AcodeError(
        str(fields["message"]),
        hint=fields.get("hint"),
        code=ErrorCode(fields["code"]),
    )
    error.exit_code = int(fields["exit"])
    return error
