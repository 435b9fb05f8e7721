"""When to try the remote again after a failure: exponential back-off with jitter."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    """Delays double from ``first`` to ``cap`` seconds. Each is drawn from its upper
    half, so that many machines cut off by one outage do not all come back at once,
    while none retries sooner than ``first``."""

    first: float = 1.0
    cap: float = 60.0

    def delay(self, failures: int, draw: float) -> float:
        """Seconds to wait after the ``failures``-th failure in a row (1, 2, ...);
        ``draw`` is uniform in [0, 1)."""
        ceiling = min(self.cap, self.first * 2.0 ** min(max(failures, 1) - 1, 32))
        return max(self.first, ceiling * (0.5 + 0.5 * draw))
