"""read, write and edit: workspace files, written atomically, rolled back from pre-images."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from acode.domain.kinds import StepKind
from acode.engine.steps.base import Outcome, Prepared, Recovery, RecoveryAction, StepEnv
from acode.errors import StepFailedError
from acode.store.records import FileRow
from acode.system.beneath import Beneath
from acode.system.files import sha256_bytes
from acode.system.workspace import StatePaths

if TYPE_CHECKING:
    from acode.store.base import EventStore

__all__ = [
    "EditStep",
    "ReadStep",
    "WriteStep",
    "observe",
    "read_file",
    "read_in_workspace",
    "restore_image",
    "write_file",
]


def read_in_workspace(workspace: Path, path: str) -> bytes | None:
    """The content of workspace file ``path``; None when there is none."""
    with Beneath(workspace) as tree:
        found = read_file(tree, path)
    return None if found is None else found[0]


def read_file(tree: Beneath, path: str) -> tuple[bytes, os.stat_result] | None:
    """The content of the workspace file ``path`` and its stat, from one descriptor;
    None when there is no such file."""
    try:
        opened = tree.open_read(path)
    except IsADirectoryError as exc:
        raise StepFailedError(f"{path} is a directory, not a file") from exc
    if opened is None:
        return None
    fd, info = opened
    with open(fd, "rb", closefd=True) as handle:
        return handle.read(), info


def observe(tree: Beneath, path: str, sha: str | None = None) -> FileRow:
    """The file as it is now, for the environment check of a later resume. ``sha``
    saves re-reading a file whose content the caller just handled."""
    if sha is not None:
        info = tree.stat(path)
        return (
            FileRow(path=path, sha256=None, size=None, mtime_ns=None)
            if info is None
            else _row(path, sha, info)
        )
    opened = tree.open_read(path)
    if opened is None:
        return FileRow(path=path, sha256=None, size=None, mtime_ns=None)
    fd, info = opened
    with open(fd, "rb", closefd=True) as handle:
        return _row(path, hashlib.file_digest(handle, "sha256").hexdigest(), info)


def _row(path: str, sha: str, info: os.stat_result) -> FileRow:
    return FileRow(
        path=path,
        sha256=sha,
        size=info.st_size,
        mtime_ns=info.st_mtime_ns,
        ctime_ns=info.st_ctime_ns,
        ino=info.st_ino,
    )


def write_file(env: StepEnv, tree: Beneath, path: str, data: bytes) -> os.stat_result:
    """An atomic write whose temporary file stays in acode's state, never the workspace;
    the written file's stat."""
    return tree.write(path, data, staging=StatePaths.temp_parts(env.ctx.session_id))


def restore_image(env: StepEnv, tree: Beneath, path: str, sha: str | None) -> None:
    """Put ``path`` back as it was: the stored image, or absent."""
    if sha is None:
        tree.unlink(path)
    else:
        write_file(env, tree, path, env.store.blob(sha))


@dataclass(frozen=True)
class ReadStep:
    path: str
    kind: StepKind = StepKind.READ
    durable_start: bool = False
    waits: ClassVar[bool] = False

    def input(self) -> dict[str, Any]:
        return {"path": self.path}

    def prepare(self, env: StepEnv) -> Prepared:
        return Prepared()

    def execute(self, env: StepEnv, prepared: Prepared) -> Outcome:
        with Beneath(env.ctx.workspace) as tree:
            found = read_file(tree, self.path)
        if found is None:
            raise StepFailedError(
                f"cannot read {self.path}: no such file in {env.ctx.workspace}",
                hint="check the path; paths are relative to the workspace",
            )
        data, info = found
        sha = sha256_bytes(data)
        return Outcome(
            {"path": self.path, "sha256": sha, "size": len(data)},
            blobs=((sha, data),),
            files=(_row(self.path, sha, info),),
            value=data.decode("utf-8", errors="replace"),  # what value() gives on replay
        )

    def recover(self, env: StepEnv, started: dict[str, Any]) -> Recovery:
        return Recovery(action=RecoveryAction.RETRY, detail="reads are simply read again")

    def value(self, store: EventStore, result: Any) -> str:
        return store.blob(result["sha256"]).decode("utf-8", errors="replace")


