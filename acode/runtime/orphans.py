"""Commands left running by a killed acode.

A `run` step's command runs in a process group of its own, so that a Ctrl+C reaches
acode and not the command. The price: when acode dies by SIGKILL or a crash, the command
lives on, and its effect could land after resume has run the step again. Each running
command is therefore noted in the session's state directory, and resume, which takes
the lock only once the old holder is gone, stops what is still running before anything
else happens.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from acode.runtime.workspace import StatePaths

__all__ = ["ChildNotes", "reap_orphans"]


def _children_dir(paths: StatePaths, session_id: str) -> Path:
    return paths.session_dir(session_id) / "children"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot: with the pid, it names one
    process, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


class ChildNotes:
    """Notes of the process groups started while it is open; removed when it closes,
    however the block ends (a SIGKILL is the case that leaves them behind, on purpose)."""

    def __init__(self, paths: StatePaths, session_id: str) -> None:
        self._directory = _children_dir(paths, session_id)
        self._notes: list[Path] = []

    def note(self, group: int) -> None:
        started = _start_time(group)
        if started is None:
            return  # already gone
        self._directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        note = self._directory / f"{group}-{started}"
        note.touch()
        self._notes.append(note)

    def __enter__(self) -> ChildNotes:
        return self

    def __exit__(self, *exc: object) -> None:
        for note in self._notes:
            with contextlib.suppress(OSError):
                note.unlink()


def reap_orphans(paths: StatePaths, session_id: str) -> list[int]:
    """Stop the process groups a dead run of this session left behind; their ids."""
    directory = _children_dir(paths, session_id)
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    stopped = []
    for name in names:
        group_text, _, started = name.partition("-")
        if group_text.isdigit() and _start_time(int(group_text)) == started:
            group = int(group_text)
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)
            _wait_gone(group, started)
            stopped.append(group)
        with contextlib.suppress(OSError):
            (directory / name).unlink()
    return stopped


def _wait_gone(group: int, started: str, seconds: float = 2.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and _start_time(group) == started:
        time.sleep(0.01)
