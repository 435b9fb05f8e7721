"""A session of python steps, recorded and paused: what the upgrade tests start from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import acode

__all__ = ["paused_session"]


def paused_session(
    ws: Path, steps: int, fn: Callable[[acode.StepContext], Any], *, title: str = "recorded"
) -> str:
    """The id of a session of ``steps`` steps ``s0``, ``s1``... each running ``fn``,
    paused so that it resumes."""
    s = acode.open_session(title, workspace=ws)
    for i in range(steps):
        s.step(f"s{i}", fn)
    s.pause("test")
    s.close()
    return s.id
