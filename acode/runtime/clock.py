"""Time and randomness, behind a Protocol so the engine can be driven in tests."""

from __future__ import annotations

import os
import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    def now_us(self) -> int: ...

    def random_bytes(self, n: int) -> bytes: ...


class SystemClock:
    def now_us(self) -> int:
        return time.time_ns() // 1000

    def random_bytes(self, n: int) -> bytes:
        return os.urandom(n)
