"""Running the ``git`` command line for acode: text or raw bytes, failures returned or
raised as :class:`~acode.errors.StepFailedError` with git's own words.

acode's secrets are left out of git's environment: git runs the repository's hooks.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple, NoReturn

from acode.errors import StepFailedError
from acode.security.child_env import child_environment

__all__ = [
    "GitCall",
    "git_bytes",
    "git_bytes_together",
    "git_ok",
    "raise_git_failed",
    "run_git",
    "run_git_bytes",
]


def run_git(
    workspace: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run git in ``workspace`` with ``env`` added to the environment; failures are
    returned, not raised (see :func:`git_ok`)."""
    try:
        return subprocess.run(
            ["git", *args],
            cwd=workspace,
            env=child_environment(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            check=False,
        )
    except OSError as exc:
        raise _cannot_run(workspace, exc) from exc


def git_ok(
    workspace: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
) -> str:
    """git's standard output; a failure raised with what git said."""
    result = run_git(workspace, args, env=env)
    if result.returncode != 0:
        detail = result.stderr.strip() or result.stdout.strip() or f"exit {result.returncode}"
        raise StepFailedError(
            f"git {args[0]} failed in {workspace}: {detail}",
            hint="fix the problem git reports (a hook, a lock file, permissions)",
        )
    return result.stdout


def git_bytes(
    workspace: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdin: bytes = b"",
) -> bytes:
    """Run git with raw bytes in and out (file names need not be UTF-8); raise on failure."""
    result = run_git_bytes(workspace, args, env=env, stdin=stdin)
    if result.returncode != 0:
        raise_git_failed(workspace, args, result)
    return result.stdout


def run_git_bytes(
    workspace: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdin: bytes = b"",
) -> subprocess.CompletedProcess[bytes]:
    """:func:`git_bytes` with a failure returned, not raised."""
    try:
        return subprocess.run(
            ["git", *args],
            cwd=workspace,
            env=child_environment(env),
            input=stdin,
            capture_output=True,
            check=False,
        )
    except OSError as exc:
        raise _cannot_run(workspace, exc) from exc


def raise_git_failed(
    workspace: Path, args: Sequence[str], result: subprocess.CompletedProcess[bytes]
) -> NoReturn:
    detail = result.stderr.decode(errors="replace").strip() or f"exit {result.returncode}"
    raise StepFailedError(
        f"git {args[0]} failed in {workspace}: {detail}",
        hint="fix the problem git reports (a lock file, permissions, disk space), then resume",
    )


def _cannot_run(workspace: Path, exc: OSError) -> StepFailedError:
    return StepFailedError(
        f"cannot run git in {workspace}: {exc}",
        hint="install git and check that the workspace directory exists",
    )


class GitCall(NamedTuple):
    """One git command of :func:`git_bytes_together`."""

    args: Sequence[str]
    env: Mapping[str, str] | None = None
    stdin: bytes = b""


def git_bytes_together(workspace: Path, calls: Sequence[GitCall]) -> list[bytes]:
    """:func:`git_bytes` for each of ``calls``, run at once (git spends most of such a
    call waiting on the file system); their outputs in order, or the first failure."""
    results: list[bytes | BaseException] = [b""] * len(calls)

    def run(i: int, call: GitCall) -> None:
        try:
            results[i] = git_bytes(workspace, call.args, env=call.env, stdin=call.stdin)
        except BaseException as exc:  # re-raised in the caller's thread below
            results[i] = exc

    threads = [threading.Thread(target=run, args=item) for item in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    outputs: list[bytes] = []
    for result in results:
        if isinstance(result, BaseException):
            raise result
        outputs.append(result)
    return outputs
