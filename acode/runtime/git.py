"""The git operations acode needs: checkpoint commits marked with trailers, and finding them.

Everything runs the ``git`` command line in the workspace and never writes git
configuration: a missing identity is supplied through environment variables for acode's
own commits only. The user's hooks run as they would for any commit.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from acode.errors import StepFailedError, UsageError
from acode.runtime.files import atomic_write

__all__ = [
    "FALLBACK_EMAIL",
    "FALLBACK_NAME",
    "commit_all",
    "ensure_state_ignored",
    "find_commit_with_trailer",
    "is_work_tree",
]

FALLBACK_NAME = "acode"
FALLBACK_EMAIL = "acode@localhost"
_IGNORE_ALL = b"*\n"
# git's own trailer keys are tokens: letters, digits and dashes.
_TRAILER_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")


def _git(
    workspace: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run git in ``workspace``; failures are returned, not raised (see :func:`_git_ok`)."""
    try:
        return subprocess.run(
            ["git", *args],
            cwd=workspace,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            check=False,
        )
    except OSError as exc:
        raise StepFailedError(
            f"cannot run git in {workspace}: {exc}",
            hint="install git and check that the workspace directory exists",
        ) from exc


def _git_ok(
    workspace: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
) -> str:
    result = _git(workspace, args, env=env)
    if result.returncode != 0:
        detail = result.stderr.strip() or result.stdout.strip() or f"exit {result.returncode}"
        raise StepFailedError(
            f"git {args[0]} failed in {workspace}: {detail}",
            hint="fix the problem git reports (a hook, a lock file, permissions), then resume",
        )
    return result.stdout


def is_work_tree(workspace: Path) -> bool:
    """True when ``workspace`` is inside a git work tree (and git can be run there)."""
    try:
        result = _git(workspace, ["rev-parse", "--is-inside-work-tree"])
    except StepFailedError:
        return False
    return result.returncode == 0 and result.stdout.strip() == "true"


def find_commit_with_trailer(workspace: Path, key: str, value_prefix: str) -> str | None:
    """The newest commit reachable from HEAD with a trailer ``key: value`` whose value
    starts with ``value_prefix``; None when there is none, HEAD has no commits yet, or
    ``workspace`` is not in a git repository."""
    _check_trailer(key, value_prefix)
    if _git(workspace, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"]).returncode != 0:
        return None
    # --grep narrows the scan cheaply; the trailer block is then checked exactly below,
    # because the grep also matches the string anywhere in a message.
    out = _git_ok(
        workspace,
        [
            "log",
            # A user's log.showSignature or color.ui=always would mix text into the format.
            "--no-show-signature",
            "--no-color",
            "--fixed-strings",
            f"--grep={key}: {value_prefix}",
            "--format=%H%x00%B%x00",
            "HEAD",
            "--",
        ],
    )
    fields = out.split("\0")
    for sha, message in zip(fields[0::2], fields[1::2], strict=False):
        if _has_trailer(message, key, value_prefix):
            return sha.strip()
    return None


def _has_trailer(message: str, key: str, value_prefix: str) -> bool:
    paragraphs = re.split(r"\n\s*\n", message.strip())
    if len(paragraphs) < 2:
        return False  # a lone paragraph is the subject and body, never a trailer block
    for line in paragraphs[-1].splitlines():
        name, sep, value = line.partition(": ")
        if sep and name == key and value.strip().startswith(value_prefix):
            return True
    return False


def commit_all(workspace: Path, message: str, trailers: Mapping[str, str]) -> str:
    """Stage every change in the workspace and commit it with ``trailers``; return the sha.

    The commit is made even when nothing changed (``--allow-empty``): the trailer is the
    durable record that the step ran. Only the workspace is staged (``git add -A -- .``),
    so a workspace in a subdirectory of a larger repository does not sweep in the rest.
    """
    for key, value in trailers.items():
        _check_trailer(key, value)
    if not message.strip():
        raise UsageError(
            "commit message is empty", hint="give the commit step a message to commit with"
        )
    env = _identity_env(workspace)
    _git_ok(workspace, ["add", "--all", "--", "."], env=env)
    lines = "\n".join(f"{key}: {value}" for key, value in trailers.items())
    full = f"{message.strip()}\n\n{lines}\n" if lines else f"{message.strip()}\n"
    # --cleanup=whitespace: a user's commit.cleanup=strip would eat lines starting with '#'.
    _git_ok(
        workspace,
        ["commit", "--quiet", "--allow-empty", "--cleanup=whitespace", "--message", full],
        env=env,
    )
    return _git_ok(workspace, ["rev-parse", "HEAD"]).strip()


def _check_trailer(key: str, value: str) -> None:
    if not _TRAILER_KEY.fullmatch(key):
        raise UsageError(
            f"git trailer key {key!r} is not a token of letters, digits and dashes",
            hint="use a key such as Acode-Step",
        )
    if "\n" in value or "\r" in value:
        raise UsageError(
            f"git trailer {key!r} has a value spanning several lines: {value!r}",
            hint="trailer values must fit on one line",
        )


def _identity_env(workspace: Path) -> dict[str, str]:
    """The environment for acode's commit: the user's, plus a fallback identity where the
    repository configures none (instead of writing to any git configuration)."""
    env = dict(os.environ)
    for field, role_var, fallback in (
        ("name", "NAME", FALLBACK_NAME),
        ("email", "EMAIL", FALLBACK_EMAIL),
    ):
        configured = _git(workspace, ["config", "--get", f"user.{field}"]).stdout.strip()
        # git itself falls back to $EMAIL before guessing: keep that choice of the user's.
        if configured or (field == "email" and os.environ.get("EMAIL")):
            continue
        for role in ("AUTHOR", "COMMITTER"):
            env.setdefault(f"GIT_{role}_{role_var}", fallback)
    return env


def ensure_state_ignored(state_dir: Path) -> None:
    """Make git ignore everything in ``state_dir`` (the .gitignore ignores itself too)."""
    ignore = state_dir / ".gitignore"
    try:
        current = ignore.read_bytes()
    except FileNotFoundError:
        current = None
    if current != _IGNORE_ALL:
        atomic_write(ignore, _IGNORE_ALL)
