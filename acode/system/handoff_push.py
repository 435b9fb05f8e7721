"""Pushing the sessions' hand-off refs (``refs/acode/sessions/<id>``) to the workspace's
git remote, and what each push left: ``.agent/state/handoff/<id>.json``.

A push moves the remote's ref only forward along the chain this machine has (no ``+``
in the refspec): git's receive-pack swaps the ref from the value it advertised to the
new one, so a machine that took the session over and pushed its own commits is never
overwritten; such a refusal is a conflict, kept for a person to see, not retried. Any
other failure (no network, an unknown remote, a time-out) is the environment's: it is
noted with a time for the next try (exponential back-off) and the session runs on.

git runs in a session of its own with acode's child environment (the key withheld),
no terminal to ask on and ``GIT_TERMINAL_PROMPT=0``: it never waits for a password.
Whatever it says is shown with the credentials of any URL in it masked.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from acode.domain.backoff import Backoff
from acode.domain.config import mask_credentials
from acode.security.child_env import child_environment
from acode.security.redaction import redact
from acode.system.git_command import run_git
from acode.system.handoff_ref import HANDOFF_REF_ROOT, handoff_ref, session_of_ref
from acode.system.workspace import StatePaths

__all__ = [
    "PushState",
    "Pushed",
    "forget_session",
    "git_reason",
    "porcelain",
    "push_refs",
    "read_state",
    "refs_to_push",
    "run_remote_git",
    "write_record",
]

# What git is given to say why it could not push, at most (its last lines).
_REASON_CHARS = 300
_NO_PROMPT = {"GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never"}


class PushState(NamedTuple):
    """What the pushes of one session's ref left (times in µs since the epoch)."""

    pushed: str | None = None  # the commit the remote was last seen to hold
    last_attempt_us: int | None = None
    failures: int = 0  # in a row; 0 after a push that worked
    failing_since_us: int | None = None
    reason: str | None = None
    next_try_us: int | None = None
    conflict: bool = False  # the remote holds commits this chain does not: not retried

    def to_dict(self) -> dict[str, object]:
        return self._asdict()


class Pushed(NamedTuple):
    """How a push of several refs went: the sessions whose ref the remote now holds,
    the reason the others are not there (None: they all are), and when to try again
    (µs since the epoch; None: not in the background, a person decides)."""

    session_ids: tuple[str, ...]
    reason: str | None
    retry_at_us: int | None = None


def _state_file(paths: StatePaths, session_id: str) -> Path:
    return paths.state_dir / "handoff" / f"{session_id}.json"


def read_state(paths: StatePaths, session_id: str) -> PushState:
    """The session's push record; an empty one when there is none (or it is unreadable:
    a push then finds out again what the remote holds)."""
    try:
        data = json.loads(_state_file(paths, session_id).read_text(encoding="utf-8"))
        return PushState(**{k: data[k] for k in PushState._fields if k in data})
    except (OSError, ValueError, TypeError):
        return PushState()


def _write_state(paths: StatePaths, session_id: str, state: PushState) -> None:
    write_record(_state_file(paths, session_id), state.to_dict())


