"""The git operations acode needs: checkpoint commits marked with trailers, finding them,
and what a commit would record (for its approval). Snapshots of the work tree are
:mod:`acode.system.snapshot`'s.

Everything runs the ``git`` command line in the workspace and never writes git
configuration: a missing identity is supplied through environment variables for acode's
own commits only. The user's hooks run as they would for any commit.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from acode.errors import StepFailedError, UsageError
from acode.system.git_command import git_bytes, git_ok, run_git
from acode.system.process_table import holders

__all__ = [
    "FALLBACK_EMAIL",
    "FALLBACK_NAME",
    "clear_stale_index_lock",
    "commit_all",
    "commit_preview",
    "find_commit_with_trailer",
    "is_work_tree",
]

FALLBACK_NAME = "acode"
FALLBACK_EMAIL = "acode@localhost"
# git's own trailer keys are tokens: letters, digits and dashes.
_TRAILER_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")


def is_work_tree(workspace: Path) -> bool:
    """True when ``workspace`` is inside a git work tree (and git can be run there)."""
    try:
        result = run_git(workspace, ["rev-parse", "--is-inside-work-tree"])
    except StepFailedError:
        return False
    return result.returncode == 0 and result.stdout.strip() == "true"


def find_commit_with_trailer(workspace: Path, key: str, value_prefix: str) -> str | None:
    """The newest commit reachable from HEAD with a trailer ``key: value`` whose value
    starts with ``value_prefix``; None when there is none, HEAD has no commits yet, or
    ``workspace`` is not in a git repository."""
    _check_trailer(key, value_prefix)
    # --grep narrows the scan cheaply; the trailer block is then checked exactly below,
    # because the grep also matches the string anywhere in a message.
    args = [
        "log",
        # A user's log.showSignature or color.ui=always would mix text into the format.
        "--no-show-signature",
        "--no-color",
        "--fixed-strings",
        f"--grep={key}: {value_prefix}",
        "--format=%H%x00%B%x00",
        "HEAD",
        "--",
    ]
    result = run_git(workspace, args)
    if result.returncode != 0:
        # Asked only when the log failed: a commit step costs a git process less.
        if run_git(workspace, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"]).returncode:
            return None
        git_ok(workspace, args)  # raises with what git says
    fields = result.stdout.split("\0")
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


def clear_stale_index_lock(workspace: Path, *, wait_s: float = 30.0) -> bool:
    """Remove ``index.lock`` when no process has it open: a git killed in the middle of
    a commit (a crash, a power cut) leaves it, and every later commit would fail on it.
    A lock some running git holds is never touched; it is waited for (up to ``wait_s``),
    since a git orphaned by a killed acode finishes and lets go. True when one was
    removed."""
    lock = Path(git_ok(workspace, ["rev-parse", "--git-path", "index.lock"]).strip())
    lock = lock if lock.is_absolute() else workspace / lock
    deadline = time.monotonic() + wait_s
    while lock.exists() and _held_open(lock):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    if not lock.exists():
        return False
    with contextlib.suppress(FileNotFoundError):
        lock.unlink()
    return True


def _held_open(path: Path) -> bool:
    try:
        file = os.stat(path)
    except FileNotFoundError:
        return False
    return bool(holders(file, path.name))


def commit_all(
    workspace: Path,
    message: str,
    trailers: Mapping[str, str],
    *,
    extra_env: Mapping[str, str] | None = None,
) -> str:
    """Stage every change in the workspace and commit it with ``trailers``; return the sha.

    The commit is made even when nothing changed (``--allow-empty``): the trailer is the
    durable record that the step ran. Only the workspace is staged (``git add -A -- .``),
    so a workspace in a subdirectory of a larger repository does not sweep in the rest.
    ``extra_env`` marks the git processes (acode marks them with its session, so that a
    resume can stop a git its killed predecessor left running).
    """
    for key, value in trailers.items():
        _check_trailer(key, value)
    if not message.strip():
        raise UsageError(
            "commit message is empty", hint="give the commit step a message to commit with"
        )
    env = {**_identity_env(workspace), **(extra_env or {})}
    git_ok(workspace, ["add", "--all", "--", "."], env=env)
    lines = "\n".join(f"{key}: {value}" for key, value in trailers.items())
    full = f"{message.strip()}\n\n{lines}\n" if lines else f"{message.strip()}\n"
    # --cleanup=whitespace: a user's commit.cleanup=strip would eat lines starting with '#'.
    git_ok(
        workspace,
        ["commit", "--quiet", "--allow-empty", "--cleanup=whitespace", "--message", full],
        env=env,
    )
    return git_ok(workspace, ["rev-parse", "HEAD"]).strip()


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
    """What acode's commit adds to the environment: a fallback identity where neither the
    repository nor the environment gives one (instead of writing to any git configuration)."""
    env: dict[str, str] = {}
    listed = run_git(workspace, ["config", "--get-regexp", r"^user\.(name|email)$"]).stdout
    configured = {
        key.removeprefix("user.")
        for key, _, value in (line.partition(" ") for line in listed.splitlines())
        if value.strip()
    }
    for field, role_var, fallback in (
        ("name", "NAME", FALLBACK_NAME),
        ("email", "EMAIL", FALLBACK_EMAIL),
    ):
        # git itself falls back to $EMAIL before guessing: keep that choice of the user's.
        if field in configured or (field == "email" and os.environ.get("EMAIL")):
            continue
        for role in ("AUTHOR", "COMMITTER"):
            if f"GIT_{role}_{role_var}" not in os.environ:
                env[f"GIT_{role}_{role_var}"] = fallback
    return env


def commit_preview(workspace: Path) -> tuple[str, tuple[str, ...]]:
    """What :func:`commit_all` would record now: git's diff of it against HEAD, and the
    paths it changes.

    Everything is staged as the commit stages it, but into a copy of the user's index,
    which is left as it was. Blob ids are written in full (``--full-index``), so the text
    changes whenever any content does, binary files included: an approval bound to this
    text is bound to the commit's content. Options fix what a user's configuration could
    change (prefixes, colours, external diff programs), so that the same work tree always
    gives the same text.
    """
    index = Path(git_ok(workspace, ["rev-parse", "--git-path", "index"]).strip())
    index = index if index.is_absolute() else workspace / index
    with tempfile.TemporaryDirectory(prefix="acode-index-") as scratch:
        copy = Path(scratch) / "index"
        with contextlib.suppress(FileNotFoundError):  # no index yet: a new repository
            shutil.copyfile(index, copy)
        env = {**os.environ, "GIT_INDEX_FILE": str(copy)}
        git_bytes(workspace, ["add", "--all", "--", "."], env=env)
        diff = git_bytes(workspace, [*_PLAIN_DIFF, "--full-index", "--find-renames"], env=env)
        names = git_bytes(workspace, [*_PLAIN_DIFF, "--name-only", "-z"], env=env)
    files = tuple(os.fsdecode(name) for name in names.split(b"\0") if name)
    return diff.decode("utf-8", errors="backslashreplace"), files


# The staged changes against HEAD (an unborn HEAD: the empty tree), of the whole
# repository as a commit records it, whatever the user's diff settings.
_PLAIN_DIFF = (
    "diff",
    "--cached",
    "--no-relative",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--unified=3",
    "--diff-algorithm=myers",
)
