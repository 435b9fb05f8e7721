"""Step kinds: what every layer names a step's kind by.

Apart from the plan (``acode.domain.plan``), which builds and validates whole plans, so
that running a step or resuming a session does not load the plan's validation.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["StepKind"]


class StepKind(StrEnum):
    """What a step does. A step names its kind by carrying exactly one key of that name."""

    READ = "read"
    WRITE = "write"
    EDIT = "edit"
    RUN = "run"
    MODEL = "model"
    APPROVE = "approve"
    COMMIT = "commit"
    PYTHON = "python"
