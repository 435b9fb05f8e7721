"""Prompts read the terminal so that a Ctrl+C always ends the wait (cli.console.keyboard):
a signal whose handler raises stops the read at once, one whose handler only takes
note (acode's pause request outside a step) leaves it waiting for the line, and a line
comes back as input() gives it."""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time

import pytest

from tests.cli.conftest import as_a_foreground_job

_CHILD = """
import signal, sys
from acode.cli.console import keyboard
if sys.argv[1] == "note":
    signal.signal(signal.SIGINT, lambda *_: print("noted", flush=True))
print("ready", flush=True)
try:
    print(repr(keyboard().readline()), flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
except EOFError:
    print("eof", flush=True)
"""


def _spawn(handler: str) -> tuple[int, int]:
    pid, fd = pty.fork()
    if pid == 0:
        as_a_foreground_job()
        os.execv(sys.executable, [sys.executable, "-c", _CHILD, handler])
    return pid, fd


def _until(fd: int, text: str, timeout: float = 20.0) -> str:
    seen = b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            pytest.fail(f"{text!r} never came; the terminal shows {seen!r}")
        seen += os.read(fd, 4096)
    return seen.decode()


def _status(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_ctrl_c_while_waiting_raises_at_once() -> None:
    pid, fd = _spawn("default")
    _until(fd, "ready")
    time.sleep(0.2)  # inside the wait
    os.write(fd, b"\x03")
    _until(fd, "interrupted")
    assert _status(pid) == 130


def test_a_handler_that_only_takes_note_leaves_the_wait_for_the_line() -> None:
    pid, fd = _spawn("note")
    _until(fd, "ready")
    time.sleep(0.2)
    os.kill(pid, signal.SIGINT)
    _until(fd, "noted")
    os.write(fd, b"proceed\r")
    assert "'proceed'" in _until(fd, "'proceed'")  # no newline, as input() gives it
    assert _status(pid) == 0


def test_the_end_of_input_is_an_eof_error_not_an_empty_answer() -> None:
    pid, fd = _spawn("default")
    _until(fd, "ready")
    os.write(fd, b"\x04")  # Ctrl+D on an empty line
    _until(fd, "eof")
    assert _status(pid) == 0
