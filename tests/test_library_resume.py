"""`acode.list_resumable` and `acode.preview_resume`, called on sessions that real
processes left behind when a real SIGKILL stopped them: an `acode run` in its napping
step, and a program of the library in the middle of its steps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import acode
from acode.domain.age import Age
from acode.domain.position import Position
from acode.errors import NothingToResumeError, TerminalStateError
from tests.cli.conftest import (
    Cli,
    cli_sharing_the_key,
    plan_yaml,
    step_started,
)

__all__: list[str] = []

NAP = "echo $$ >> nap.pids; [ $(wc -l < nap.pids) -gt 1 ] || exec sleep 30"
PLAN = (
    "title: Killed in its nap\n"
    "tasks:\n"
    "  - id: first\n"
    "    title: First\n"
    "    steps:\n"
    "      - {id: a, write: a.txt, content: a}\n"
    "      - {id: b, read: a.txt}\n"
    "  - id: second\n"
    "    title: Second\n"
    "    steps:\n"
    "      - {id: c, write: c.txt, content: c}\n"
    f'      - {{id: nap, run: "{NAP}"}}\n'
    "      - {id: d, write: d.txt, content: d}\n"
)
# A program of the library that dies by SIGKILL once two steps are done, in its third.
PROGRAM = """\
import os, signal, sys, time
import acode

s = acode.open_session("A program's work", workspace=sys.argv[1])
s.step("one", lambda ctx: 1)
s.step("two", lambda ctx: time.sleep(0.05) or 2)
s.step("three", lambda ctx: os.kill(os.getpid(), signal.SIGKILL))
"""


@pytest.fixture
def cli(
    workspace: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cli]:
    yield from cli_sharing_the_key(workspace, tmp_path_factory, monkeypatch)


def _killed_plan_run(cli: Cli) -> str:
    """`acode run plan.yml` killed (SIGKILL) in its fourth step; returns the session id."""
    cli.write("plan.yml", PLAN)
    pids = cli.watch_pids("nap.pids")
    running = cli.start("run", "plan.yml", "--json")
    step_started(cli, running, pids)
    os.kill(running.pid, signal.SIGKILL)
    records = cli.finish(running, expect=-signal.SIGKILL).json_lines()
    return str(records[0]["id"])


def _killed_program(cli: Cli) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(cli.workspace)], env=cli.env, check=False
    )
    assert done.returncode == -signal.SIGKILL
    (found,) = [s for s in cli.sessions() if s["kind"] == "library"]
    return str(found["id"])


def test_list_resumable_names_each_killed_session_most_recent_first(cli: Cli) -> None:
    plan_id = _killed_plan_run(cli)
    time.sleep(0.01)  # the program's session is the more recent, even by a clock's tick
    program_id = _killed_program(cli)

    found = acode.list_resumable(cli.workspace)

    assert [s.id for s in found] == [program_id, plan_id]
    program, plan = found
    assert (plan.kind, plan.title, plan.state) == ("plan", "Killed in its nap", "EXECUTING")
    assert plan.position == Position("nap", "second", 2, 2, 2, 3)
    assert plan.position.describe() == "Task 2/2, Step 2/3 (second > nap)"
    # A library's python step records nothing before it runs (its first write is its
    # result): the newest step the history knows of is the second.
    assert (program.kind, program.state, program.position) == (
        "library",
        acode.SessionState.EXECUTING,
        Position("two"),
    )
    for session in found:
        assert session.short_id == session.id[: len(session.short_id)]
        assert session.age.age is Age.FRESH
        assert timedelta(0) <= datetime.now(UTC) - session.updated_at < timedelta(minutes=5)
    # What the command line lists is the same: most recent first.
    assert [r["id"] for r in cli.sessions()] == [program_id, plan_id]


def test_list_resumable_of_a_directory_with_no_sessions_is_empty(workspace: Path) -> None:
    assert acode.list_resumable(workspace) == []
    assert not (workspace / ".agent").exists()  # looking created nothing
    with pytest.raises(NothingToResumeError, match="no such workspace"):
        acode.list_resumable(workspace / "missing")


def test_preview_resume_gives_what_the_dry_run_shows_as_values(cli: Cli) -> None:
    session_id = _killed_plan_run(cli)
    before = cli("session", "history", session_id, "--json").out

    preview = acode.preview_resume(session_id, cli.workspace)

    assert isinstance(preview, acode.ResumePreview)
    assert (preview.row.id, preview.summary.state) == (session_id, acode.SessionState.EXECUTING)
    assert (preview.summary.steps_completed, preview.summary.total_steps) == (3, 5)
    assert preview.resume_at == Position("nap", "second", 2, 2, 2, 3)
    assert preview.last_completed == Position("c", "second", 2, 2, 1, 3)
    assert preview.continuation is not None
    assert preview.continuation.skipped_tasks == ("first",)
    assert preview.continuation.pending_steps == ("d",)
    assert preview.environment is not None
    assert preview.environment.valid
    work = preview.work_time
    assert work is not None
    assert (work.completed_steps, work.remaining_steps) == (3, 2)
    assert work.completed_us > 0
    assert work.remaining_estimate_us == 2 * (work.completed_us // 3)
    # The dry run prints the same values.
    shown = cli("resume", session_id, "--dry-run", "--json").json()
    assert shown["resume_position"] == preview.resume_at.to_dict()
    assert shown["last_completed"] == preview.last_completed.to_dict()
    assert shown["work_time"] == work.to_dict()
    assert shown["checkpoint_id"] == preview.checkpoint_id
    # Looking wrote nothing.
    assert cli("session", "history", session_id, "--json").out == before


def test_preview_resume_of_a_killed_program_knows_no_remaining_steps(cli: Cli) -> None:
    session_id = _killed_program(cli)

    preview = acode.preview_resume(workspace=cli.workspace)  # the most recent

    assert preview.row.id == session_id
    assert preview.plan is None
    assert preview.resume_at is None
    assert preview.last_completed == Position("two")
    work = preview.work_time
    assert work is not None
    assert (work.completed_steps, work.remaining_steps) == (2, None)
    assert work.completed_us >= 50_000  # step two slept 50 ms
    assert work.remaining_estimate_us is None  # never made up


def test_preview_resume_refuses_what_resume_refuses(cli: Cli) -> None:
    cli.write("plan.yml", plan_yaml("Done", "{id: a, write: a.txt, content: a}"))
    done = cli("run", "plan.yml", "--json").json_lines()[0]["id"]
    with pytest.raises(TerminalStateError, match="it is COMPLETED"):
        acode.preview_resume(done, cli.workspace)
    with pytest.raises(NothingToResumeError):
        acode.preview_resume("ffffffff", cli.workspace)
