"""Ctrl+C and SIGTERM: the first asks the run to pause, the second exits at once.

A pause is delivered as ``PauseRequested`` immediately while a step's side effect
runs (the step then stays unfinished, exactly as after a crash, and resume handles
it by kind), and otherwise at the next step boundary, so acode's own bookkeeping is
never cut in half.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TypeVar

from acode.errors import EXIT_INTERRUPTED, PauseRequested
from acode.system.process_table import child_groups

__all__ = ["Interrupts"]

T = TypeVar("T")
R = TypeVar("R")


class Interrupts:
    def __init__(self) -> None:
        self.requested = False
        self._interruptible = 0
        self._block = _Interruptible(self)  # it counts the blocks open: one serves all

    @contextmanager
    def installed(self) -> Iterator[Interrupts]:
        """Handle SIGINT and SIGTERM while the block runs (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {
            sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            try:
                _kill_children()
            finally:  # whatever looking for them met, the second signal exits
                os._exit(EXIT_INTERRUPTED)
        self.requested = True
        if self._interruptible:
            raise PauseRequested

    def interruptible(self) -> _Interruptible:
        """A block in which a pause request is delivered at once."""
        self.check()
        return self._block

    def call(self, fn: Callable[[T], R], arg: T) -> R:
        """``fn(arg)`` in an interruptible block: one call, for the function of every
        step, where ``with interruptible()`` makes four."""
        if self.requested:
            raise PauseRequested
        self._interruptible += 1
        try:
            return fn(arg)
        finally:
            self._interruptible -= 1

    def check(self) -> None:
        if self.requested:
            raise PauseRequested


def _kill_children() -> None:
    """Before exiting at once, stop the commands our steps started. They run in process
    groups of their own (so a Ctrl+C reaches acode, not them), which is why leaving
    would otherwise leave them running on, racing the resume that repeats their step."""
    for group in child_groups():
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)


class _Interruptible:
    # A class, not a generator context manager: it wraps every step's side effect.
    __slots__ = ("_owner",)

    def __init__(self, owner: Interrupts) -> None:
        self._owner = owner

    def __enter__(self) -> None:
        self._owner._interruptible += 1

    def __exit__(self, *exc: object) -> None:
        self._owner._interruptible -= 1
