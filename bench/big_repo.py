"""A big repository (issue 19): what acode costs in a git work tree the size of an
ordinary monorepo, side by side with what git itself takes in the same run to find what
changed, the physical limit of a snapshot that costs what changed.

The repository is built in the run: folders of 100 small Python files (500 of them,
50,000 files; 2,000 with --full), written from Python and committed with one ``git add``
and one ``git commit``. On it, round after round (each round measures everything once,
so that the machine's drift hits all alike):

- ``git status``; and ``cp .git/index T; GIT_INDEX_FILE=T git add -A; git write-tree``,
  the tree of the work tree built by git from a copy of the user's index;
- a ``run`` step through the real CLI: ``acode run --json`` on a plan of ``echo N >>
  log.txt`` steps; the time between two steps' ``done`` lines as they reach the pipe is
  the step's whole cost to the person waiting, and less the same command run bare
  (``/bin/sh -c``) its overhead; the duration the step's line printed is kept beside it;
- the ghost snapshot alone: ``acode.system.snapshot.snapshot_worktree``, in this process,
  after one file changed;
- a restore of one changed file: ``acode.engine.rollback.roll_back``, what resuming a
  killed ``run`` step does, back to a snapshot taken before the file changed;
- environment validation as bench/budget.py measures it (``changed_files`` over the
  files table's rows) for a session that touched every file of the repository (a
  ``run`` step that declares ``paths: [pkg*/**]``), and ``acode resume ID --dry-run`` on
  it, start-up included;
- ``acode resume ID --dry-run`` on a session killed (SIGKILL) inside a ``run`` step,
  whose resume previews the rollback to the step's ghost snapshot; and ``acode --help``,
  what of those two is start-up.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.workloads import ACODE_CLI

__all__ = [
    "BARE",
    "DRY_KILLED",
    "DRY_TOUCHED",
    "GIT_ADD",
    "GIT_STATUS",
    "RESTORE",
    "SNAPSHOT",
    "STARTUP",
    "STEP",
    "VALIDATION",
    "BigRepo",
    "build_repository",
    "run_big_repo",
]

GIT_STATUS = "git status"
GIT_ADD = "git add -A on a copy of the index, git write-tree"
STEP = "a run step, whole"
BARE = "its command, bare"
SNAPSHOT = "ghost snapshot (snapshot_worktree)"
RESTORE = "restore of one changed file (roll_back)"
VALIDATION = "environment validation"
DRY_TOUCHED = "acode resume --dry-run, every file touched"
DRY_KILLED = "acode resume --dry-run, killed in a run step"
STARTUP = "acode --help (start-up alone)"

FILES_A_FOLDER = 100
_IDENTITY = ("-c", "user.name=bench", "-c", "user.email=bench@example.invalid")
_CHANGED = "pkg0000/m000.py"  # the file the snapshot and the restore find changed


@dataclass
class BigRepo:
    files: int
    seconds: dict[str, list[float]] = field(default_factory=dict)  # what -> samples
    printed: list[float] = field(default_factory=list)  # seconds the step lines showed
    same_tree: bool | None = None  # the snapshot's tree is git's own, from the copied index

    def median_ms(self, what: str) -> float:
        return statistics.median(self.seconds[what]) * 1e3

    def overhead_ms(self) -> float:
        """A run step's whole cost less its command run bare."""
        return self.median_ms(STEP) - self.median_ms(BARE)

    def add(self, what: str, seconds: float) -> None:
        self.seconds.setdefault(what, []).append(seconds)


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=repo,
        env=None if env is None else {**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def build_repository(repo: Path, files: int) -> None:
    """``files`` small Python files, FILES_A_FOLDER a folder, committed."""
    repo.mkdir(parents=True)
    for folder in range(-(-files // FILES_A_FOLDER)):
        directory = repo / f"pkg{folder:04d}"
        directory.mkdir()
        for i in range(min(FILES_A_FOLDER, files - folder * FILES_A_FOLDER)):
            (directory / f"m{i:03d}.py").write_text(
                f'"""Module {i} of package {folder}."""\n\nVALUE = {folder * 1000 + i}\n',
                encoding="utf-8",
            )
    _git(repo, "init", "-q")
    # No automatic repacking in the middle of a measurement.
    _git(repo, "config", "gc.auto", "0")
    _git(repo, "add", "-A")
    _git(repo, *_IDENTITY, "commit", "-qm", "a big repository")


def _timed(what: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    what()
    return time.perf_counter() - start


def _git_add_tree(repo: Path, scratch: Path) -> str:
    """The work tree's tree as git builds it from a copy of the user's index."""
    index = scratch / "index-copy"
    shutil.copyfile(repo / ".git" / "index", index)
    env = {"GIT_INDEX_FILE": str(index)}
    _git(repo, "add", "-A", env=env)
    return _git(repo, "write-tree", env=env).strip()


def _acode(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(ACODE_CLI), *args, "-w", str(repo)],
        capture_output=True,
        text=True,
        check=False,
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"acode {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done


def _plan(scratch: Path, name: str, steps: list[str]) -> Path:
    body = "".join(f"      - {step}\n" for step in steps)
    path = scratch / f"{name}.yml"
    path.write_text(
        f"title: {name}\ntasks:\n  - id: t\n    title: {name}\n    steps:\n{body}",
        encoding="utf-8",
    )
    return path


def _touched_session(repo: Path, scratch: Path) -> str:
    """A session that touched every file of the repository, waiting at its approval."""
    plan = _plan(
        scratch,
        "touched",
        [
            "{id: touch, run: 'true', idempotent: true, paths: ['pkg*/**']}",
            "{id: wait, approve: Go on?}",
        ],
    )
    done = _acode(repo, "run", str(plan), "--json", check=False)
    if done.returncode != 20:  # stopped at the approval, with no terminal to ask on
        raise RuntimeError(f"acode run exited {done.returncode}:\n{done.stderr}")
    session_id: str = json.loads(done.stdout.splitlines()[0])["id"]
    return session_id


def _killed_session(repo: Path, scratch: Path) -> str:
    """A session SIGKILLed while its `run` step's command runs, after its snapshot."""
    pid_file = scratch / "killed.pid"
    command = f"echo killed >> log.txt && echo $$ > {pid_file} && exec sleep 600"
    plan = _plan(scratch, "killed", [json.dumps({"id": "long", "run": command})])
    proc = subprocess.Popen(
        [str(ACODE_CLI), "run", str(plan), "--json", "-w", str(repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        session_id: str = json.loads(proc.stdout.readline())["id"]
        deadline = time.monotonic() + 600
        while not pid_file.exists() or not pid_file.read_text().endswith("\n"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("acode ended before the step's command started")
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    if pid_file.exists() and pid_file.read_text().strip():
        os.kill(int(pid_file.read_text()), signal.SIGKILL)  # the step's `sleep`
    return session_id


def _run_steps(repo: Path, plan: Path, results: BigRepo) -> None:
    """``acode run --json``: each step after the first timed from the previous step's
    `done` line to its own, as the lines reach the pipe."""
    proc = subprocess.Popen(
        [str(ACODE_CLI), "run", str(plan), "--json", "-w", str(repo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    previous = None
    for line in proc.stdout:
        arrived = time.perf_counter()
        record = json.loads(line)
        if record.get("event") != "step" or record.get("phase") != "done":
            continue
        if previous is not None:
            results.add(STEP, arrived - previous)
            results.printed.append(record["duration_ms"] / 1e3)
        previous = arrived
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"acode run exited {proc.returncode}:\n{err}")


def _startup() -> None:
    subprocess.run([str(ACODE_CLI), "--help"], capture_output=True, check=True)


def _bare(repo: Path, command: str) -> None:
    subprocess.run(["/bin/sh", "-c", command], cwd=repo, capture_output=True, check=True)


class _InProcess:
    """What runs in this process: the snapshot, the restore, the validation."""

    def __init__(self, repo: Path, touched: str) -> None:
        from acode.engine.lifecycle import existing_workspace
        from acode.resume.service import select_for_resume
        from acode.store.base import open_store

        self.repo = repo
        ws = existing_workspace(repo)
        self.store = open_store(ws.paths.db, ws.config.durability)
        self.row = select_for_resume(self.store, touched)
        self.count = 0

    def close(self) -> None:
        self.store.close()

    def _change(self) -> None:
        self.count += 1
        with (self.repo / _CHANGED).open("a", encoding="utf-8") as handle:
            handle.write(f"CHANGED = {self.count}\n")

    def snapshot(self) -> float:
        from acode.system.snapshot import snapshot_worktree

        self._change()
        ref = f"refs/acode/bench/snapshot-{self.count}"
        return _timed(lambda: snapshot_worktree(self.repo, ref))

    def restore(self) -> float:
        """The time of a rollback that puts one changed file back (not timed: the
        snapshot taken before the change)."""
        from acode.engine.rollback import roll_back
        from acode.system.snapshot import snapshot_worktree

        ghost = snapshot_worktree(self.repo, f"refs/acode/bench/ghost-{self.count}")
        self._change()
        backup = f"refs/acode/bench/ghost-{self.count}-before-rollback"
        reverted: list[tuple[str, ...]] = []
        seconds = _timed(
            lambda: reverted.append(roll_back(self.repo, ghost, backup_ref=backup).revert)
        )
        if reverted != [(_CHANGED,)]:
            raise RuntimeError(f"the rollback reverted {reverted}, not {_CHANGED} alone")
        return seconds

    def validation(self, files: int) -> float:
        from acode.resume.environment import changed_files

        checked: list[int] = []
        seconds = _timed(
            lambda: checked.append(
                len(changed_files(self.repo, self.store.file_fields(self.row.sid))[0])
            )
        )
        if checked != [files]:
            raise RuntimeError(f"the session touched {checked} files, not {files:,}")
        return seconds

    def same_tree(self, scratch: Path) -> bool:
        from acode.system.snapshot import snapshot_worktree

        self._change()
        sha = snapshot_worktree(self.repo, f"refs/acode/bench/compare-{self.count}")
        ours = _git(self.repo, "rev-parse", f"{sha}^{{tree}}").strip()
        return ours == _git_add_tree(self.repo, scratch)


def run_big_repo(
    files: int,
    rounds: int,
    steps: int,
    scratch: Path,
    progress: Callable[[str], None],
) -> BigRepo:
    """Each round: git's two, a plan of ``steps`` run steps through the CLI (``steps``
    - 1 of them timed) and their command bare, then the rest once each."""
    results = BigRepo(files)
    repo = scratch / f"repo-{files}"
    progress(f"big repository: writing and committing {files:,} files")
    build_repository(repo, files)
    _git(repo, "status")  # git refreshes its index once after the commit: not timed
    progress("big repository: a session that touches every file, one killed in a step")
    touched = _touched_session(repo, scratch)
    killed = _killed_session(repo, scratch)
    inside = _InProcess(repo, touched)
    try:
        for round_ in range(rounds):
            results.add(GIT_STATUS, _timed(lambda: _git(repo, "status")))
            results.add(GIT_ADD, _timed(lambda: _git_add_tree(repo, scratch)))
            commands = [f"echo {round_}-{i} >> log.txt" for i in range(steps)]
            specs = [json.dumps({"id": f"s{i}", "run": c}) for i, c in enumerate(commands)]
            _run_steps(repo, _plan(scratch, f"steps-{round_}", specs), results)
            for command in commands[1:]:
                results.add(BARE, _timed(functools.partial(_bare, repo, command)))
            results.add(SNAPSHOT, inside.snapshot())
            results.add(RESTORE, inside.restore())
            results.add(VALIDATION, inside.validation(files))
            results.add(DRY_TOUCHED, _timed(lambda: _acode(repo, "resume", touched, "--dry-run")))
            results.add(DRY_KILLED, _timed(lambda: _acode(repo, "resume", killed, "--dry-run")))
            results.add(STARTUP, _timed(_startup))
            latest = (f"{what} {v[-1] * 1e3:,.0f}" for what, v in results.seconds.items())
            progress(f"big repository, round {round_ + 1}/{rounds} (ms): " + "; ".join(latest))
        results.same_tree = inside.same_tree(scratch)
    finally:
        inside.close()
        shutil.rmtree(repo, ignore_errors=True)
    return results
