"""The engine adapters driving the REAL Codex CLI, Claude Code and Aider, offline.

Each engine talks to an EngineServer on 127.0.0.1 (tests/support/engine_servers.py) that
speaks its protocol and records every request, so a test sees what the engine really
sent: a resumed turn must carry the earlier turns. The engines are installed by
``python -m tests.support.install_engines`` (``make test`` runs it); without them these
tests are skipped with a loud reason, and fail when CI=true.

The ``command`` engine and the process handling (time-outs, the process group, an engine
that must not outlive acode) are tested here too, with small real programs.

Cost: codex about 1 s a call, claude about 2 s, aider about 7 s (importing litellm).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acode.domain.config import EngineConfig
from acode.domain.ids import uuid7
from acode.errors import EnvironmentValidationError
from acode.work.engines import EngineTurn, resume_turn, start_turn
from tests.support.engine_servers import (
    EngineServer,
    LoggedRequest,
    conversation,
    first_line,
    last_user_text,
)
from tests.support.engines import require_engine, use_engine_env

REAL = ("codex", "claude", "aider")
FAIL_FAST_SECONDS = 30.0


def _new_id() -> str:
    return uuid7(int(time.time() * 1000), os.urandom(10))


def _said(request: LoggedRequest) -> list[tuple[str, str]]:
    """Who said what in a request, a line each: the shape that survives each engine's way
    of resending history."""
    return [(m.role, first_line(m.text)) for m in conversation(request)]


@pytest.fixture
def server() -> Iterator[EngineServer]:
    with EngineServer() as running:
        yield running


class Place:
    """Where a test's engine works: its directory and acode's history file for it."""

    def __init__(self, root: Path) -> None:
        self.cwd = root / "ws"
        self.cwd.mkdir(parents=True)
        self.history = root / "state" / "engine-history.md"
        self.history.parent.mkdir(parents=True)


def _setup(
    name: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    url: str,
    timeout_seconds: float = 120.0,
) -> tuple[EngineConfig, Place]:
    path = require_engine(name)
    use_engine_env(monkeypatch, name, url, tmp_path / "home")
    settings = EngineConfig(command=str(path), timeout_seconds=timeout_seconds)
    return settings, Place(tmp_path / "place")


def _start(name: str, settings: EngineConfig, place: Place, prompt: str) -> EngineTurn:
    return start_turn(
        name,
        settings,
        prompt=prompt,
        cwd=place.cwd,
        history_file=place.history,
        new_session_id=_new_id(),
    )


def _resume(
    name: str, settings: EngineConfig, place: Place, session_id: str, prompt: str
) -> EngineTurn:
    return resume_turn(
        name,
        settings,
        session_id=session_id,
        prompt=prompt,
        cwd=place.cwd,
        history_file=place.history,
    )


# -- the real engines ------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(REAL))
def test_a_session_starts_and_resumes_with_its_history(
    name: str, server: EngineServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings, place = _setup(name, monkeypatch, tmp_path, server.base_url)

    first = _start(name, settings, place, "remember the word apricot")

    assert first.ok, first
    assert not first.forgotten
    assert first.text == "echo: remember the word apricot"
    if name == "aider":
        assert first.session_id is None  # aider's session is the history file
    else:
        assert first.session_id
    assert last_user_text(server.model_requests()[-1]) == "remember the word apricot"

    server.clear()
    second = _resume(name, settings, place, first.session_id or "", "which word was it?")

    assert second.ok, second
    assert second.session_id == first.session_id
    assert second.text == "echo: which word was it?"
    said = _said(server.model_requests()[-1])
    earlier = said.index(("user", "remember the word apricot"))
    assert said[earlier + 1] == ("assistant", "echo: remember the word apricot")
    assert said[-1] == ("user", "which word was it?")


def test_claude_uses_the_session_id_acode_chose(
    server: EngineServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings, place = _setup("claude", monkeypatch, tmp_path, server.base_url)
    chosen = _new_id()  # a UUIDv7, as acode makes them

    turn = start_turn(
        "claude",
        settings,
        prompt="hello",
        cwd=place.cwd,
        history_file=place.history,
        new_session_id=chosen,
    )

    assert turn.ok, turn
    assert turn.session_id == chosen
    assert server.model_requests()[-1].headers["x-claude-code-session-id"] == chosen


def test_codex_forgets_an_unknown_thread(
    server: EngineServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings, place = _setup("codex", monkeypatch, tmp_path, server.base_url)
    unknown = "00000000-0000-7000-8000-000000000000"

    turn = _resume("codex", settings, place, unknown, "continue")

    assert (turn.forgotten, turn.ok, turn.session_id) == (True, False, None)
    assert "no rollout found" in turn.detail
    assert server.model_requests() == []


def test_codex_resuming_a_non_uuid_is_forgotten_not_a_new_session(
    server: EngineServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Codex takes a non-UUID for a thread name and, finding none, silently starts a new,
    # empty thread: that thread must not pass for the session.
    settings, place = _setup("codex", monkeypatch, tmp_path, server.base_url)

    turn = _resume("codex", settings, place, "ai-session-r1-xyz789", "continue")

    assert (turn.forgotten, turn.ok, turn.session_id) == (True, False, None)
    assert "new thread" in turn.detail


def test_claude_forgets_a_session_of_another_directory_and_an_unknown_one(
    server: EngineServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings, place = _setup("claude", monkeypatch, tmp_path, server.base_url)
    first = _start("claude", settings, place, "hello")
    assert first.ok, first
    assert first.session_id
    elsewhere = Place(tmp_path / "elsewhere")

    moved = _resume("claude", settings, elsewhere, first.session_id, "continue")
    unknown = _resume("claude", settings, place, _new_id(), "continue")

    for turn in (moved, unknown):
        assert (turn.forgotten, turn.ok, turn.session_id) == (True, False, None), turn
        assert "No conversation found" in turn.text


@pytest.mark.parametrize("name", ["codex", "claude"])
def test_a_dead_server_fails_the_turn_quickly(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with EngineServer() as gone:
        url = gone.base_url  # a port nothing listens on once it has stopped
    settings, place = _setup(name, monkeypatch, tmp_path, url)

    started = time.monotonic()
    turn = _start(name, settings, place, "hello")

    assert time.monotonic() - started < FAIL_FAST_SECONDS
    assert (turn.ok, turn.forgotten, turn.session_id) == (False, False, None), turn
    assert "connect" in turn.text.lower()


def test_aider_on_a_dead_server_is_bounded_by_the_time_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Aider retries a dead server for about 78 s and then exits 0: only the time-out
    # bounds it, and only its output says it failed.
    with EngineServer() as gone:
        url = gone.base_url
    settings, place = _setup("aider", monkeypatch, tmp_path, url, timeout_seconds=12.0)

    started = time.monotonic()
    turn = _start("aider", settings, place, "hello")

    assert time.monotonic() - started < FAIL_FAST_SECONDS
    assert (turn.ok, turn.session_id) == (False, None)
    assert "timed out after 12 s" in turn.detail


def test_aider_exits_0_on_a_model_error_and_the_turn_still_fails(
    server: EngineServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings, place = _setup("aider", monkeypatch, tmp_path, server.base_url)

    turn = _start("aider", settings, place, "hello FAIL401")

    assert (turn.ok, turn.forgotten, turn.session_id) == (False, False, None), turn
    assert "AuthenticationError" in turn.text
    assert server.model_requests()  # the model was asked, and refused


def test_aider_without_its_history_file_is_forgotten(tmp_path: Path) -> None:
    # Aider would start an empty chat without a word: acode must know to rebuild context.
    settings = EngineConfig(command="aider-is-not-even-run")

    turn = _resume("aider", settings, Place(tmp_path), "", "continue")

    assert (turn.forgotten, turn.ok, turn.session_id) == (True, False, None)
    assert "chat history" in turn.detail


def test_claude_never_records_the_id_of_a_failed_turn(
    server: EngineServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings, place = _setup("claude", monkeypatch, tmp_path, server.base_url)

    turn = _start("claude", settings, place, "hello FAIL400")

    assert (turn.ok, turn.session_id) == (False, None), turn


# -- the command engine and the process handling --------------------------------------------

_ECHO = (
    f"{sys.executable} -c "
    '\'import sys; print("got", sys.argv[1:]); sys.exit(3 if "fail" in sys.argv[1] else 0)\' '
    "{prompt} {session_id} {cwd}"
)


def test_the_command_engine_fills_its_template_word_by_word(tmp_path: Path) -> None:
    place = Place(tmp_path)
    settings = EngineConfig(command=_ECHO)
    prompt = "-x it's {session_id} $HOME; rm -rf /"

    new = start_turn(
        "command",
        settings,
        prompt=prompt,
        cwd=place.cwd,
        history_file=place.history,
        new_session_id="wid-1",
    )
    resumed = _resume("command", settings, place, "wid-1", "again")

    assert (new.ok, new.session_id) == (True, "wid-1")
    assert new.text == f"got [{prompt!r}, '', {str(place.cwd)!r}]"  # new: an empty id
    assert (resumed.ok, resumed.session_id) == (True, "wid-1")
    assert resumed.text == f"got ['again', 'wid-1', {str(place.cwd)!r}]"


def test_the_command_engine_fails_on_a_non_zero_exit(tmp_path: Path) -> None:
    turn = _start("command", EngineConfig(command=_ECHO), Place(tmp_path), "fail now")

    assert (turn.ok, turn.session_id) == (False, None)
    assert "exit 3" in turn.detail


def test_a_command_that_fails_on_resume_has_forgotten_one_that_cannot_run_has_not(
    tmp_path: Path,
) -> None:
    place = Place(tmp_path)
    refused = _resume("command", EngineConfig(command=_ECHO), place, "wid-1", "fail now")
    broken = tmp_path / "no-program"
    broken.write_text("print('never runs')\n", encoding="utf-8")
    broken.chmod(0o755)  # no #! line: exec refuses it
    unstartable = _resume("command", EngineConfig(command=str(broken)), place, "wid-1", "x")

    assert (refused.ok, refused.forgotten, refused.session_id) == (False, True, None)
    assert "exit 3" in refused.detail
    assert (unstartable.ok, unstartable.forgotten) == (False, False)
    assert "could not be started" in unstartable.detail


def test_a_time_out_kills_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    command = f"sh -c 'sleep 60 & echo $! > {pid_file}; wait'"

    started = time.monotonic()
    turn = _start("command", EngineConfig(command=command, timeout_seconds=1), Place(tmp_path), "x")

    assert time.monotonic() - started < 10
    assert (turn.ok, turn.forgotten) == (False, False)
    assert "timed out after 1 s" in turn.detail
    _assert_gone(int(pid_file.read_text(encoding="utf-8")))


def test_an_engine_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "engine.pid"
    place = Place(tmp_path)
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path\n"
            "from acode.domain.config import EngineConfig\n"
            "from acode.work.engines import start_turn\n"
            "start_turn('command', EngineConfig(command=sys.argv[1]), prompt='x',"
            " cwd=Path(sys.argv[2]), history_file=Path(sys.argv[2]) / 'h', new_session_id='w')",
            f"sh -c 'echo $$ > {pid_file}; exec sleep 60'",
            str(place.cwd),
        ],
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not pid_file.exists() or not pid_file.read_text(encoding="utf-8").strip():
            assert time.monotonic() < deadline, "the engine never started"
            time.sleep(0.05)
        parent.send_signal(signal.SIGKILL)  # acode killed without warning
        parent.wait(timeout=10)
        _assert_gone(int(pid_file.read_text(encoding="utf-8")))
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_a_missing_executable_names_the_engine_and_how_to_install_it(tmp_path: Path) -> None:
    settings = EngineConfig(command="no-such-codex-here")

    with pytest.raises(EnvironmentValidationError) as caught:
        _start("codex", settings, Place(tmp_path), "x")

    message = str(caught.value)
    for needed in (
        "codex",
        "no-such-codex-here",
        "npm i -g @openai/codex",
        "engines.codex.command",
    ):
        assert needed in message


def _assert_gone(pid: int) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        if _is_zombie(pid):
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs")


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"
