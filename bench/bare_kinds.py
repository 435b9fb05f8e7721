"""Each step kind written by hand: the system calls a step of that kind cannot do without,
with the guarantees it gives, and nothing else (no event chain, no signed checkpoint, no
progress file, no path resolution from descriptors).

What each kind promises, and so what its bare loop must do (docs/architecture.md, "What
a step kind fsyncs"):

- read: re-run on resume, so no record before it; its completion records the content
  read (a blob) and the file's stat: one ``synchronous=FULL`` commit.
- write and edit: the pre-image and the intended post-image are durable before the file
  changes (a FULL commit), so that a crash at any instant can be rolled back or
  recognised as done; the file is replaced atomically and durably (temporary file
  staged outside the workspace, fsync, rename, directory fsync); the completion is a
  second FULL commit.
- run with ``paths``: the declared files' contents are durable before the command runs
  (a FULL commit), the command runs in a new process group with its output captured,
  that group noted by the command's shell before the command starts (so that a resume
  after a kill can stop what it left running), the declared files are hashed again
  afterwards, and the completion is a FULL commit.
- run without ``paths`` in a git work tree: the same with a snapshot of the whole work
  tree instead, a commit kept under a ref, built by git from a copy of the user's index
  (the cheapest way git offers to record "what is here now").
- commit: ``git add -A``, ``git commit`` with the step's trailer, the new HEAD read back,
  and one FULL commit of the completion.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["BareKinds"]

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, payload TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS blobs (sha TEXT PRIMARY KEY, data BLOB NOT NULL)",
)


class BareKinds:
    """A workspace and a WAL database with ``synchronous=FULL``; one method per kind."""

    def __init__(self, workspace: Path, database: Path) -> None:
        self.workspace = workspace
        self._conn = sqlite3.connect(database, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        for statement in _SCHEMA:
            self._conn.execute(statement)
        self._dir_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._notes = database.parent / "children"
        self._notes.mkdir(exist_ok=True)
        # The temporary file of a write is staged outside the workspace (same file
        # system), so that a kill before the rename leaves no debris in the user's tree.
        (database.parent / "tmp").mkdir(exist_ok=True)
        self._temp_fd = os.open(database.parent / "tmp", os.O_RDONLY | os.O_DIRECTORY)

    def close(self) -> None:
        os.close(self._dir_fd)
        os.close(self._temp_fd)
        self._conn.close()

    def _record(self, payload: dict[str, Any], blobs: tuple[tuple[str, bytes], ...] = ()) -> None:
        self._conn.execute("BEGIN IMMEDIATE")
        self._conn.executemany("INSERT OR IGNORE INTO blobs (sha, data) VALUES (?, ?)", blobs)
        self._conn.execute(
            "INSERT INTO events (payload) VALUES (?)",
            (json.dumps(payload, separators=(",", ":")),),
        )
        self._conn.execute("COMMIT")

    def _read(self, name: str) -> tuple[bytes, os.stat_result]:
        fd = os.open(name, _READ_FLAGS, dir_fd=self._dir_fd)
        with open(fd, "rb", closefd=True) as handle:
            return handle.read(), os.fstat(fd)

    def _replace(self, name: str, data: bytes) -> None:
        temp = f".bare-tmp-{name}"
        fd = os.open(temp, _TEMP_FLAGS, 0o644, dir_fd=self._temp_fd)
        with open(fd, "wb", closefd=True) as handle:
            handle.write(data)
            handle.flush()
            os.fsync(fd)
        os.rename(temp, name, src_dir_fd=self._temp_fd, dst_dir_fd=self._dir_fd)
        os.fsync(self._dir_fd)

    # -- the kinds --------------------------------------------------------------------

    def read(self, step: str, name: str) -> str:
        data, info = self._read(name)
        sha = hashlib.sha256(data).hexdigest()
        file_row = [name, sha, info.st_size, info.st_mtime_ns, info.st_ino]
        self._record({"step": step, "sha256": sha, "file": file_row}, ((sha, data),))
        return data.decode("utf-8", errors="replace")

    def write(self, step: str, name: str, data: bytes) -> None:
        current, _ = self._read(name)
        self._replace_recorded(step, name, current, data)

    def edit(self, step: str, name: str, old: str, new: str) -> None:
        current, _ = self._read(name)
        text = current.decode("utf-8", errors="surrogateescape")
        if text.count(old) != 1:
            raise ValueError(f"{old!r} is not in {name} exactly once")
        data = text.replace(old, new, 1).encode("utf-8", errors="surrogateescape")
        self._replace_recorded(step, name, current, data)

    def _replace_recorded(self, step: str, name: str, current: bytes, data: bytes) -> None:
        pre, post = hashlib.sha256(current).hexdigest(), hashlib.sha256(data).hexdigest()
        self._record({"step": step, "pre": pre, "post": post}, ((post, data), (pre, current)))
        self._replace(name, data)
        info = os.stat(name, dir_fd=self._dir_fd, follow_symlinks=False)
        self._record({"step": step, "file": [name, post, info.st_size, info.st_mtime_ns]})

    def run(self, step: str, command: str, paths: tuple[str, ...]) -> None:
        """With ``paths``: their snapshot; without, the work tree's, kept by git."""
        if paths:
            blobs = []
            for name in paths:
                data, _ = self._read(name)
                blobs.append((hashlib.sha256(data).hexdigest(), data))
            self._record({"step": step, "snapshot": [sha for sha, _ in blobs]}, tuple(blobs))
        else:
            self._record({"step": step, "ghost": self._snapshot(step)})
        # The process group noted by the command's shell before the command runs, so
        # that a resume after a kill can stop what it left running (acode.system.orphans).
        # No time-out: subprocess's (Popen.wait polling with sleeps) costs a short command
        # a millisecond, and one done right costs nothing until it fires.
        note = self._notes / f"{step}.pgid"
        proc = subprocess.Popen(
            ["/bin/sh", "-c", f"echo $$ > {shlex.quote(str(note))} && eval {shlex.quote(command)}"],
            cwd=self.workspace,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        stdout, _ = proc.communicate()
        note.unlink()
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, command)
        files = []
        for name in paths:
            data, info = self._read(name)
            files.append([name, hashlib.sha256(data).hexdigest(), info.st_size])
        self._record(
            {"step": step, "exit_code": proc.returncode, "stdout": stdout.decode()}
            | {"files": files}
        )

    def _snapshot(self, step: str) -> str:
        index = self.workspace / ".git" / "bare-index"
        shutil.copyfile(self.workspace / ".git" / "index", index)
        env = {**os.environ, "GIT_INDEX_FILE": str(index)}
        self._git("add", "-A", env=env)
        tree = self._git("write-tree", env=env)
        commit = self._git("commit-tree", tree, "-p", "HEAD", "-m", "snapshot")
        self._git("update-ref", f"refs/bare/{step}", commit)
        return commit

    def commit(self, step: str, message: str) -> str:
        self._git("add", "-A", "--", ".")
        full = f"{message}\n\nAcode-Step: {step}\n"
        self._git("commit", "--quiet", "--allow-empty", "--cleanup=whitespace", "-m", full)
        sha = self._git("rev-parse", "HEAD")
        self._record({"step": step, "sha": sha})
        return sha

    def _git(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            ["git", *args],
            cwd=self.workspace,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()
