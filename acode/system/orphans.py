"""Commands left running by a killed acode.

A `run` step's command runs in a process group of its own, so that a Ctrl+C reaches
acode and not the command. The price: when acode dies by SIGKILL or a crash, the command
lives on, and its effect could land after resume has run the step again.

So every command notes its own process group in the session's state directory before it
starts (the note is written by the command's shell itself, so no instant exists where
it runs unnoted), and resume, which gets the lock only once the old holder is gone,
stops whatever of those groups still runs before anything else happens. A process is
recognised by its group and by the session id in its environment, never by a pid
alone, which the system may have given to someone else since; one found outside the noted
groups is killed only while its pid is still its own (psutil compares its start time).

Only a session that has started commands can have left any: the first command of a
session (a run step's, a commit step's git) makes the session's ``children`` folder, and
resume looks for processes only where that folder exists. A session of python and model
steps alone resumes without asking the system for its processes, which costs more than
such a resume's own work (psutil's import alone; docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from acode.system.process_table import carrying, kill
from acode.system.workspace import StatePaths

if TYPE_CHECKING:
    from acode.system.process_table import Process

__all__ = ["SESSION_ENV", "STATE_ENV", "NotedCommand", "commands_started", "reap_orphans"]

SESSION_ENV = "ACODE_SESSION_ID"
# The session id alone is not whose a process is: a copy of the workspace (a second
# clone, a hand-off) holds the same session, and a resume there must not stop the
# commands of the run here. A process without it was started by an acode before it.
STATE_ENV = "ACODE_STATE_DIR"


def _children_dir(paths: StatePaths, session_id: str) -> Path:
    return paths.session_dir(session_id) / "children"


def commands_started(paths: StatePaths, session_id: str) -> dict[str, str]:
    """Say that the session starts a command, before it starts: the environment that
    marks the command as the session's. Nothing is fsynced: a power loss leaves no
    process to find, and a kill leaves the folder made."""
    directory = _children_dir(paths, session_id)
    # Each made private, not only the last: mkdir(parents=True) makes the others 0777
    # less the umask, and the session's folder holds its progress file.
    if not directory.is_dir():  # made by the session's first command
        for folder in (paths.sessions_dir, directory.parent, directory):
            folder.mkdir(exist_ok=True, mode=0o700)
    return {SESSION_ENV: session_id, STATE_ENV: str(paths.state_dir)}


class NotedCommand:
    """A command that writes its own note before it runs; the note goes when the block
    ends, however it ends (a SIGKILL of acode is what leaves it, on purpose)."""

    def __init__(self, paths: StatePaths, session_id: str, name: str, command: str) -> None:
        commands_started(paths, session_id)
        self._note = _children_dir(paths, session_id) / f"{name}.pgid"
        # The command runs in the shell that wrote the note, whose pid is the group's id
        # (a new session): `eval` of the command as one quoted word is what
        # `exec /bin/sh -c` of it was, without starting a second shell each step.
        self.command = f"echo $$ > {shlex.quote(str(self._note))} && eval {shlex.quote(command)}"

    def __enter__(self) -> NotedCommand:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self._note.unlink()


def _ours(paths: StatePaths, session_id: str, group: int | None = None) -> list[Process]:
    """The live processes (of ``group``) that this workspace's ``session_id`` started."""
    return carrying(SESSION_ENV, session_id, group=group, unless=(STATE_ENV, str(paths.state_dir)))


def reap_orphans(paths: StatePaths, session_id: str) -> list[int]:
    """Stop what a dead run of this session left behind: the process groups its
    commands noted, and any other process carrying the session in its environment
    (the git of a commit step, say). Returns the ids of the groups and processes."""
    if not _children_dir(paths, session_id).is_dir():
        return []  # it never started a command
    stopped = _reap_noted(paths, session_id)
    others = [p for p in _ours(paths, session_id) if p.pid != os.getpid()]
    kill(others)
    return stopped + [p.pid for p in others]


def _reap_noted(paths: StatePaths, session_id: str) -> list[int]:
    directory = _children_dir(paths, session_id)
    try:
        notes = list(directory.iterdir())
    except OSError:
        return []
    stopped = []
    for note in notes:
        with contextlib.suppress(OSError, ValueError):
            group = int(note.read_text().strip())
            if _ours(paths, session_id, group):
                with contextlib.suppress(OSError):
                    os.killpg(group, signal.SIGKILL)
                _wait_gone(paths, group, session_id)
                stopped.append(group)
        with contextlib.suppress(OSError):
            note.unlink()
    return stopped


def _wait_gone(paths: StatePaths, group: int, session_id: str, seconds: float = 2.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and _ours(paths, session_id, group):
        time.sleep(0.01)
