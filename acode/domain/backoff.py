"""How long to wait before trying again after failures in a row: exponential back-off.

One policy for every retry loop of acode: the sync worker's (a remote that is down) and
the model client's (a server that answers busy)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    """Delays double from ``first`` to ``cap`` seconds."""

    first: float = 1.0
    cap: float = 60.0

    def ceiling(self, failures: int) -> float:
        """The longest wait after the ``failures``-th failure in a row (1, 2, ...)."""
        # 2**32 is past any cap already; a larger power would only overflow a float.
        return min(self.cap, self.first * 2.0 ** min(max(failures, 1) - 1, 32))

    def delay(self, failures: int, draw: float) -> float:
        """A jittered wait after the ``failures``-th failure in a row; ``draw`` is uniform
        in [0, 1). Drawn from the upper half of the ceiling, so that many machines cut off
        by one outage do not all come back at once, while none retries sooner than
        ``first``."""
        return max(self.first, self.ceiling(failures) * (0.5 + 0.5 * draw))
