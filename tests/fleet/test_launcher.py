"""The fork server a worker starts its sessions from (acode/cli/launcher.py): real
`acode run` sessions forked from it, real signals. A session that crashes takes neither
the server nor another session with it; one that is asked to stop pauses as `acode run`
does; a server that dies takes its sessions with it (they pause) and is started again."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acode.fleet.worker import LAUNCHER
from acode.system.fork_server import ForkServer, ForkServerGone, Spawned
from tests.cli.conftest import make_env
from tests.sync.conftest import SECRET


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return make_env(tmp_path / "config")


@pytest.fixture
def launched(env: dict[str, str]) -> Iterator[tuple[ForkServer, list[tuple[str, object]]]]:
    told: list[tuple[str, object]] = []
    server = ForkServer(
        LAUNCHER,
        env,
        on_start=lambda pid: told.append(("start", pid)),
        on_death=lambda pid, code: told.append(("death", pid)),
    )
    try:
        yield server, told
    finally:
        server.close()


def _session(server: ForkServer, env: dict[str, str], root: Path, name: str) -> Spawned:
    """`acode run` of a plan whose one step sleeps, in a workspace of its own; its output
    in ``root/name.out``, its errors in ``root/name.err``."""
    workspace = root / name
    workspace.mkdir()
    plan = workspace / "plan.yaml"
    plan.write_text(
        "title: slow\ntasks:\n  - id: t\n    title: t\n    steps:\n"
        "      - {id: s, run: sleep 30, idempotent: true}\n",
        encoding="utf-8",
    )
    argv = ["run", "-w", str(workspace), "--json", "--mode", "autopilot", "--", str(plan)]
    with (
        open(os.devnull, "rb") as stdin,
        (root / f"{name}.out").open("wb") as out,
        (root / f"{name}.err").open("wb") as err,
    ):
        return server.spawn(argv, workspace, env, (stdin.fileno(), out.fileno(), err.fileno()))


def _wait_for_step(root: Path, name: str) -> None:
    deadline = time.monotonic() + 60
    while '"phase": "started"' not in (root / f"{name}.out").read_text(encoding="utf-8"):
        assert time.monotonic() < deadline, (root / f"{name}.err").read_text()
        time.sleep(0.05)


def test_a_crashed_session_takes_neither_the_launcher_nor_another_session(
    launched: tuple[ForkServer, list[tuple[str, object]]], env: dict[str, str], tmp_path: Path
) -> None:
    server, told = launched
    a = _session(server, env, tmp_path, "a")
    b = _session(server, env, tmp_path, "b")
    _wait_for_step(tmp_path, "a")
    _wait_for_step(tmp_path, "b")
    assert os.getpgid(a.pid) == a.pid, "a session leads a process group of its own"

    os.kill(a.pid, signal.SIGKILL)

    assert a.wait() == -signal.SIGKILL
    assert b.poll() is None, "the other session runs on"
    os.killpg(b.pid, signal.SIGTERM)  # as a worker asks its sessions to pause
    assert b.wait() == 130
    assert '"state": "PAUSED"' in (tmp_path / "b.out").read_text(encoding="utf-8")
    c = _session(server, env, tmp_path, "c")  # the same launcher starts the next one
    _wait_for_step(tmp_path, "c")
    os.killpg(c.pid, signal.SIGTERM)
    assert c.wait() == 130
    assert [event for event, _ in told] == ["start"]


def test_a_dead_launcher_pauses_its_sessions_and_is_started_again(
    launched: tuple[ForkServer, list[tuple[str, object]]], env: dict[str, str], tmp_path: Path
) -> None:
    server, told = launched
    a = _session(server, env, tmp_path, "a")
    _wait_for_step(tmp_path, "a")
    first = server.pid
    assert first is not None

    os.kill(first, signal.SIGKILL)

    with pytest.raises(ForkServerGone):
        a.wait()
    # The kernel told the session (PR_SET_PDEATHSIG): it paused, resumable.
    deadline = time.monotonic() + 30
    while '"state": "PAUSED"' not in (tmp_path / "a.out").read_text(encoding="utf-8"):
        assert time.monotonic() < deadline, (tmp_path / "a.err").read_text()
        time.sleep(0.05)
    server.check()
    assert told == [("start", first), ("death", first)]
    b = _session(server, env, tmp_path, "b")
    _wait_for_step(tmp_path, "b")
    assert server.pid not in (None, first)
    assert told[-1] == ("start", server.pid)
    os.killpg(b.pid, signal.SIGTERM)
    assert b.wait() == 130


def test_the_launcher_keeps_no_key_where_other_processes_can_read_it(
    launched: tuple[ForkServer, list[tuple[str, object]]], env: dict[str, str], tmp_path: Path
) -> None:
    server, _ = launched
    a = _session(server, env, tmp_path, "a")
    _wait_for_step(tmp_path, "a")
    for pid in (server.pid, a.pid):
        assert SECRET.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
    os.killpg(a.pid, signal.SIGTERM)
    assert a.wait() == 130


def test_a_session_whose_workspace_is_gone_fails_alone(
    launched: tuple[ForkServer, list[tuple[str, object]]], env: dict[str, str], tmp_path: Path
) -> None:
    server, told = launched
    with (tmp_path / "err").open("wb") as err, open(os.devnull, "wb") as null:
        gone = server.spawn(
            ["--version"], tmp_path / "gone", env, (null.fileno(),) * 2 + (err.fileno(),)
        )
        assert gone.wait() == 1
        shown = server.spawn(["--version"], tmp_path, env, (null.fileno(),) * 3)
        assert shown.wait() == 0
    assert f"error cannot enter {tmp_path / 'gone'}" in (tmp_path / "err").read_text()
    assert [event for event, _ in told] == ["start"]


def test_a_closed_launcher_ends(
    launched: tuple[ForkServer, list[tuple[str, object]]], env: dict[str, str], tmp_path: Path
) -> None:
    server, _ = launched
    with open(os.devnull, "wb") as null:
        shown = server.spawn(["--version"], tmp_path, env, (null.fileno(),) * 3)
    assert shown.wait() == 0
    pid = server.pid
    assert pid is not None

    server.close()

    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(ForkServerGone):
        server.spawn(["--version"], tmp_path, env, (0, 1, 2))


@pytest.mark.parametrize("shared_store", [False, True], ids=["sqlite", "shared-store"])
def test_the_store_driver_is_loaded_once_when_sessions_use_postgresql(
    env: dict[str, str], tmp_path: Path, shared_store: bool
) -> None:
    if shared_store:
        env = {**env, "ACODE_STORE_URL": "postgresql://acode@127.0.0.1:1/nowhere"}
    server = ForkServer(LAUNCHER, env)
    try:
        with open(os.devnull, "wb") as null:
            assert server.spawn(["--version"], tmp_path, env, (null.fileno(),) * 3).wait() == 0
        maps = Path(f"/proc/{server.pid}/maps").read_text()
    finally:
        server.close()
    assert ("psycopg" in maps) is shared_store
