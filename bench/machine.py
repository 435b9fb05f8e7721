"""The machine a benchmark ran on, and where its temporary files may live."""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Machine", "bench_root", "describe", "filesystem_of", "fsync_latency_us"]

# Memory-backed filesystems make fsync free: numbers measured there say nothing about disks.
_MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs", "overlay-tmpfs"})


@dataclass(frozen=True)
class Filesystem:
    mount_point: str
    device: str
    fstype: str

    def __str__(self) -> str:
        return f"{self.fstype} ({self.device} on {self.mount_point})"


@dataclass(frozen=True)
class Machine:
    cpu: str
    cores: int
    python: str
    sqlite: str
    kernel: str
    filesystem: Filesystem
    fsync_us: float  # measured before the benchmark
    commit: str
    fsync_after_us: float | None = None  # and after it: the drift in between


def filesystem_of(path: Path) -> Filesystem:
    """The mount that holds ``path`` (the longest mount point that is a prefix of it)."""
    resolved = str(path.resolve())
    best = Filesystem("/", "?", "?")
    try:
        lines = Path("/proc/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return best
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        device, mount_point, fstype = fields[0], fields[1].replace("\\040", " "), fields[2]
        inside = resolved == mount_point or resolved.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best.mount_point):
            best = Filesystem(mount_point, device, fstype)
    return best


def bench_root(repo: Path) -> Path:
    """A directory for the benchmark's databases on the repository's filesystem: the
    system temporary directory when it is that filesystem, else ``<repo>/scratch``."""
    system = Path(tempfile.gettempdir())
    same_device = system.stat().st_dev == repo.stat().st_dev
    if same_device and filesystem_of(system).fstype not in _MEMORY_FILESYSTEMS:
        return system
    scratch = repo / "scratch"
    scratch.mkdir(exist_ok=True)
    return scratch


def compile_acode() -> bool:
    """Write acode's bytecode, as an installed acode has it: where PYTHONDONTWRITEBYTECODE
    is set (an editable install here), every process would compile acode's modules again
    as it imports them (half a second of a start), and a figure would measure that. True
    when it is written."""
    import compileall

    import acode

    return bool(compileall.compile_dir(Path(acode.__file__).parent, quiet=1))


def fsync_latency_us(directory: Path, samples: int = 200) -> float:
    """Median time to append 200 bytes to a file and fsync it: the disk's floor for
    a durable commit."""
    path = directory / "fsync-probe"
    times: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(samples):
            start = time.perf_counter()
            os.write(fd, b"x" * 200)
            os.fsync(fd)
            times.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times) * 1e6


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _commit(repo: Path) -> str:
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def describe(repo: Path, directory: Path) -> Machine:
    return Machine(
        cpu=_cpu_model(),
        cores=os.cpu_count() or 1,
        python=f"{platform.python_implementation()} {platform.python_version()}",
        sqlite=sqlite3.sqlite_version,
        kernel=f"{platform.system()} {platform.release()}",
        filesystem=filesystem_of(directory),
        fsync_us=fsync_latency_us(directory),
        commit=_commit(repo),
    )