def write_record(target: Path, data: object) -> None:
    """Replace a push record (JSON) whole, in ``.agent/state/handoff``."""
    target.parent.mkdir(mode=0o700, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".handoff-", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(name, target)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


def forget_session(workspace: Path, paths: StatePaths, session_id: str) -> None:
    """Delete the session's hand-off ref here and its push record (a pruned session:
    whatever the remote received stays there). Repeating it is harmless."""
    ref = handoff_ref(session_id)
    run_git(workspace, ["update-ref", "-d", ref])
    _state_file(paths, session_id).unlink(missing_ok=True)


def refs_to_push(workspace: Path, paths: StatePaths, *, conflicts: bool = False) -> dict[str, str]:
    """session id -> the local commit of its ref, for every session's ref the remote is
    not known to hold; those the remote refused as conflicts only with ``conflicts``
    (a person asking again)."""
    result = run_git(
        workspace, ["for-each-ref", "--format=%(refname) %(objectname)", "--", HANDOFF_REF_ROOT]
    )
    pending: dict[str, str] = {}
    for line in result.stdout.splitlines():
        ref, _, commit = line.partition(" ")
        session_id = session_of_ref(ref)
        if session_id is None:
            continue
        state = read_state(paths, session_id)
        if state.pushed != commit and (conflicts or not state.conflict):
            pending[session_id] = commit
    return pending


def push_refs(
    workspace: Path,
    paths: StatePaths,
    remote: str,
    pending: dict[str, str],
    *,
    timeout: float,
    backoff: Backoff | None = None,
) -> Pushed:
    """Push ``pending`` (``refs_to_push``) to ``remote`` in one ``git push``, and record
    how each went."""
    if not pending:
        return Pushed((), None)
    refspecs = [f"{HANDOFF_REF_ROOT}/{sid}:{HANDOFF_REF_ROOT}/{sid}" for sid in sorted(pending)]
    now = time.time_ns() // 1000
    code, out, err = run_remote_git(
        workspace, ["push", "--porcelain", "--", remote, *refspecs], timeout
    )
    lines = porcelain(out)
    done: list[str] = []
    reasons: list[str] = []
    retries: list[int] = []
    for sid, commit in pending.items():
        state = read_state(paths, sid)
        line = lines.get(f"{HANDOFF_REF_ROOT}/{sid}")
        if line is not None and line[0] in " *=+":
            state = PushState(pushed=commit, last_attempt_us=now)
            done.append(sid)
        elif line is not None and line[0] == "!":
            why = git_reason(line[1]) or "refused by the remote"
            conflict = "non-fast-forward" in why or "fetch first" in why
            state = _failed(
                state, now, f"the remote refused the ref: {why}", backoff, conflict=conflict
            )
            reasons.append(state.reason or "")
        else:
            why = git_reason(err) or f"git push exited with status {code}"
            state = _failed(state, now, why, backoff, conflict=False)
            reasons.append(why)
        if state.next_try_us is not None:
            retries.append(state.next_try_us)
        _write_state(paths, sid, state)
    return Pushed(tuple(done), reasons[0] if reasons else None, min(retries, default=None))


def _failed(
    state: PushState, now: int, reason: str, backoff: Backoff | None, *, conflict: bool
) -> PushState:
    failures = state.failures + 1
    delay = (backoff or Backoff()).delay(failures, random.random())
    return state._replace(
        last_attempt_us=now,
        failures=failures,
        failing_since_us=state.failing_since_us or now,
        reason=reason,
        next_try_us=None if conflict else now + int(delay * 1_000_000),
        conflict=conflict,
    )


def porcelain(out: str) -> dict[str, tuple[str, str]]:
    """``git push --porcelain``: remote ref -> (flag, summary)."""
    found: dict[str, tuple[str, str]] = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and len(parts[0]) == 1:
            found[parts[1].partition(":")[2]] = (parts[0], parts[2])
    return found


def git_reason(text: str) -> str:
    """What git said, in a line: its errors, the credentials of any URL masked."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    # git's own verdicts say what went wrong; its advice after them is the same each time.
    said = [line for line in lines if line.startswith(("fatal:", "error:"))] or lines[-3:]
    return redact(mask_credentials("; ".join(said)))[-_REASON_CHARS:]


def run_remote_git(workspace: Path, args: list[str], timeout: float) -> tuple[int, str, str]:
    """git talking to a remote (a push, a fetch) in a session of its own, never asking
    for a password, killed with its children (ssh, a credential helper) when ``timeout``
    passes."""
    try:
        child = subprocess.Popen(
            ["git", *args],
            cwd=workspace,
            env=child_environment(_NO_PROMPT),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as exc:
        return 127, "", f"cannot run git: {exc}"
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return -1, "", f"git {args[0]} did not finish within {timeout:g} s"
    return child.returncode, out, err
