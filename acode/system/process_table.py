"""What the system says about its processes, through psutil (Linux's /proc, macOS's
libproc and sysctl), and Linux's /proc itself where psutil would round what it says: the
one place acode asks it.

psutil is imported by each function that needs it, never as acode starts. A process acode
may not look into (another user's) or that ends while it looks is passed over: the
callers then do less, never guess. A process is held as a ``psutil.Process``, which
knows its pid and its start time: :func:`kill` signals none whose pid the system has
given to another process since it was found.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil
    from psutil import Process

__all__ = [
    "Process",
    "carrying",
    "child_groups",
    "command_line",
    "group_running",
    "holders",
    "kill",
    "kill_descendants",
    "kill_tree",
    "own_file_paths",
    "process_start_ns",
    "process_table_id",
    "start_mark",
]

_NS_PER_SECOND = 1_000_000_000


def _in_group(group: int) -> Iterator[psutil.Process]:
    import psutil

    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == group:
                yield psutil.Process(pid)
        except (OSError, psutil.Error):
            continue  # ended while we looked


def group_running(group: int) -> bool:
    """Whether a process of process group ``group`` runs. Zombies do not count: a PID 1
    that does not reap (many containers have one) leaves orphans as zombies for good."""
    import psutil

    for proc in _in_group(group):
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                return True
    return False


def carrying(
    name: str, value: str, *, group: int | None = None, unless: tuple[str, str] | None = None
) -> list[psutil.Process]:
    """The running processes (of process group ``group``; None: of any) whose environment
    sets ``name`` to ``value``, among those whose environment can be read (this user's);
    ``unless``: not those whose environment sets that name to another value."""
    import psutil

    found = []
    for proc in psutil.process_iter() if group is None else _in_group(group):
        with contextlib.suppress(psutil.Error):
            environ = proc.environ()
            if environ.get(name) != value:
                continue
            if unless is not None and environ.get(unless[0], unless[1]) != unless[1]:
                continue
            # A zombie's environment reads empty: its status is asked of the few that match.
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def kill(processes: Iterable[psutil.Process]) -> None:
    """SIGKILL each of ``processes`` that still runs, unless its pid now belongs to another
    process (psutil compares its start time with the one it was found with)."""
    import psutil

    for proc in processes:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def kill_tree(leader: int) -> None:
    """SIGKILL the process group that ``leader`` leads and every descendant of ``leader``,
    those that left its group (``setsid``) too. The descendants are listed first: once
    their parents die they are the children of another process."""
    import psutil

    try:
        descendants = psutil.Process(leader).children(recursive=True)
    except psutil.Error:
        descendants = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader, signal.SIGKILL)
    kill(descendants)


def kill_descendants() -> None:
    """SIGKILL every process this one started and theirs (the commands of its steps),
    those in process groups of their own with their groups; never this process."""
    import psutil

    try:
        me = psutil.Process()
        children = me.children()
        descendants = me.children(recursive=True)
    except psutil.Error:
        return
    own = os.getpgrp()
    for child in children:
        with contextlib.suppress(OSError):
            group = os.getpgid(child.pid)
            if group != own:
                os.killpg(group, signal.SIGKILL)
    kill(descendants)


def child_groups() -> set[int]:
    """The process groups of this process's children."""
    import psutil

    groups = set()
    for child in psutil.Process().children():
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(child.pid))
    return groups


def holders(file: os.stat_result, name: str) -> list[int]:
    """The processes that have ``file`` (its device and inode) open under a path whose last
    part is ``name``, among those whose open files can be read (this user's)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            paths = [f.path for f in proc.open_files() if os.path.basename(f.path) == name]
        except psutil.Error:
            continue
        if any(_is(path, file) for path in paths):
            found.append(proc.pid)
    return found


def _is(path: str, file: os.stat_result) -> bool:
    try:
        info = os.stat(path)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == (file.st_dev, file.st_ino)


def command_line(pid: int) -> str:
    """The process's command line, its arguments joined by spaces ("" when unreadable)."""
    import psutil

    try:
        return " ".join(arg for arg in psutil.Process(pid).cmdline() if arg)
    except psutil.Error:
        return ""


def own_file_paths(fds: Collection[int]) -> dict[int, str]:
    """The paths of the regular files that this process's descriptors ``fds`` lead to."""
    import psutil

    try:
        return {f.fd: f.path for f in psutil.Process().open_files() if f.fd in fds}
    except psutil.Error:
        return {}


def process_start_ns() -> int | None:
    """The latest instant this process can have started at, in wall-clock nanoseconds;
    None where the system does not tell.

    The system rounds a process's start down (Linux counts it in clock ticks since boot, a
    hundredth of a second usually; macOS in microseconds): one unit is added, so that
    nothing written before the process started can ever seem to come after it."""
    import psutil

    try:
        started, booted = psutil.Process().create_time(), psutil.boot_time()
    except psutil.Error:
        return None
    if not psutil.LINUX:
        return (round(started * 1_000_000) + 1) * 1000
    # psutil adds the boot time that Linux gives in whole seconds to the ticks since boot:
    # only the ticks are taken from it, and the instant of boot from the clocks.
    hz = os.sysconf("SC_CLK_TCK")
    ticks = round((started - booted) * hz)
    since_boot = (ticks + 1) * _NS_PER_SECOND // hz
    return time.time_ns() - time.clock_gettime_ns(time.CLOCK_BOOTTIME) + since_boot


def process_table_id() -> str | None:
    """Which processes a pid names here: the kernel's boot (a random id each boot) and the
    pid namespace, so that two containers both called ``localhost`` differ, and so do two
    boots of one machine. Two processes with the same id see the same processes under the
    same pids. None where the system does not tell (not Linux, or a /proc that shows
    another pid namespace than this process's)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
        shown_as = os.readlink("/proc/self")
    except OSError:
        return None
    if not boot or shown_as != str(os.getpid()):
        return None
    return f"{boot}/{namespace}"


def start_mark(pid: int) -> int | None:
    """When the process ``pid`` started, as a number that no other process given that pid
    during this boot has (the clock ticks since boot); None when no process runs under
    ``pid`` (a zombie has stopped running) or the system does not tell.

    Read from /proc rather than psutil: psutil adds a boot time taken from the wall clock,
    which moves with it, and a start that moved would make a live process seem another."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name, in parentheses, may hold spaces and parentheses: the fields that
    # count come after the last ")".
    fields = stat.rpartition(")")[2].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])
