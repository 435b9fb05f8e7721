"""Environment validation: is it safe to continue this session here and now?

Checked before anything is written: the workspace exists; every file the session read
or wrote is as the session left it (git's stat data first: size, mtime, change time and
inode; a hash only when one of those differs, so 10,000 unchanged files cost 10,000
stats); the configured model answers and
lists the model, when steps still need it; the configuration equals the one the session
started with. All of it within one deadline, resume.validation_timeout_seconds: the
model's answer is waited for only as long as the rest left.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from acode.domain.config import AcodeConfig, config_to_dict
from acode.domain.textdiff import unified_diff
from acode.errors import AcodeError, ModelBusyError, StorageError, UsageError
from acode.store.records import FileFields, FileRow
from acode.system.beneath import Beneath, most_held

if TYPE_CHECKING:
    from acode.engine.rollback import Kept
    from acode.store.base import EventStore

__all__ = [
    "Change",
    "ChangedFile",
    "ConfigChange",
    "EnvironmentReport",
    "ModelCheck",
    "RollbackPreview",
    "Severity",
    "Toucher",
    "changed_files",
    "check_model",
    "config_changes",
    "diff_against_record",
    "recorded_content",
    "since_pause",
]


class Change(StrEnum):
    MODIFIED = "Modified"
    DELETED = "Deleted"
    CREATED = "Created"


class Severity(StrEnum):
    """What a changed file means for the resume (acode.resume.conflicts)."""

    CONFLICT = "conflict"  # another session wrote it since: blocking
    BLOCKING = "blocking"  # a step still to run uses it
    INFORMATIONAL = "informational"  # only steps that are done touched it


class Toucher(NamedTuple):
    """The step that last read or wrote a file."""

    step: str
    kind: str | None
    where: str  # "Task 1, Step 2" in a plan session, else "step 3"; "" when not known
    session: str | None = None  # another session's short id

    def describe(self) -> str:
        verb = {"read": "read", "write": "written", "edit": "edited"}.get(self.kind or "")
        place = f"{self.where} ({self.step})" if self.where else self.step
        return f"{verb or 'touched'} by {place}"

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "kind": self.kind, "where": self.where, "session": self.session}


class ChangedFile(NamedTuple):
    """A workspace file that differs from what the session recorded, or (``since_pause``)
    from the work tree as a pause left it."""

    path: str
    change: Change
    modified_ns: int | None  # when it changed (its mtime); None when it is gone
    recorded_sha: str | None
    since_pause: bool = False
    left_blob: str | None = None  # its git blob as the pause left it; None: not there
    touched_by: Toucher | None = None  # the step of this session that last touched it
    severity: Severity = Severity.BLOCKING
    reason: str = ""  # why it has that severity
    conflict: Toucher | None = None  # another session's step that wrote it since

    @property
    def blocking(self) -> bool:
        return self.severity is not Severity.INFORMATIONAL

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "change": self.change.value,
            "modified_ns": self.modified_ns,
            "since_pause": self.since_pause,
            "severity": self.severity.value,
            "reason": self.reason,
            "touched_by": None if self.touched_by is None else self.touched_by.to_dict(),
            "conflict": None if self.conflict is None else self.conflict.to_dict(),
        }


class RollbackPreview(NamedTuple):
    """What rolling the interrupted `run` step back to its ghost snapshot will do, as
    things are now (acode.engine.rollback)."""

    step: str
    snapshot: str  # the ghost: the work tree before the step ran
    as_left: str | None  # the work tree as the pause left it; None after a kill
    revert: tuple[str, ...]
    delete: tuple[str, ...]
    kept: tuple[tuple[str, str], ...]  # (path, why it is left as it is)
    backup_ref: str  # where the files as found are kept before any change

    @property
    def changes_anything(self) -> bool:
        return bool(self.revert or self.delete or self.kept)

    def to_dict(self) -> dict[str, Any]:
        from acode.engine.rollback import restore_hint

        return {
            "step": self.step,
            "snapshot": self.snapshot,
            "as_left": self.as_left,
            "revert": list(self.revert),
            "delete": list(self.delete),
            "kept": [{"path": path, "reason": why} for path, why in self.kept],
            "backup_ref": self.backup_ref,
            "restore": restore_hint(self.backup_ref),
        }


class ConfigChange(NamedTuple):
    """A setting whose value differs from the one the session started with."""

    key: str
    recorded: object
    current: object


class ModelCheck(NamedTuple):
    """Whether the model server answers and serves the configured model."""

    base_url: str
    name: str
    problem: str | None  # None: reachable and the model is listed
    # Connected but silent within the check's time: a problem like any other (a local
    # server still answering an earlier request, such as one a killed acode left, is
    # the likely cause, and waiting for it the cure).
    busy: bool = False

    def busy_hint(self, then: str) -> str:
        """What to do about a server that did not answer; ``then``: the command after."""
        return (
            "a local model server answers one request at a time, and may still be answering "
            "one that an interrupted run left: wait until it answers "
            f"(`curl -s {self.base_url.rstrip('/')}/models`), then {then}"
        )


class EnvironmentReport(NamedTuple):
    """What resume found before continuing: files, settings, the model."""

    workspace: str
    workspace_exists: bool
    checked: tuple[str, ...] = ()  # every file compared, in path order
    changed: tuple[ChangedFile, ...] = ()
    config: tuple[ConfigChange, ...] = ()
    model: ModelCheck | None = None
    rollback: RollbackPreview | None = None
    seconds: float = 0.0  # what the validation took
    budget_seconds: float = 0.0  # resume.validation_timeout_seconds

    @property
    def files_checked(self) -> int:
        return len(self.checked)

    @property
    def valid(self) -> bool:
        """Nothing at all differs from what the session left."""
        return not self.problems() and not self.changed and not self.config

    @property
    def blocking(self) -> tuple[ChangedFile, ...]:
        """The changed files that stop a resume unless the person says go on."""
        return tuple(c for c in self.changed if c.blocking)

    @property
    def ready(self) -> bool:
        """Nothing stops the resume: no problem, no blocking change, the same settings
        (what the person may waive is not counted as waived here)."""
        return not self.problems() and not self.blocking and not self.config

    def checks(self) -> list[dict[str, Any]]:
        """Each check with its outcome, as the text report lists them."""
        found = [
            {"check": "workspace", "ok": self.workspace_exists, "detail": self.workspace},
            {
                "check": "files",
                "ok": not self.blocking,
                "detail": f"{self.files_checked} checked, {len(self.changed)} changed, "
                f"{len(self.blocking)} blocking",
            },
        ]
        if self.model is not None:
            problem = self.model.problem
            found.append(
                {"check": "model", "ok": problem is None, "detail": problem or self.model.name}
            )
        keys = ", ".join(c.key for c in self.config)
        detail = f"changed: {keys}" if keys else "unchanged"
        found.append({"check": "configuration", "ok": not self.config, "detail": detail})
        return found

    def problems(self) -> list[str]:
        """What stops a resume whatever the person decides."""
        found = []
        if not self.workspace_exists:
            found.append(f"the workspace {self.workspace} does not exist")
        if self.model is not None and self.model.problem:
            found.append(self.model.problem)
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "workspace": self.workspace,
            "workspace_exists": self.workspace_exists,
            "files_checked": self.files_checked,
            "files": list(self.checked),
            "changed_files": [c.to_dict() for c in self.changed],
            "config_changes": [
                {"key": c.key, "recorded": c.recorded, "current": c.current} for c in self.config
            ],
            "model": None
            if self.model is None
            else {
                "base_url": self.model.base_url,
                "name": self.model.name,
                "problem": self.model.problem,
                "busy": self.model.busy,
            },
            "rollback": None if self.rollback is None else self.rollback.to_dict(),
            "valid": self.valid,
            "checks": self.checks(),
            "ready": self.ready,
            "seconds": round(self.seconds, 3),
            "budget_seconds": self.budget_seconds,
        }


def changed_files(
    workspace: Path, recorded: Iterable[FileFields], *, ignore: frozenset[str] = frozenset()
) -> tuple[list[str], list[ChangedFile]]:
    """(the files checked, the ones that differ from the record). ``recorded``: FileRows,
    or their fields as plain tuples (:meth:`EventStore.file_fields`). Each path is
    resolved from the workspace's descriptor (:class:`Beneath`), so that none is followed
    out.

    A resume checks every file a session touched, 200,000 in a big repository: each
    directory is resolved and opened once, and each file of it is one ``fstatat`` on
    that descriptor compared with the record, in a loop that builds no object of its
    own per file; at most a few hundred directories are held open at a time. A file
    that differs there (a link put in its place does), one whose name starts with a
    dot, and one in a directory that cannot be opened so (gone, leading out, acode's
    or git's) take the careful way (:func:`_change`): resolved name by name, hashed
    only when its stat data differs."""
    checked: list[str] = []
    changed: list[ChangedFile] = []
    stat = os.stat
    limit = most_held()
    with Beneath(workspace) as tree:
        directories: dict[str, int | None] = {}
        last, fd = None, None  # paths come in order: mostly the same directory as the last
        for row in recorded:
            path, sha, size, mtime_ns, ctime_ns, ino = row
            if ignore and path in ignore:
                continue
            checked.append(path)
            parent, slash, name = path.rpartition("/")
            if parent != last or not slash:
                parent += slash  # "/x" is not in the root: the careful way refuses it
                fd = directories.get(parent, _UNSEEN)
                if fd == _UNSEEN:
                    if tree.held >= limit:
                        tree.release()
                        directories.clear()
                    fd = directories[parent] = _directory(tree, parent)
                last = parent[:-1] if slash else None
            if fd is not None and sha is not None and name and name[0] != ".":
                try:
                    info = stat(name, dir_fd=fd, follow_symlinks=False)
                except (OSError, ValueError):
                    pass  # gone, or no name the kernel takes: the careful way says which
                else:
                    # The same inode as recorded is the regular file it was (a symlink
                    # there now has an inode of its own). None recorded never equals.
                    if (
                        info.st_mtime_ns == mtime_ns
                        and info.st_ctime_ns == ctime_ns
                        and info.st_ino == ino
                        and info.st_size == size
                    ):
                        continue
            change = _checked(tree, FileRow(*row))
            if change is not None:
                changed.append(change)
    return checked, changed


_UNSEEN = -1  # not a descriptor: a directory not resolved yet


def _directory(tree: Beneath, parent: str) -> int | None:
    """The descriptor of the workspace directory ``parent`` ("" or "dir/": its links
    followed inside the workspace, held by ``tree``); None when its files must each take
    the careful way: it is not there, not a directory, leads out, or is acode's or git's."""
    if not parent:
        return tree.root_fd
    if parent[0] == "/" or ".agent" in parent or ".git" in parent.casefold():
        return None
    try:
        return tree.open_dir(tree.resolve(parent[:-1]))
    except (UsageError, OSError):
        return None


def _checked(tree: Beneath, row: FileRow) -> ChangedFile | None:
    try:
        return _change(tree, row)
    except UsageError:
        # It leads outside the workspace now (a symlink put on its way): changed.
        kind = Change.CREATED if row.sha256 is None else Change.MODIFIED
        return ChangedFile(path=row.path, change=kind, modified_ns=None, recorded_sha=row.sha256)


def _change(tree: Beneath, row: FileRow) -> ChangedFile | None:
    stat = tree.stat(row.path)
    if stat is None:
        return (
            None
            if row.sha256 is None
            else ChangedFile(
                path=row.path, change=Change.DELETED, modified_ns=None, recorded_sha=row.sha256
            )
        )
    if row.sha256 is None:
        return ChangedFile(
            path=row.path, change=Change.CREATED, modified_ns=stat.st_mtime_ns, recorded_sha=None
        )
    if (
        stat.st_mtime_ns == row.mtime_ns
        and stat.st_ctime_ns == row.ctime_ns
        and stat.st_ino == row.ino
        and stat.st_size == row.size
    ):
        # Unchanged without reading it. The change time and the inode cannot be put
        # back (`touch -r` sets the mtime, and so moves the ctime): a file rewritten
        # to the same size with its mtime restored differs here. A row from before
        # they were recorded (None) is hashed.
        return None
    if tree.sha256(row.path) != row.sha256:
        return ChangedFile(
            path=row.path,
            change=Change.MODIFIED,
            modified_ns=stat.st_mtime_ns,
            recorded_sha=row.sha256,
        )
    return None


def since_pause(workspace: Path, kept: Kept) -> ChangedFile:
    """A person's change to the work tree since the pause, as a changed file."""
    if kept.before is None:
        change = Change.CREATED
    elif not kept.exists:
        change = Change.DELETED
    else:
        change = Change.MODIFIED
    modified = None
    if kept.exists:
        with contextlib.suppress(AcodeError, OSError), Beneath(workspace) as tree:
            info = tree.stat(kept.path)
            modified = None if info is None else info.st_mtime_ns
    return ChangedFile(
        path=kept.path,
        change=change,
        modified_ns=modified,
        recorded_sha=None,
        since_pause=True,
        left_blob=kept.before,
    )


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


# How long this resume may take to check, not what the session does: read from the
# workspace's configuration as it is now (its default changed from 10 to 2 seconds).
_NOT_THE_SESSIONS = frozenset({"resume.validation_timeout_seconds"})


def config_changes(recorded: AcodeConfig, current: AcodeConfig) -> list[ConfigChange]:
    before = _flatten(config_to_dict(recorded))
    after = _flatten(config_to_dict(current))
    return [
        ConfigChange(key=key, recorded=before.get(key), current=after.get(key))
        for key in sorted((before.keys() | after.keys()) - _NOT_THE_SESSIONS)
        if before.get(key) != after.get(key)
    ]


# The least time the model server is given when the rest of the check took all of it:
# a local server lists its models in milliseconds, and a resume is not refused because
# the workspace is large.
MODEL_PROBE_SECONDS = 0.2
# The longest the model server is waited for, whatever the setting says: a check that
# waits an hour checks nothing, and a time-out far beyond it overflows the clock.
MODEL_PROBE_LONGEST_SECONDS = 3600.0
# What ending an exchange that ran out of time takes (the socket shut down, the error
# made), with a margin (docs/benchmarks.md, "Figures behind design choices").
_GIVING_UP_SECONDS = 0.03


def check_model(config: AcodeConfig, *, until: float | None = None) -> ModelCheck:
    """Whether the configured model answers by ``until`` (a ``time.monotonic()``
    instant; by default resume.validation_timeout_seconds from now), given at least
    MODEL_PROBE_SECONDS. A server that takes the connection and says nothing in that
    time is a problem like one that is gone: nothing is known of it."""
    import importlib

    from acode.system.model_client import list_models

    # The HTTP client is loaded before the time left is measured: loading it takes a
    # share of the budget worth counting (docs/benchmarks.md, "Figures behind design choices").
    importlib.import_module("acode.system.http_deadline")
    if until is None:
        wait = config.resume.validation_timeout_seconds
    else:  # what is left once the client is loaded, less what giving up takes
        wait = max(until - time.monotonic() - _GIVING_UP_SECONDS, MODEL_PROBE_SECONDS)
    wait = min(wait, MODEL_PROBE_LONGEST_SECONDS)
    settings = config.model
    try:
        names = list_models(settings, timeout=wait)
    except ModelBusyError:
        return ModelCheck(
            base_url=settings.base_url,
            name=settings.name,
            problem=f"the model server at {settings.base_url} accepted the connection but did not "
            f"answer within {wait:.1f} s",
            busy=True,
        )
    except AcodeError as exc:
        return ModelCheck(
            base_url=settings.base_url, name=settings.name, problem=f"model server: {exc.message}"
        )
    if settings.name not in names:
        shown = ", ".join(names[:8]) or "none"
        return ModelCheck(
            base_url=settings.base_url,
            name=settings.name,
            problem=f"the model {settings.name!r} is not served at {settings.base_url} (it serves: "
            f"{shown}); for Ollama run `ollama pull {settings.name}`",
        )
    return ModelCheck(base_url=settings.base_url, name=settings.name, problem=None)


def recorded_content(
    store: EventStore | None, workspace: Path, change: ChangedFile
) -> bytes | None:
    """What ``change`` is measured from: the content the session recorded, or the file
    as the pause left it (empty when it was not there); None when it is not at hand."""
    if change.since_pause:
        if change.left_blob is None:
            return b""
        from acode.system.snapshot import read_blob

        try:
            return read_blob(workspace, change.left_blob)
        except AcodeError:
            return None
    if store is None or change.recorded_sha is None:
        return None
    try:
        return store.blob(change.recorded_sha)
    except StorageError:
        return None


def diff_against_record(workspace: Path, change: ChangedFile, recorded: bytes | None) -> str:
    """A unified diff from the content the session recorded (or the pause left) to the
    file as it is now."""
    if recorded is None:
        return f"(no recorded content for {change.path}: only its hash was kept)\n"
    try:
        with Beneath(workspace) as tree:
            now = tree.read_bytes(change.path) or b""
    except (AcodeError, OSError) as exc:
        return f"(cannot show {change.path} as it is now: {exc})\n"
    diff = unified_diff(
        recorded.decode("utf-8", errors="replace"),
        now.decode("utf-8", errors="replace"),
        f"{change.path} ({'as paused' if change.since_pause else 'recorded'})",
        f"{change.path} (now)",
    )
    return diff or f"(no textual difference in {change.path})\n"
