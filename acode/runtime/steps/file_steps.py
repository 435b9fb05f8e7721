"""read, write and edit: workspace files, written atomically, rolled back from pre-images."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acode.domain.kinds import StepKind
from acode.errors import StepFailedError
from acode.runtime.files import (
    atomic_write,
    resolve_in_workspace,
    sha256_bytes,
    sha256_file,
    stat_file,
)
from acode.runtime.steps.base import Outcome, Prepared, Recovery, RecoveryAction, StepEnv
from acode.runtime.workspace import StatePaths
from acode.store.records import FileRow

if TYPE_CHECKING:
    from acode.store.sqlite_store import SqliteStore

__all__ = [
    "EditStep",
    "ReadStep",
    "WriteStep",
    "observe",
    "read_in_workspace",
    "restore_image",
    "write_file",
]


def read_in_workspace(workspace: Path, path: str) -> bytes | None:
    """The content of workspace file ``path``; None when there is none."""
    target = resolve_in_workspace(workspace, path)
    try:
        return target.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError as exc:
        raise StepFailedError(f"{path} is a directory, not a file") from exc


def observe(env: StepEnv, path: str, sha: str | None = None) -> FileRow:
    """The file as it is now, for the environment check of a later resume. ``sha``
    saves re-reading a file whose content the caller just handled."""
    target = resolve_in_workspace(env.ctx.workspace, path)
    stat = stat_file(target)
    if stat is None:
        return FileRow(path, None, None, None)
    return FileRow(path, sha or sha256_file(target), stat.size, stat.mtime_ns)


def write_file(env: StepEnv, path: str, data: bytes) -> None:
    """An atomic write whose temporary file stays in acode's state, never the workspace."""
    target = resolve_in_workspace(env.ctx.workspace, path)
    temp_dir = StatePaths(env.ctx.workspace).temp_dir(env.ctx.session_id)
    atomic_write(target, data, temp_dir=temp_dir)


def restore_image(env: StepEnv, path: str, sha: str | None) -> None:
    """Put ``path`` back as it was: the stored image, or absent."""
    if sha is None:
        resolve_in_workspace(env.ctx.workspace, path).unlink(missing_ok=True)
    else:
        write_file(env, path, env.store.blob(sha))


@dataclass(frozen=True)
class ReadStep:
    path: str
    kind: StepKind = StepKind.READ
    durable_start: bool = False

    def input(self) -> dict[str, Any]:
        return {"path": self.path}

    def prepare(self, env: StepEnv) -> Prepared:
        return Prepared()

    def execute(self, env: StepEnv, prepared: Prepared) -> Outcome:
        data = read_in_workspace(env.ctx.workspace, self.path)
        if data is None:
            raise StepFailedError(
                f"cannot read {self.path}: no such file in {env.ctx.workspace}",
                hint="check the path; paths are relative to the workspace",
            )
        sha = sha256_bytes(data)
        return Outcome(
            {"path": self.path, "sha256": sha, "size": len(data)},
            blobs=((sha, data),),
            files=(observe(env, self.path, sha),),
        )

    def recover(self, env: StepEnv, started: dict[str, Any]) -> Recovery:
        return Recovery(RecoveryAction.RETRY, "reads are simply read again")

    def value(self, store: SqliteStore, result: Any) -> str:
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
        return Prepared({"path": self.path, "pre": pre, "post": blobs[0][0]}, tuple(blobs))

    def execute(self, env: StepEnv, prepared: Prepared) -> Outcome:
        post_sha, data = prepared.blobs[0]
        write_file(env, self.path, data)
        return Outcome(
            {
                "path": self.path,
                "sha256": post_sha,
                "size": len(data),
                "pre": prepared.record["pre"],
            },
            files=(observe(env, self.path, post_sha),),
        )

    def recover(self, env: StepEnv, started: dict[str, Any]) -> Recovery:
        current = sha256_file(resolve_in_workspace(env.ctx.workspace, self.path))
        pre, post = started["pre"], started["post"]
        if current == post:
            size = len(env.store.blob(post))
            return Recovery(
                RecoveryAction.ALREADY_DONE,
                f"{self.path} already has the expected content",
                result={"path": self.path, "sha256": post, "size": size, "pre": pre},
                files=(observe(env, self.path, post),),
            )
        if current == pre:
            return Recovery(RecoveryAction.RETRY, f"{self.path} is untouched; writing it again")
        if env.strategy == "retry":
            return Recovery(
                RecoveryAction.RETRY, f"{self.path} changed; strategy retry writes over it"
            )
        restore_image(env, self.path, pre)
        return Recovery(
            RecoveryAction.ROLLBACK_AND_RETRY,
            f"{self.path} was partly changed; restored the recorded pre-image",
            restored=(self.path,),
        )

    def value(self, store: SqliteStore, result: Any) -> dict[str, Any]:
        return dict(result)


@dataclass(frozen=True)
class WriteStep(_Replace):
    path: str
    content: bytes
    kind: StepKind = StepKind.WRITE
    durable_start: bool = True

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
