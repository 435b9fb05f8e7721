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

# The one list of what acode exports: each name and the module that defines it. It is
# loaded on first use; ``__all__`` is derived from it, and the imports for type checkers
# below mirror it (tests/test_public_api.py checks that they agree).
_EXPORTS = {
    "AcodeConfig": "acode.domain.config",
    "AcodeError": "acode.errors",
    "ApprovalPending": "acode.errors",
    "ApprovalRequest": "acode.engine.observer",
    "CheckpointError": "acode.errors",
    "CommandResult": "acode.system.process",
    "EnvironmentValidationError": "acode.errors",
    "ModelError": "acode.errors",
    "NonDeterminismError": "acode.errors",
    "NothingToResumeError": "acode.errors",
    "PauseRequested": "acode.errors",
    "ResumePreview": "acode.resume.service",
    "ResumableSession": "acode.resume.listing",
    "Session": "acode.engine.session",
    "SessionLockedError": "acode.errors",
    "SessionNotFoundError": "acode.errors",
    "SessionState": "acode.domain.states",
    "StepContext": "acode.engine.steps.base",
    "StepFailedError": "acode.errors",
    "StorageError": "acode.errors",
    "TerminalStateError": "acode.errors",
    "UsageError": "acode.errors",
    "list_resumable": "acode.resume.listing",
    "open_session": "acode.engine.lifecycle",
    "preview_resume": "acode.resume.service",
    "python_step": "acode.engine.steps.python_step",
    "resume_session": "acode.resume.service",
}

__all__ = ["__version__", *_EXPORTS]  # noqa: PLE0604 (derived, pinned by a test)

if TYPE_CHECKING:  # ``X as X``: re-exported, for type checkers
    from acode.domain.config import AcodeConfig as AcodeConfig
    from acode.domain.states import SessionState as SessionState
    from acode.engine.lifecycle import open_session as open_session
    from acode.engine.observer import ApprovalRequest as ApprovalRequest
    from acode.engine.session import Session as Session
    from acode.engine.steps.base import StepContext as StepContext
    from acode.engine.steps.python_step import python_step as python_step
    from acode.errors import AcodeError as AcodeError
    from acode.errors import ApprovalPending as ApprovalPending
    from acode.errors import CheckpointError as CheckpointError
    from acode.errors import EnvironmentValidationError as EnvironmentValidationError
    from acode.errors import ModelError as ModelError
    from acode.errors import NonDeterminismError as NonDeterminismError
    from acode.errors import NothingToResumeError as NothingToResumeError
    from acode.errors import PauseRequested as PauseRequested
    from acode.errors import SessionLockedError as SessionLockedError
    from acode.errors import SessionNotFoundError as SessionNotFoundError
    from acode.errors import StepFailedError as StepFailedError
    from acode.errors import StorageError as StorageError
    from acode.errors import TerminalStateError as TerminalStateError
    from acode.errors import UsageError as UsageError
    from acode.resume.listing import ResumableSession as ResumableSession
    from acode.resume.listing import list_resumable as list_resumable
    from acode.resume.service import ResumePreview as ResumePreview
    from acode.resume.service import preview_resume as preview_resume
    from acode.resume.service import resume_session as resume_session
    from acode.system.process import CommandResult as CommandResult


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'acode' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    # Shown, pickled and documented as ``acode.Name``, the name a caller uses (httpx does
    # the same): where it is defined inside the package is not part of the API.
    value.__module__ = "acode"
    globals()[name] = value
    return value
