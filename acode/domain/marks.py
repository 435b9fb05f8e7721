"""Marked checkpoints: a point of a session's history that a person or a program names.

acode commits a signed checkpoint after every step on its own, so a mark saves nothing
that would otherwise be lost: it gives a point of the history a name ("tests green",
"before the refactor") that `acode session history`, the progress file and the export
show. A label names one point of a session: marking it again with the same label finds
the point already recorded, so that a program that resumes and calls its
``Session.checkpoint(label)`` again does not record a second one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acode.errors import UsageError

__all__ = ["MAX_LABEL_LENGTH", "Mark", "check_label"]

MAX_LABEL_LENGTH = 200
_HINT = 'give a short label on one line, e.g. --label "tests green"'


@dataclass(frozen=True)
class Mark:
    """A marked checkpoint: its ``label``, the event ``seq`` whose checkpoint it is, when
    (``ts_us``) and by whom (``by``, the user name of the process that marked it)."""

    label: str
    seq: int
    ts_us: int
    by: str

    @classmethod
    def from_event(cls, seq: int, ts_us: int, payload: dict[str, Any]) -> Mark:
        return cls(label=str(payload["label"]), seq=seq, ts_us=ts_us, by=str(payload["by"]))


def check_label(label: str) -> str:
    """``label`` without surrounding blanks; raises UsageError unless it is one line of
    printable text, 1 to MAX_LABEL_LENGTH characters long."""
    text = label.strip()
    if not text:
        raise UsageError("a checkpoint label cannot be empty", hint=_HINT)
    if not text.isprintable():
        raise UsageError(
            f"a checkpoint label must be one line of printable text, not {text[:40]!r}",
            hint=_HINT,
        )
    if len(text) > MAX_LABEL_LENGTH:
        raise UsageError(
            f"a checkpoint label has at most {MAX_LABEL_LENGTH} characters; this one has "
            f"{len(text)}",
            hint=_HINT,
        )
    return text
