"""The one exception hierarchy of acode.

Every error a person can meet carries a stable code (``ACODE-...``), the process
exit status the CLI returns for it, and a hint that says what to do next::

    AcodeError
    ├── UsageError                 bad argument or flag                         exit 2
    │   ├── ConfigError            .agent/config.yml is invalid                 exit 2
    │   ├── PlanError              a plan file is malformed                     exit 2
    │   ├── AmbiguousSessionError  an id prefix matches several sessions        exit 2
    │   └── CookieError            no cookie, or not the work session's (WORK-001) exit 2
    │   └── StoreUrlError          no store backend takes the URL (ACODE-DB-004) exit 2
    ├── SessionNotFoundError       no session has that id                       exit 1
    │   └── SessionPrunedError     it was pruned (ACODE-SESSION-003)            exit 1
    ├── NothingToResumeError       ACODE-RESUME-001                             exit 14
    ├── TerminalStateError         ACODE-RESUME-002                             exit 15
    ├── SessionLockedError         ACODE-RESUME-003 / ACODE-LOCK-*              exit 16
    ├── SessionTakenOverError      ACODE-SESSION-004 (its lease is another's)   exit 19
    ├── EnvironmentValidationError ACODE-RESUME-004                             exit 17
    ├── ContinuationError          ACODE-RESUME-006 (the plan and the record disagree) exit 1
    ├── TooOldForAutopilotError    ACODE-RESUME-008 (interrupted 24 hours ago or more) exit 18
    ├── CheckpointError            ACODE-RESUME-005 / ACODE-CKPT-* / ACODE-KEY-001 exit 1
    ├── ApprovalChangedError       ACODE-APPROVE-001 (what it gates changed)    exit 1
    ├── NonDeterminismError        ACODE-RESUME-007                             exit 1
    ├── StepFailedError            a step's action failed                       exit 1
    ├── ModelError                 the model endpoint failed                    exit 1
    │   └── ModelBusyError         it took the request, gave no answer in time  exit 1
    ├── StorageError               the database cannot be used                  exit 1
    │   ├── SchemaTooNewError      written by a newer acode                     exit 1
    │   ├── DatabaseDamagedError   empty, truncated or corrupt (ACODE-DB-003)   exit 1
    │   ├── StoreUnavailableError  PostgreSQL store: no answer (DB-005) or refused (DB-006) exit 1
    │   └── RemoteUnavailable      the sync remote cannot be used for now       exit 1
    ├── EnvironmentFaultError      a full disk, a read-only file system (ENV-*) exit 1
    ├── ArchiveError               an archive refused by import (ARCHIVE-*)     exit 1
    ├── FleetError                 the work queue or a queued item (FLEET-*)    exit 1
    └── WorkNotFoundError          no task or work session with that id (WORK-003) exit 1

Control flow that is not a failure lives outside the hierarchy: ``PauseRequested``
(Ctrl+C / SIGTERM, exit 130) and ``ApprovalPending`` (an approval no one can answer
now, exit 20).

Every error class is defined here and listed in ``__all__``; ``acode`` exports those a
library caller catches (docs/library.md, "Errors"). tests/test_public_api.py checks this
tree against the classes.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "EXIT_APPROVAL_PENDING",
    "EXIT_INTERRUPTED",
    "AcodeError",
    "AmbiguousSessionError",
    "ApprovalChangedError",
    "ApprovalPending",
    "ArchiveError",
    "CheckpointError",
    "ConfigError",
    "ContinuationError",
    "CookieError",
    "DatabaseDamagedError",
    "EnvironmentFaultError",
    "EnvironmentValidationError",
    "ErrorCode",
    "FleetError",
    "ModelBusyError",
    "ModelError",
    "NonDeterminismError",
    "NothingToResumeError",
    "PauseRequested",
    "PlanError",
    "RemoteUnavailable",
    "SchemaTooNewError",
    "SessionLockedError",
    "SessionNotFoundError",
    "SessionPrunedError",
    "SessionTakenOverError",
    "StepFailedError",
    "StorageError",
    "StoreUnavailableError",
    "StoreUrlError",
    "TerminalStateError",
    "TooOldForAutopilotError",
    "UsageError",
    "WorkNotFoundError",
]

EXIT_APPROVAL_PENDING = 20
EXIT_INTERRUPTED = 130


class ErrorCode(StrEnum):
    """Stable codes: documented in docs/errors.md, never renumbered."""

    USAGE = "ACODE-USAGE-001"
    CONFIG_INVALID = "ACODE-CONFIG-001"
    PLAN_INVALID = "ACODE-PLAN-001"
    SESSION_NOT_FOUND = "ACODE-SESSION-001"
    SESSION_AMBIGUOUS = "ACODE-SESSION-002"
    SESSION_PRUNED = "ACODE-SESSION-003"
    SESSION_TAKEN_OVER = "ACODE-SESSION-004"
    NO_RESUMABLE = "ACODE-RESUME-001"
    TERMINAL_STATE = "ACODE-RESUME-002"
    LOCKED = "ACODE-RESUME-003"
    ENVIRONMENT = "ACODE-RESUME-004"
    CHECKPOINT_NOT_FOUND = "ACODE-RESUME-005"
    CONTINUATION = "ACODE-RESUME-006"
    IDEMPOTENCY_CONFLICT = "ACODE-RESUME-007"
    TOO_OLD_FOR_AUTOPILOT = "ACODE-RESUME-008"
    HANDOFF_FETCH = "ACODE-HANDOFF-001"
    HANDOFF_FORGED = "ACODE-HANDOFF-002"
    HANDOFF_OTHER_WORKSPACE = "ACODE-HANDOFF-003"
    HANDOFF_NO_SNAPSHOT = "ACODE-HANDOFF-004"
    CHECKPOINT_INVALID = "ACODE-CKPT-001"
    CHAIN_BROKEN = "ACODE-CKPT-002"
    KEY_CHANGED = "ACODE-CKPT-003"
    APPROVAL_CHANGED = "ACODE-APPROVE-001"
    KEY_WITHHELD = "ACODE-KEY-001"
    LOCK_PERMISSIONS = "ACODE-LOCK-001"
    LOCK_OWNER = "ACODE-LOCK-002"
    LOCK_HELD = "ACODE-LOCK-003"
    STEP_FAILED = "ACODE-STEP-001"
    MODEL = "ACODE-MODEL-001"
    STORAGE = "ACODE-DB-001"
    SCHEMA_TOO_NEW = "ACODE-DB-002"
    DATABASE_DAMAGED = "ACODE-DB-003"
    STORE_URL = "ACODE-DB-004"
    STORE_UNREACHABLE = "ACODE-DB-005"
    STORE_REFUSED = "ACODE-DB-006"
    WORK_COOKIE = "ACODE-WORK-001"
    WORK_CONTRACT = "ACODE-WORK-002"
    WORK_NOT_FOUND = "ACODE-WORK-003"
    WORK_CLOSED = "ACODE-WORK-004"
    INTERNAL = "ACODE-INTERNAL-001"
    DISK_FULL = "ACODE-ENV-001"
    READ_ONLY = "ACODE-ENV-002"
    NAME_TOO_LONG = "ACODE-ENV-003"
    ARCHIVE_INVALID = "ACODE-ARCHIVE-001"
    ARCHIVE_TOO_NEW = "ACODE-ARCHIVE-002"
    ARCHIVE_TAMPERED = "ACODE-ARCHIVE-003"
    ARCHIVE_OTHER_KEY = "ACODE-ARCHIVE-004"
    ARCHIVE_SESSION_EXISTS = "ACODE-ARCHIVE-005"
    FLEET_WORK = "ACODE-FLEET-001"
    FLEET_ITEM = "ACODE-FLEET-002"
    FLEET_QUEUE = "ACODE-FLEET-003"


class AcodeError(Exception):
    """Root of every error acode raises on purpose."""

    code: ErrorCode = ErrorCode.USAGE
    exit_code: int = 1

    def __init__(
        self, message: str, *, hint: str | None = None, code: ErrorCode | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if code is not None:  # a more precise code within the class's family
            self.code = code

    def __str__(self) -> str:
        return f"{self.message}\n{self.hint}" if self.hint else self.message


class UsageError(AcodeError):
    code = ErrorCode.USAGE
    exit_code = 2


class ConfigError(UsageError):
    code = ErrorCode.CONFIG_INVALID


class PlanError(UsageError):
    code = ErrorCode.PLAN_INVALID


class AmbiguousSessionError(UsageError):
    code = ErrorCode.SESSION_AMBIGUOUS


class StoreUrlError(UsageError):
    """A store URL that no store backend takes: an unknown scheme, or a malformed URL."""

    code = ErrorCode.STORE_URL


class SessionNotFoundError(AcodeError):
    code = ErrorCode.SESSION_NOT_FOUND


class SessionPrunedError(SessionNotFoundError):
    """The session was removed by `acode session prune`, as its signed record says."""

    code = ErrorCode.SESSION_PRUNED


class NothingToResumeError(AcodeError):
    code = ErrorCode.NO_RESUMABLE
    exit_code = 14


class TerminalStateError(AcodeError):
    code = ErrorCode.TERMINAL_STATE
    exit_code = 15


class SessionLockedError(AcodeError):
    code = ErrorCode.LOCKED
    exit_code = 16


class SessionTakenOverError(AcodeError):
    """This process no longer holds the session's lease in the PostgreSQL store: another
    process took it over (its epoch is newer), or this one could not renew it in time.
    The store refused the write; the process writes nothing more of the session and
    stops. Not a StorageError: the session is not paused (it is not this process's to
    pause)."""

    code = ErrorCode.SESSION_TAKEN_OVER
    exit_code = 19


class EnvironmentValidationError(AcodeError):
    code = ErrorCode.ENVIRONMENT
    exit_code = 17


class ContinuationError(AcodeError):
    """What resume would do cannot be planned: the recorded plan and the recorded steps
    disagree. Nothing was written."""

    code = ErrorCode.CONTINUATION


class TooOldForAutopilotError(AcodeError):
    """Autopilot resumes on its own only an interruption under 24 hours old; an older one
    needs a person (or a flag that says one decided)."""

    code = ErrorCode.TOO_OLD_FOR_AUTOPILOT
    exit_code = 18


class CheckpointError(AcodeError):
    code = ErrorCode.CHECKPOINT_INVALID


class ApprovalChangedError(AcodeError):
    """What an approval gates changed between showing it and recording the decision:
    nothing was recorded."""

    code = ErrorCode.APPROVAL_CHANGED


class NonDeterminismError(AcodeError):
    code = ErrorCode.IDEMPOTENCY_CONFLICT


class StepFailedError(AcodeError):
    code = ErrorCode.STEP_FAILED


class ModelError(AcodeError):
    code = ErrorCode.MODEL


class ModelBusyError(ModelError):
    """The model server took the connection but gave no answer in time: it is busy (a
    local server finishing another request), not gone."""


class StorageError(AcodeError):
    code = ErrorCode.STORAGE


class SchemaTooNewError(StorageError):
    code = ErrorCode.SCHEMA_TOO_NEW


class DatabaseDamagedError(StorageError):
    """The database file is not what acode wrote: empty beside recorded sessions,
    truncated, or corrupt. acode never writes over it."""

    code = ErrorCode.DATABASE_DAMAGED


class StoreUnavailableError(StorageError):
    """The PostgreSQL store (``store.url``) cannot be used: its server does not answer
    (the machine's or the network's fault, ACODE-DB-005), or it refuses the login or the
    database (ACODE-DB-006). Its messages name the server without a password."""

    code = ErrorCode.STORE_UNREACHABLE


class RemoteUnavailable(StorageError):
    """The remote could not be used for now; ``reason`` says why, in a few words."""

    def __init__(self, remote: str, reason: str) -> None:
        super().__init__(
            f"cannot sync with the remote {remote}: {reason}",
            hint="nothing is lost: the events stay in the local database and are pushed when "
            "the remote answers again (`acode sync --wait` waits for it)",
        )
        self.remote = remote
        self.reason = reason


class EnvironmentFaultError(AcodeError):
    """The machine refused what a step did for a reason of its own: a full disk or quota,
    a read-only file system, a name too long for it. Not the step's failure: the session
    pauses, and resume runs the step again once the cause is gone."""

    code = ErrorCode.DISK_FULL


class ArchiveError(AcodeError):
    """A file `acode session import` refuses: not an archive, damaged, changed, made with
    another key or by a newer acode, or of a session the store holds otherwise. Nothing
    was written."""

    code = ErrorCode.ARCHIVE_INVALID


class FleetError(AcodeError):
    """The fleet's work queue cannot be used (FLEET-003), an item cannot be acted on
    (FLEET-002), or a worker could not do an item's work: clone, push (FLEET-001)."""

    code = ErrorCode.FLEET_WORK


class WorkNotFoundError(AcodeError):
    """No task or work session with that id."""

    code = ErrorCode.WORK_NOT_FOUND


class CookieError(UsageError):
    """A call that writes to a work session presented no cookie, or the wrong one."""

    code = ErrorCode.WORK_COOKIE


class PauseRequested(BaseException):
    """Ctrl+C or SIGTERM asked the run to pause. Derives from BaseException so that a
    step's ``except Exception`` cannot swallow it."""


class ApprovalPending(Exception):
    """An approval step needs a decision and no one can be asked now."""

    def __init__(self, step_id: str, question: str) -> None:
        super().__init__(f"step {step_id!r} awaits approval: {question}")
        self.step_id = step_id
        self.question = question
