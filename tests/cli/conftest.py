"""Running the real `acode` executable in temporary workspaces, the way a person does.

Every invocation goes through :class:`Cli`, which checks what no outcome may ever show
(a traceback, an "internal error") and, when told, the exit status. Processes started in
the background are registered with :class:`Background` and stopped in teardown, together
with any step child they left behind.

:class:`Terminal` runs acode on a pseudo-terminal (`pty.fork`: stdin, stdout and stderr
on it, and it is acode's controlling terminal), as in a person's terminal: it draws its
live progress display, asks its questions and reads what is typed, and Ctrl+C typed
there is a SIGINT from the terminal driver. A test reads the screen until a question
appears, then types the answer.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "ACODE",
    "Background",
    "Cli",
    "OpenTerminal",
    "Result",
    "Running",
    "Terminal",
    "alive",
    "make_env",
    "plan_yaml",
    "read_pids",
    "session_count",
    "wait_for",
    "wait_for_pid",
]


def _find_acode() -> str:
    # The script installed beside the interpreter running the tests (the project's .venv).
    beside = Path(sys.executable).parent / "acode"
    if beside.exists():
        return str(beside)
    found = shutil.which("acode")
    if found is None:
        raise RuntimeError("the `acode` executable is neither beside python nor on PATH")
    return found


ACODE = _find_acode()
SECRET = "acode-cli-tests-checkpoint-secret"
# Wide enough that Rich never wraps a message: assertions then match whole sentences.
# tests/cli/test_errors.py checks the 80-column default on its own.
WIDE = "400"


def make_env(config_home: Path) -> dict[str, str]:
    """The environment of every acode subprocess: nothing of the caller's acode settings,
    the checkpoint key and config directory private to the test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACODE_")}
    for noisy in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        env.pop(noisy, None)
    env.update(
        {
            "ACODE_CHECKPOINT_SECRET": SECRET,
            "XDG_CONFIG_HOME": str(config_home),
            "COLUMNS": WIDE,
            "PYTHONDONTWRITEBYTECODE": "1",
            "GIT_AUTHOR_NAME": "acode tests",
            "GIT_AUTHOR_EMAIL": "tests@acode.invalid",
            "GIT_COMMITTER_NAME": "acode tests",
            "GIT_COMMITTER_EMAIL": "tests@acode.invalid",
        }
    )
    return env


def plan_yaml(title: str, *steps: str, task: str = "main") -> str:
    """A one-task plan; each of ``steps`` is one flow mapping such as
    ``{id: a, read: a.txt}``. The first step is on line 6."""
    body = "".join(f"      - {step}\n" for step in steps)
    return f"title: {title}\ntasks:\n  - id: {task}\n    title: Main\n    steps:\n{body}"


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    code: int
    out: str
    err: str

    @property
    def flat_err(self) -> str:
        """stderr with every run of white space made one space."""
        return " ".join(self.err.split())

    @property
    def flat_out(self) -> str:
        return " ".join(self.out.split())

    def json(self) -> Any:
        return json.loads(self.out)

    def json_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]

    def describe(self) -> str:
        return (
            f"$ acode {' '.join(self.argv)}\nexit status {self.code}\n"
            f"--- stdout\n{self.out}--- stderr\n{self.err}"
        )


def _checked(result: Result, expect: int | None) -> Result:
    for stream in (result.out, result.err):
        assert "Traceback" not in stream, result.describe()
        assert "internal error" not in stream, result.describe()
    if expect is not None:
        assert result.code == expect, result.describe()
    return result


@dataclass(frozen=True)
class Running:
    """An acode process started in the background."""

    proc: subprocess.Popen[str]
    argv: tuple[str, ...]

    @property
    def pid(self) -> int:
        return self.proc.pid


