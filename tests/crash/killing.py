"""Killing acode processes: seeded kill schedules, a runner that SIGKILLs a process on
schedule, and the processes a killed one leaves behind.

A kill lands in one of three ways, all drawn from the case's seeded RNG:
  timed  SIGKILL a drawn delay after the process started (anywhere, startup included);
  step   SIGKILL a drawn delay after the process reported a drawn step (inside steps);
  event  the process SIGKILLs itself at the N-th audit event of a kind (autokill.py):
         just before a rename publishes a written file, before a git command (so between
         `git add` and `git commit`, or after the commit before it is recorded), before a
         run step's shell starts, or in a python step right after its effect.
After a kill, the children it orphaned (run steps' shells, git) are either killed too, as
a power loss would, or left to finish, as after an OOM kill of the parent alone; the next
process starts once they are gone either way (see OrphanFate: orphans still running when
the next process starts are the subject of tests of their own).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tests.crash.workload import EFFECT_EVENT, TEMP_PREFIX

__all__ = [
    "DRAWN_FATES",
    "EVENT_POINTS",
    "EventPoint",
    "Invocation",
    "Kill",
    "KillDraw",
    "Pace",
    "aim",
    "draw_kills",
    "invoke",
    "kill_token_processes",
    "token_processes",
]

KillHow = Literal["timed", "step", "event"]
# What becomes of the children a killed process orphaned: killed with it (a power loss),
# left to finish before the next process starts (an OOM kill of the parent alone), or left
# running into the next process ("live").
OrphanFate = Literal["kill", "wait", "live"]
# "live" is not drawn yet: the next process can meet a git command or a run step's
# command it cannot stop (test_kill_resume.py: test_kill_during_commit_is_resumable
# [acode-alone], test_kill_between_spawning_a_command_and_noting_it). Draw it too once
# those pass.
DRAWN_FATES: tuple[OrphanFate, ...] = ("kill", "wait", "live")
_POLL = 0.002
_ORPHAN_WAIT = 10.0
# Timed kills aim a little short of the expected end: processes vary in speed.
_AIM_SHORT = 0.9


@dataclass(frozen=True)
class EventPoint:
    name: str
    event: str
    match: str


EVENT_POINTS = (
    EventPoint("rename", "os.rename", TEMP_PREFIX),
    EventPoint("git", "subprocess.Popen", "['git'"),
    EventPoint("shell", "subprocess.Popen", "['/bin/sh'"),
    EventPoint("effect", EFFECT_EVENT, ""),
)


@dataclass(frozen=True)
class Kill:
    """A kill aimed at one process."""

    how: KillHow
    orphans: OrphanFate
    delay: float = 0.0
    anchor: str | None = None
    point: EventPoint | None = None
    nth: int = 0

    def describe(self) -> str:
        match self.how:
            case "timed":
                where = f"{self.delay * 1000:.0f} ms after start"
            case "step":
                where = f"{self.delay * 1000:.0f} ms after step {self.anchor!r} showed"
            case "event":
                assert self.point is not None
                where = f"at {self.point.name} event #{self.nth}"
        return f"{where}, orphans: {self.orphans}"

    def env(self) -> dict[str, str]:
        if self.how != "event":
            return {}
        assert self.point is not None
        return {
            "CRASHTEST_KILL_EVENT": self.point.event,
            "CRASHTEST_KILL_MATCH": self.point.match,
            "CRASHTEST_KILL_NTH": str(self.nth),
        }


@dataclass(frozen=True)
class KillDraw:
    """A kill as the seeded RNG drew it: ``where`` (0 to 1) is how far into the work
    still to do it lands; :func:`aim` turns it into a Kill for the next process."""

    how: KillHow
    orphans: OrphanFate
    where: float
    jitter: float
    point: EventPoint | None


def draw_kills(rng: random.Random, count: int) -> list[KillDraw]:
    kills = []
    for _ in range(count):
        how: KillHow = rng.choice(("timed", "step", "event"))
        fate = rng.choice(DRAWN_FATES)
        point = rng.choice(EVENT_POINTS) if how == "event" else None
        kills.append(KillDraw(how, fate, rng.random(), rng.uniform(0.0, 0.08), point))
    return kills


@dataclass(frozen=True)
class Pace:
    """What an uninterrupted run takes: seconds before the first step, seconds for all
    steps, and how often it meets each event point."""

    startup: float
    steps: float
    event_counts: dict[str, int]


def aim(draw: KillDraw, pace: Pace, remaining: Sequence[str], total: int) -> Kill:
    """Aim a drawn kill at a process that has ``remaining`` of ``total`` steps to do, so
    that most kills land while it works (startup included) rather than after its end:
    a kill that misses lets the process finish the session, which ends the case."""
    left = max(len(remaining), 1) / total
    if draw.how == "timed" or not remaining:
        expected = pace.startup + pace.steps * left
        return Kill("timed", draw.orphans, delay=draw.where * _AIM_SHORT * expected)
    expected = pace.event_counts.get(draw.point.name, 0) * left if draw.point else 0.0
    if draw.how == "event" and draw.point is not None and expected >= 1:
        return Kill("event", draw.orphans, point=draw.point, nth=1 + int(draw.where * expected))
    # A step kill, also for an event the remaining steps are unlikely to meet.
    anchor = remaining[int(draw.where * len(remaining))]
    return Kill("step", draw.orphans, delay=draw.jitter, anchor=anchor)


@dataclass(frozen=True)
class Invocation:
    """One acode process: how it was meant to die and how it ended."""

    argv: tuple[str, ...]
    kill: Kill | None
    returncode: int
    seconds: float
    stdout: str
    stderr: str
    leftovers: int  # processes it started that were still running after it ended

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    def describe(self) -> str:
        plan = self.kill.describe() if self.kill else "not killed"
        verb = " ".join(self.argv[1:3])
        text = f"{verb} [{plan}] -> exit {self.returncode} after {self.seconds:.2f} s"
        if self.leftovers:
            text += f", left {self.leftovers} processes running"
        if not self.killed and self.returncode != 0:
            text += f"\n    stderr: {self.stderr.strip()[-600:]}"
        return text


def invoke(
    argv: Sequence[str],
    env: dict[str, str],
    kill: Kill | None,
    *,
    token: str,
    logs: Path,
    timeout: float = 60.0,
) -> Invocation:
    """Run ``argv`` to its end or to its kill; afterwards no process it started is left."""
    env = {**env, "CRASHTEST_TOKEN": token, **(kill.env() if kill else {})}
    logs.mkdir(parents=True, exist_ok=True)
    out_path, err_path = logs / "stdout", logs / "stderr"
    started = time.monotonic()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        try:
            _kill_on_schedule(proc, kill, out_path, timeout)
            proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    seconds = time.monotonic() - started
    leftovers = _settle_leftovers(token, kill, proc.returncode)
    return Invocation(
        tuple(argv),
        kill,
        proc.returncode,
        seconds,
        out_path.read_text(encoding="utf-8", errors="replace"),
        err_path.read_text(encoding="utf-8", errors="replace"),
        leftovers,
    )


def _kill_on_schedule(
    proc: subprocess.Popen[bytes], kill: Kill | None, out_path: Path, timeout: float
) -> None:
    if kill is None or kill.how == "event":
        return  # runs to its end, or the audit hook kills it
    if kill.how == "timed":
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=kill.delay)
            return
        proc.kill()
        return
    needle = f'"step": "{kill.anchor}"'.encode()
    deadline = time.monotonic() + timeout
    seen = b""
    with out_path.open("rb") as out:
        while proc.poll() is None and time.monotonic() < deadline:
            seen += out.read()
            if needle in seen:
                time.sleep(kill.delay)
                proc.kill()
                return
            time.sleep(_POLL)


def _settle_leftovers(token: str, kill: Kill | None, returncode: int) -> int:
    """Deal with what the process left running, by the kill's OrphanFate; returns how
    many it left. A process that ended by itself leaves none (a finished step has no
    processes left): the caller checks."""
    left = token_processes(token)
    fate = kill.orphans if kill is not None and returncode == -signal.SIGKILL else None
    if left and fate != "live":
        if fate == "wait":
            deadline = time.monotonic() + _ORPHAN_WAIT
            while token_processes(token) and time.monotonic() < deadline:
                time.sleep(_POLL)
        kill_token_processes(token)
    return len(left)


def token_processes(token: str) -> list[int]:
    """Running processes whose environment carries ``CRASHTEST_TOKEN=token``: everything
    a test's acode processes started, however deep, and whoever adopted it."""
    marker = f"CRASHTEST_TOKEN={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        # A zombie's environment reads as empty: it is dead and changes nothing.
        if marker in environ.split(b"\0"):
            found.append(int(entry))
    return found


def kill_token_processes(token: str) -> None:
    """SIGKILL every process of ``token`` until none is left (a shell may fork while we
    look)."""
    deadline = time.monotonic() + _ORPHAN_WAIT
    while pids := token_processes(token):
        if time.monotonic() > deadline:
            raise AssertionError(f"processes {pids} survive SIGKILL")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(_POLL)
