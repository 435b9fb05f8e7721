"""What a session keeps on disk is its owner's alone, whatever the umask: the database
(with its WAL and shared-memory files), the session's folder and its progress file."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, plan_yaml, wait_for

__all__: list[str] = []


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that lets group and others read and the group write: acode's state must
    not follow it (the subprocesses inherit it)."""
    old = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("open_umask")
def test_a_running_session_keeps_its_files_private(acode: Cli) -> None:
    acode.write(
        "plan.yml",
        plan_yaml(
            "Private",
            '{id: greet, write: out.txt, content: "hi\\n"}',
            "{id: nap, run: echo $$ >> nap.pids; exec sleep 30}",
        ),
    )
    acode.watch_pids("nap.pids")
    acode.start("run", "plan.yml")
    wait_for("the nap step", (acode.workspace / "nap.pids").exists)
    state = acode.workspace / ".agent" / "state"
    (session,) = (state / "sessions").iterdir()
    progress = session / "progress.md"
    wait_for("the progress file", progress.exists)

    files = [state / "acode.db", state / "acode.db-wal", state / "acode.db-shm", progress]
    folders = [state, state / "sessions", session, session / "children"]
    assert {f.name: oct(_mode(f)) for f in files} == {f.name: "0o600" for f in files}
    assert {f.name: oct(_mode(f)) for f in folders} == {f.name: "0o700" for f in folders}
    # The workspace's own files are still 0644 less the umask.
    assert _mode(acode.workspace / "out.txt") == 0o644


@pytest.mark.usefixtures("open_umask")
def test_a_progress_file_made_readable_by_others_is_private_again_after_its_next_update(
    acode: Cli,
) -> None:
    acode.write(
        "plan.yml", plan_yaml("Again", "{id: ok, approve: Go on?}", "{id: r, read: plan.yml}")
    )
    sid = acode("run", "plan.yml", "--json", expect=20).json_lines()[0]["id"]
    progress = acode.workspace / ".agent/state/sessions" / sid / "progress.md"
    progress.chmod(0o644)

    acode("session", "checkpoint", sid[:8], "--label", "looked")

    assert _mode(progress) == 0o600
    assert '"looked"' in progress.read_text()
