"""acode: crash-proof AI coding-agent sessions.

Every step of a session is recorded in an append-only SQLite log, a signed
checkpoint is committed after each completed step, and a session interrupted
anywhere resumes exactly where it stopped::

    import acode

    with acode.open_session("Add input validation", workspace=".") as s:
        text = s.read("read-login", "src/login.py")
        s.write("validator", "src/validators.py", text.upper())

    with acode.resume_session(session_id, workspace=".") as s:
        ...  # the same calls; completed steps return their recorded results

    for found in acode.list_resumable("."):        # most recent first
        print(found.short_id, found.age.age, found.position)
    preview = acode.preview_resume(found.id, ".")  # what `acode resume --dry-run` shows

The names below load on first use, so ``import acode`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "AcodeConfig",
    "AcodeError",
    "ApprovalPending",
    "ApprovalRequest",
    "CommandResult",
    "NonDeterminismError",
    "PauseRequested",
    "ResumableSession",
    "ResumePreview",
    "Session",
    "SessionState",
    "StepContext",
    "StepFailedError",
    "__version__",
    "list_resumable",
    "open_session",
    "preview_resume",
    "python_step",
    "resume_session",
]

_EXPORTS = {
    "AcodeConfig": "acode.domain.config",
    "AcodeError": "acode.errors",
    "ApprovalPending": "acode.errors",
    "ApprovalRequest": "acode.runtime.observer",
    "CommandResult": "acode.runtime.process",
    "NonDeterminismError": "acode.errors",
    "PauseRequested": "acode.errors",
    "ResumePreview": "acode.resume.service",
    "ResumableSession": "acode.resume.listing",
    "Session": "acode.runtime.session",
    "SessionState": "acode.domain.states",
    "StepContext": "acode.runtime.steps.base",
    "StepFailedError": "acode.errors",
    "list_resumable": "acode.resume.listing",
    "open_session": "acode.runtime.lifecycle",
    "preview_resume": "acode.resume.service",
    "python_step": "acode.runtime.steps.python_step",
    "resume_session": "acode.resume.service",
}

if TYPE_CHECKING:
    from acode.domain.config import AcodeConfig
    from acode.domain.states import SessionState
    from acode.errors import (
        AcodeError,
        ApprovalPending,
        NonDeterminismError,
        PauseRequested,
        StepFailedError,
    )
    from acode.resume.listing import ResumableSession, list_resumable
    from acode.resume.service import ResumePreview, preview_resume, resume_session
    from acode.runtime.lifecycle import open_session
    from acode.runtime.observer import ApprovalRequest
    from acode.runtime.process import CommandResult
    from acode.runtime.session import Session
    from acode.runtime.steps.base import StepContext
    from acode.runtime.steps.python_step import python_step


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'acode' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
