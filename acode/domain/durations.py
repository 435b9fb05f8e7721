"""What a time-out may be: a positive number of seconds, a week at most.

The bound is the operating system's, not a taste: poll(2) and the sockets' clocks take
milliseconds in a C int (about 24.8 days), and a time-out beyond raises OverflowError
where the wait begins, in the middle of a step. A week is long past any step's need.
"""

from __future__ import annotations

from typing import TypeGuard

__all__ = ["MAX_TIMEOUT_SECONDS", "TIMEOUT_RULE", "is_timeout"]

MAX_TIMEOUT_SECONDS = 7 * 24 * 3600
TIMEOUT_RULE = f"a positive number of seconds, at most {MAX_TIMEOUT_SECONDS:,} (a week)"


def is_timeout(value: object) -> TypeGuard[float]:
    # bool is an int in Python, and `timeout: yes` is surely a mistake. NaN and the
    # infinities fail the comparison; an int too large for a float never reaches float().
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and 0 < value <= MAX_TIMEOUT_SECONDS
    )
