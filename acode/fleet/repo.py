"""The repositories a fleet works on: their URLs checked and shown without credentials,
cloned into a scratch workspace, and the session's result pushed back as a branch.

A repository URL comes from whoever queued the item and reaches ``git`` on every worker:
one that git would read as an option (``--upload-pack=...``), or a transport that runs a
command (``ext::``), is refused before it is queued, and every URL is passed after ``--``.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

from acode.errors import FleetError, UsageError
from acode.security.redaction import redact
from acode.system.git_command import run_git

__all__ = [
    "check_branch",
    "check_repo_url",
    "clone",
    "fleet_id",
    "mask_url",
    "push_result",
    "result_branch",
]

_SCHEMES = ("https", "http", "ssh", "git", "file")
# user@host:path, git's scp-like form (no scheme, a colon before any slash)
_SCP_LIKE = re.compile(r"[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+")
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0"}  # a worker has no one to type a password
_IDENTITY = ["-c", "user.name=acode worker", "-c", "user.email=acode-worker@localhost"]


def mask_url(url: str) -> str:
    """``url`` with its user and password replaced by ``***`` (a token is often the user
    part: ``https://TOKEN@host/...``)."""
    if "://" not in url:
        return redact(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(a repository URL that cannot be read)"
    if "@" not in parts.netloc:
        return redact(url)
    host = parts.netloc.rsplit("@", 1)[1]
    return redact(parts._replace(netloc=f"***@{host}").geturl())


def check_repo_url(url: str) -> str:
    """The URL to queue: a ``scheme://`` URL of a transport git runs no command for, an
    ``user@host:path``, or an absolute path (a bare repository on disk), made absolute."""
    text = url.strip()
    problem = None
    if not text or not text.isprintable():
        problem = "it is empty or holds control characters"
    elif text.startswith("-"):
        problem = "it starts with '-', which git would read as an option"
    elif "::" in text.split("/", 1)[0]:
        problem = "git's transport helpers (ext::, fd::) run commands; give a URL or a path"
    elif "://" in text:
        scheme = text.split("://", 1)[0].lower()
        if scheme not in _SCHEMES:
            problem = f"the scheme {scheme!r} is not one of {', '.join(_SCHEMES)}"
    elif not _SCP_LIKE.fullmatch(text):
        path = Path(text).expanduser().resolve()
        if not path.is_dir():
            problem = "it is neither a URL nor a directory on this machine"
        text = str(path)
    if problem is not None:
        raise UsageError(
            f"--repo {mask_url(text)}: {problem}",
            hint="give the repository as https://host/org/repo.git, ssh://..., "
            "user@host:org/repo.git or the path of a repository on disk",
        )
    return text


def check_branch(branch: str) -> str:
    """A branch name git takes (``git check-ref-format --branch``)."""
    result = run_git(Path.cwd(), ["check-ref-format", "--branch", "--", branch])
    if branch.startswith("-") or result.returncode != 0:
        raise UsageError(
            f"--branch {branch!r}: not a valid branch name",
            hint="give the name of a branch of the repository, such as main",
        )
    return result.stdout.strip()


def fleet_id(session_id: str) -> str:
    """``<short id>-<6 more>``: the short id (8 hex digits) is the time the session
    started to a minute, shared by every session a fleet starts in that minute; the end
    of its random part tells them apart."""
    digits = session_id.replace("-", "")
    return f"{digits[:8]}-{digits[-6:]}"


def result_branch(session_id: str) -> str:
    return f"acode/{fleet_id(session_id)}"


def clone(url: str, branch: str | None, target: Path) -> None:
    """``git clone`` of ``url`` (``branch``, else its default) into ``target``."""
    args = ["clone", "--quiet", "--no-local"]
    if branch:
        args += ["--branch", branch]
    result = run_git(target.parent, [*args, "--", url, str(target)], env=_GIT_ENV)
    if result.returncode != 0:
        raise FleetError(
            f"cannot clone {mask_url(url)}: {_said(result.stderr, url)}",
            hint="check the URL and that this worker may read it (acode queue list shows the "
            "reason; queue the item again once it is fixed)",
        )


def push_result(workspace: Path, url: str, session_id: str) -> str:
    """Commit what the session left in the work tree (if anything) and push HEAD to
    ``acode/<short id>`` of ``url``, never forcing: a branch of that name holding other
    work is left alone and reported. Returns the branch."""
    branch = result_branch(session_id)
    if run_git(workspace, ["status", "--porcelain"]).stdout.strip():
        for args in (
            ["add", "--all"],
            [*_IDENTITY, "commit", "--quiet", "-m", f"acode: work tree of session {session_id}"],
        ):
            done = run_git(workspace, args, env=_GIT_ENV)
            if done.returncode != 0:
                raise FleetError(
                    f"cannot commit the session's work tree: {_said(done.stderr, url)}"
                )
    pushed = run_git(
        workspace, ["push", "--quiet", "--", url, f"HEAD:refs/heads/{branch}"], env=_GIT_ENV
    )
    if pushed.returncode != 0:
        rejected = "rejected" in pushed.stderr or "non-fast-forward" in pushed.stderr
        reason = (
            f"the branch {branch} of {mask_url(url)} holds other commits: not overwritten"
            if rejected
            else f"cannot push {branch} to {mask_url(url)}: {_said(pushed.stderr, url)}"
        )
        raise FleetError(reason)
    return branch


def _said(stderr: str, url: str) -> str:
    """git's last words, without the URL's credentials."""
    lines = [line for line in stderr.replace(url, mask_url(url)).splitlines() if line.strip()]
    text = lines[-1].strip() if lines else "git failed"
    return redact(text if len(text) <= 300 else text[:297] + "...")