@dataclass
class Background:
    """acode processes running while a test looks at them; all stopped in teardown."""

    running: list[Running] = field(default_factory=list)
    pid_files: list[Path] = field(default_factory=list)

    def stop_all(self) -> None:
        for proc in (r.proc for r in self.running):
            if proc.poll() is None:
                # SIGTERM first: acode pauses and stops its step's process group itself.
                os.kill(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
            proc.communicate()
        for pid_file in self.pid_files:
            for pid in read_pids(pid_file):
                _kill_if_ours(pid)


def _kill_if_ours(pid: int) -> None:
    """Kill a step child that outlived acode, checking first that the pid is still that
    child (a `sleep` started by a test plan) and not a recycled one."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return
    if command.startswith(b"sleep\0"):
        os.kill(pid, signal.SIGKILL)


class Cli:
    """`acode` run as a subprocess in ``workspace``, with a private environment."""

    def __init__(self, workspace: Path, env: Mapping[str, str], background: Background) -> None:
        self.workspace = workspace
        self.env = dict(env)
        self._background = background

    def __call__(
        self,
        *args: str,
        expect: int | None = 0,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 30,
    ) -> Result:
        done = subprocess.run(
            [ACODE, *args],
            cwd=cwd or self.workspace,
            env=dict(env) if env is not None else self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return _checked(Result(tuple(args), done.returncode, done.stdout, done.stderr), expect)

    def many(self, commands: Sequence[Sequence[str]], *, expect: int | None = 0) -> list[Result]:
        """Run independent commands at the same time (each is a separate process)."""
        procs = [
            subprocess.Popen(
                [ACODE, *command],
                cwd=self.workspace,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for command in commands
        ]
        results = []
        for command, proc in zip(commands, procs, strict=True):
            out, err = proc.communicate(timeout=30)
            results.append(_checked(Result(tuple(command), proc.returncode, out, err), expect))
        return results

    def start(self, *args: str) -> Running:
        """Start acode in its own session (signals reach only it) with no terminal."""
        proc = subprocess.Popen(
            [ACODE, *args],
            cwd=self.workspace,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        running = Running(proc, tuple(args))
        self._background.running.append(running)
        return running

    def finish(self, running: Running, *, expect: int | None, timeout: float = 30) -> Result:
        out, err = running.proc.communicate(timeout=timeout)
        return _checked(Result(running.argv, running.proc.returncode, out, err), expect)

    def write(self, name: str, text: str) -> Path:
        path = self.workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def watch_pids(self, name: str) -> Path:
        """A file a plan's run step appends its pid to; teardown kills what it names."""
        path = self.workspace / name
        self._background.pid_files.append(path)
        return path

    def sessions(self) -> list[dict[str, Any]]:
        data = self("session", "list", "--json").json()
        assert isinstance(data, list)
        return data

    def status(self, session_id: str) -> dict[str, Any]:
        data = self("status", session_id, "--json").json()
        assert isinstance(data, dict)
        return data

    def only_session(self) -> dict[str, Any]:
        rows = self.sessions()
        assert len(rows) == 1, rows
        return rows[0]


def wait_for(what: str, probe: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def read_pids(path: Path) -> list[int]:
    """The complete lines of a pid file (a line being written is not one yet)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [int(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def step_started(cli: Cli, running: Running, pid_file: Path, count: int = 1) -> int:
    """Wait until the napping step of ``running`` has written its ``count``-th pid to
    ``pid_file``; returns that pid. If acode ends first, its output says why."""
    wait_for(
        "the napping step to start",
        lambda: len(read_pids(pid_file)) >= count or running.proc.poll() is not None,
        timeout=20,
    )
    if len(read_pids(pid_file)) < count:
        ended = cli.finish(running, expect=None)
        raise AssertionError(f"acode ended before its step started\n{ended.describe()}")
    return read_pids(pid_file)[count - 1]


def wait_for_pid(path: Path, count: int = 1, timeout: float = 10.0) -> int:
    """Wait until ``path`` holds ``count`` pids; returns the last."""
    wait_for(f"{count} pid(s) in {path.name}", lambda: len(read_pids(path)) >= count, timeout)
    return read_pids(path)[-1]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped has stopped running)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def session_count(workspace: Path) -> int:
    """Rows in the sessions table, read straight from the file; 0 when there is none."""
    db = workspace / ".agent" / "state" / "acode.db"
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (count,) = conn.execute("SELECT count(*) FROM sessions").fetchone()
    conn.close()
    return int(count)


# Colour, cursor and line-erase sequences, and the carriage returns of the terminal's
# line discipline: what remains is the text a person reads.
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][0-9A-Za-z]|\r")


def as_a_foreground_job() -> None:
    """Ctrl+C and Ctrl+\\ as a shell leaves them to the job it runs on a terminal. A
    test run started in the background of a script (`make test &`) ignores SIGINT and
    SIGQUIT, as POSIX shells make background jobs do, and a child inherits that: its
    Ctrl+C would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


class Terminal:
    """One `acode` process on a pseudo-terminal of its own."""

    def __init__(self, acode: Cli, *args: str) -> None:
        self.argv = args
        env = {**acode.env, "TERM": "xterm-256color"}
        pid, fd = pty.fork()
        if pid == 0:  # the child: becomes acode, the terminal its controlling terminal
            try:
                as_a_foreground_job()
                os.chdir(acode.workspace)
                os.execve(ACODE, [ACODE, *args], env)
            finally:
                os._exit(127)
        self.pid = pid
        self._fd = fd
        self._raw = bytearray()
        self._consumed = 0  # how much of the screen `expect` has read past
        self._status: int | None = None

    @property
    def raw(self) -> bytes:
        """Everything sent to the terminal, escape sequences included."""
        return bytes(self._raw)

    @property
    def screen(self) -> str:
        """Everything shown so far, as text."""
        return _CONTROL.sub("", self._raw.decode("utf-8", errors="replace"))

    def _read(self, wait: float) -> bool:
        """Read what the terminal shows within ``wait`` s; False once nothing more can come."""
        if self._fd < 0:
            return False
        ready, _, _ = select.select([self._fd], [], [], wait)
        if not ready:
            return True
        try:
            data = os.read(self._fd, 65536)
        except OSError:  # EIO: no process has the terminal open any more
            data = b""
        self._raw += data
        return bool(data)

    def _exited(self) -> bool:
        if self._status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self._status = os.waitstatus_to_exitcode(status)
        return self._status is not None

    def expect(self, text: str, timeout: float = 10.0) -> str:
        """Wait for ``text`` after what was read before; returns the screen up to its end."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen
            found = screen.find(text, self._consumed)
            if found >= 0:
                shown = screen[self._consumed : found + len(text)]
                self._consumed = found + len(text)
                return shown
            if not self._read(0.05) or time.monotonic() > deadline:
                raise AssertionError(
                    f"{text!r} did not appear on the terminal of `acode {' '.join(self.argv)}`;"
                    f" it shows:\n{screen}"
                )

    def idle(self, seconds: float) -> bytes:
        """What reaches the terminal in the next ``seconds`` while nobody types: the raw
        bytes, line erasures and redraws included."""
        start = len(self._raw)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self._read(deadline - time.monotonic()):
            pass
        return bytes(self._raw[start:])

    def type(self, keys: str) -> None:
        """Type ``keys`` (a line ends with Enter: a carriage return, as a keyboard sends)."""
        os.write(self._fd, keys.encode())

    def answer(self, line: str) -> None:
        self.type(f"{line}\r")

    def finish(self, *, expect: int, timeout: float = 60.0) -> str:
        """Wait for acode to exit with ``expect``; returns the rest of the screen."""
        deadline = time.monotonic() + timeout
        while not self._exited():
            if time.monotonic() > deadline:
                raise AssertionError(f"acode did not exit; the terminal shows:\n{self.screen}")
            self._read(0.05)
        while self._read(0.05):
            pass
        screen = self.screen
        assert "Traceback" not in screen, screen
        assert "internal error" not in screen, screen
        assert self._status == expect, f"exit status {self._status}, screen:\n{screen}"
        return screen[self._consumed :]

    def close(self) -> None:
        if not self._exited():
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self._status = -signal.SIGKILL
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


OpenTerminal = Callable[..., Terminal]


@pytest.fixture
def acode(workspace: Path, cli_env: dict[str, str], background: Background) -> Cli:
    """acode working in the (empty) ``workspace`` fixture."""
    return Cli(workspace, cli_env, background)


@pytest.fixture
def terminal(acode: Cli) -> Iterator[OpenTerminal]:
    """Opens `acode ARGS` on a new terminal; whatever is still running is killed after."""
    opened: list[Terminal] = []

    def open_terminal(*args: str) -> Terminal:
        opened.append(Terminal(acode, *args))
        return opened[-1]

    yield open_terminal
    for term in opened:
        term.close()


def cli_sharing_the_key(
    workspace: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cli]:
    """`acode` in ``workspace``, and the library in the test's own process reading and
    signing with the same key (for a ``cli`` fixture outside tests/cli)."""
    env = make_env(tmp_path_factory.mktemp("cli-config"))
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", env["ACODE_CHECKPOINT_SECRET"])
    background = Background()
    try:
        yield Cli(workspace, env, background)
    finally:
        background.stop_all()
