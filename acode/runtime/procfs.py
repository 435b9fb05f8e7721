"""What Linux's /proc says about processes: the one place acode reads it.

Where there is no /proc, nothing is found, and the callers fall back to doing less
(never to guessing).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import NamedTuple

__all__ = [
    "ProcessInfo",
    "command_line",
    "environment",
    "holders",
    "open_files",
    "process_start_ns",
    "processes",
]


class ProcessInfo(NamedTuple):
    """One process as /proc tells it."""

    pid: int
    state: str  # "Z" for a zombie
    parent: int
    group: int


def processes() -> Iterator[ProcessInfo]:
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                # The command name, in parentheses, may hold spaces: split after it.
                fields = f.read().rsplit(b")", 1)[1].split()
            yield ProcessInfo(int(entry), fields[0].decode(), int(fields[1]), int(fields[2]))
        except (OSError, IndexError, ValueError):
            continue


def process_start_ns() -> int | None:
    """The latest instant this process can have started at, in wall-clock nanoseconds;
    None where /proc does not tell.

    The kernel counts a process's start in clock ticks since boot (a hundredth of a
    second, usually), rounded down: one tick is added, so that nothing written before
    the process started can ever seem to come after it."""
    try:
        with open("/proc/self/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])  # field 22, starttime
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None
    since_boot = (ticks + 1) * 1_000_000_000 // hz
    return time.time_ns() - time.clock_gettime_ns(time.CLOCK_BOOTTIME) + since_boot


def environment(pid: int) -> list[bytes]:
    """The process's environment as ``NAME=value`` entries (empty when unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def open_files(pid: int) -> Iterator[str]:
    """The paths the process has open."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return
    for fd in fds:
        try:
            yield os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue


def holders(dev: int, ino: int) -> list[int] | None:
    """The processes that have the file ``(dev, ino)`` open, among those whose open files
    can be read (one's own); None where there is no /proc to tell."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    found = []
    for entry in entries:
        if not entry.isdigit():
            continue
        fd_dir = f"/proc/{entry}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                info = os.stat(f"{fd_dir}/{fd}")  # the open file itself, not the link
            except OSError:
                continue
            if info.st_ino == ino and info.st_dev == dev:
                found.append(int(entry))
                break
    return found


def command_line(pid: int) -> str:
    """The process's command line, its arguments joined by spaces ("" when unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return ""
    return " ".join(os.fsdecode(arg) for arg in raw.split(b"\0") if arg)