class _Replace:
    """What write and edit share: a pre-image, an expected post-image, and recovery
    by comparing the file with both."""

    path: str

    def new_content(self, current: bytes | None) -> bytes:
        raise NotImplementedError

    def prepare(self, env: StepEnv) -> Prepared:
        current = read_in_workspace(env.ctx.workspace, self.path)
        post = self.new_content(current)
        blobs = [(sha256_bytes(post), post)]
        pre = None
        if current is not None:
            pre = sha256_bytes(current)
            blobs.append((pre, current))
        return Prepared(
            record={"path": self.path, "pre": pre, "post": blobs[0][0]}, blobs=tuple(blobs)
        )

    def execute(self, env: StepEnv, prepared: Prepared) -> Outcome:
        post_sha, data = prepared.blobs[0]
        with Beneath(env.ctx.workspace) as tree:
            observed = _row(self.path, post_sha, write_file(env, tree, self.path, data))
        return Outcome(
            {
                "path": self.path,
                "sha256": post_sha,
                "size": len(data),
                "pre": prepared.record["pre"],
            },
            files=(observed,),
        )

    def recover(self, env: StepEnv, started: dict[str, Any]) -> Recovery:
        with Beneath(env.ctx.workspace) as tree:
            return self._recover(env, tree, started)

    def _recover(self, env: StepEnv, tree: Beneath, started: dict[str, Any]) -> Recovery:
        current = tree.sha256(self.path)
        pre, post = started["pre"], started["post"]
        if current == post:
            size = len(env.store.blob(post))
            return Recovery(
                action=RecoveryAction.ALREADY_DONE,
                detail=f"{self.path} already has the expected content",
                result={"path": self.path, "sha256": post, "size": size, "pre": pre},
                files=(observe(tree, self.path, post),),
            )
        if current == pre:
            return Recovery(
                action=RecoveryAction.RETRY, detail=f"{self.path} is untouched; writing it again"
            )
        if env.strategy == "retry":
            return Recovery(
                action=RecoveryAction.RETRY,
                detail=f"{self.path} changed; strategy retry writes over it",
            )
        restore_image(env, tree, self.path, pre)
        return Recovery(
            action=RecoveryAction.ROLLBACK_AND_RETRY,
            detail=f"{self.path} was partly changed; restored the recorded pre-image",
            restored=(self.path,),
        )

    def value(self, store: EventStore, result: Any) -> dict[str, Any]:
        return dict(result)


@dataclass(frozen=True)
class WriteStep(_Replace):
    path: str
    content: bytes
    kind: StepKind = StepKind.WRITE
    durable_start: bool = True
    waits: ClassVar[bool] = False

    def input(self) -> dict[str, Any]:
        return {"path": self.path, "content": sha256_bytes(self.content)}

    def new_content(self, current: bytes | None) -> bytes:
        return self.content


@dataclass(frozen=True)
class EditStep(_Replace):
    path: str
    old: str
    new: str
    kind: StepKind = StepKind.EDIT
    durable_start: bool = True
    waits: ClassVar[bool] = False

    def input(self) -> dict[str, Any]:
        return {"path": self.path, "old": self.old, "new": self.new}

    def new_content(self, current: bytes | None) -> bytes:
        if current is None:
            raise StepFailedError(f"cannot edit {self.path}: no such file")
        text = current.decode("utf-8", errors="surrogateescape")
        count = text.count(self.old)
        if count == 0:
            raise StepFailedError(
                f"cannot edit {self.path}: the text to replace was not found",
                hint=f"'old' must appear exactly once; looked for {self.old[:80]!r}",
            )
        if count > 1:
            raise StepFailedError(
                f"cannot edit {self.path}: the text to replace appears {count} times",
                hint="make 'old' longer so that it matches exactly one place",
            )
        return text.replace(self.old, self.new, 1).encode("utf-8", errors="surrogateescape")
