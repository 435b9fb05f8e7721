"""Time and randomness, behind a Protocol so the engine can be driven in tests."""

from __future__ import annotations

import os
import threading
import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    def now_us(self) -> int: ...

    def random_bytes(self, n: int) -> bytes: ...


class _Entropy:
    """Bytes from the operating system's CSPRNG, read 4 KiB at a time: every event takes
    10 (its UUIDv7), and one system call per event cost more than the rest of building
    it. A forked child starts afresh, so it never hands out its parent's bytes."""

    _SIZE = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool = b""
        self._used = 0

    def take(self, n: int) -> bytes:
        if n > self._SIZE:
            return os.urandom(n)
        with self._lock:
            start, end = self._used, self._used + n
            if end > len(self._pool):
                self._pool, start, end = os.urandom(self._SIZE), 0, n
            self._used = end
            return self._pool[start:end]

    def forget(self) -> None:
        self._pool, self._used, self._lock = b"", 0, threading.Lock()


_ENTROPY = _Entropy()
os.register_at_fork(after_in_child=_ENTROPY.forget)


class SystemClock:
    def now_us(self) -> int:
        return time.time_ns() // 1000

    def random_bytes(self, n: int) -> bytes:
        return _ENTROPY.take(n)
