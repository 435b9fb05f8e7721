"""Resume modes and the questions `acode resume` asks, answered on a real terminal
(tests/cli/conftest.py, ``Terminal``)."""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass
from typing import Any

import pytest

from acode.engine.lifecycle import start_session
from acode.engine.plan_loader import load_plan
from tests.cli.conftest import Cli, OpenTerminal, plan_yaml, read_pids, step_started

__all__: list[str] = []


def _napping_plan(title: str, prefix: str) -> str:
    """Two writes, then a command that naps on its first attempt only, then a write."""
    nap = f"echo $$ >> {prefix}.pids; [ $(wc -l < {prefix}.pids) -gt 1 ] || exec sleep 5"
    return plan_yaml(
        title,
        f'{{id: one, write: {prefix}-1.txt, content: "1\\n"}}',
        f'{{id: two, write: {prefix}-2.txt, content: "2\\n"}}',
        f'{{id: nap, run: "{nap}"}}',
        f'{{id: last, write: {prefix}-3.txt, content: "3\\n"}}',
    )


def _paused(acode: Cli, title: str, prefix: str = "job") -> str:
    """A plan session paused by SIGINT at its napping step (nothing to ask on: no tty);
    returns its id."""
    acode.write(f"{prefix}.yml", _napping_plan(title, prefix))
    pids = acode.watch_pids(f"{prefix}.pids")
    running = acode.start("run", f"{prefix}.yml", "--json")
    step_started(acode, running, pids)
    os.kill(running.pid, signal.SIGINT)
    started = acode.finish(running, expect=130).json_lines()[0]
    assert started["event"] == "started"
    return str(started["id"])


def _events(acode: Cli, session: str) -> list[dict[str, Any]]:
    events = acode("session", "history", session, "--json").json()
    assert isinstance(events, list)
    return events


@dataclass(frozen=True)
class _DaysAgo:
    """A clock that reads ``days`` days before now."""

    days: int

    def now_us(self) -> int:
        return time.time_ns() // 1000 - self.days * 86_400_000_000

    def random_bytes(self, n: int) -> bytes:
        return os.urandom(n)


def _paused_days_ago(
    acode: Cli, monkeypatch: pytest.MonkeyPatch, title: str, prefix: str, days: int
) -> str:
    """A plan session started and paused ``days`` days ago, through the library with a
    clock set back: every time stamp of its signed history is that old. Returns its id."""
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", acode.env["ACODE_CHECKPOINT_SECRET"])
    plan_file = acode.write(
        f"{prefix}.yml",
        plan_yaml(title, f'{{id: one, write: {prefix}-1.txt, content: "1\\n"}}'),
    )
    session = start_session(
        title, workspace=acode.workspace, plan=load_plan(plan_file), clock=_DaysAgo(days)
    )
    session.pause("interrupted")
    session.close()
    return session.id


MENU = "[R]esume, [S]tart over from scratch, [V]iew details, [A]bort [r/s/v/a] (r): "


def test_interactive_mode_shows_the_plan_and_asks_before_resuming_the_only_session(
    acode: Cli, terminal: OpenTerminal
) -> None:
    session = _paused(acode, "Napping")
    short = acode.status(session)["short_id"]
    before = _events(acode, session)

    declined = terminal("resume")
    shown = declined.expect(MENU)
    declined.answer("a")

    assert shown.splitlines()[0] == f"Session {short}: Napping"
    assert re.fullmatch(r"  PAUSED, interrupted \d+ seconds? ago \(fresh\)", shown.splitlines()[1])
    assert shown.splitlines()[2] == (
        "  ▸ Task 1: Main: 2 of 4 steps done; in progress: nap (retry); remaining: last"
    )
    assert declined.finish(expect=0).split() == ["a", "Nothing", "resumed."]
    assert _events(acode, session) == before

    accepted = terminal("resume")
    accepted.expect(MENU)
    accepted.answer("")  # Enter takes the default: resume

    rest = accepted.finish(expect=0)
    assert f"Resuming session {short}: Napping" in rest
    assert "  In progress: nap -> retry" in rest
    assert re.search(r"✓ \[3/4\] main > nap: ", rest)
    assert rest.rstrip().endswith(f"Session {short} completed: 4 steps done.")
    assert (acode.workspace / "job-3.txt").read_text() == "3\n"


def test_interactive_mode_numbers_several_sessions_and_takes_a_choice(
    acode: Cli, terminal: OpenTerminal, monkeypatch: pytest.MonkeyPatch
) -> None:
    older = _paused_days_ago(acode, monkeypatch, "Older work", "old", days=8)
    newer = _paused(acode, "Newer work", "new")
    rows = {row["id"]: row for row in acode.sessions()}
    old_short, new_short = rows[older]["short_id"], rows[newer]["short_id"]

    nothing = terminal("resume")
    nothing.expect("Resume which one? [1/2/none] (1): ")
    nothing.answer("none")
    assert nothing.finish(expect=0).split() == ["none", "Nothing", "resumed."]

    chooser = terminal("resume")
    listing = chooser.expect("Resume which one? [1/2/none] (1): ")
    chooser.answer("3")
    chooser.expect("Please select one of the available options")
    chooser.expect("Resume which one? [1/2/none] (1): ")
    chooser.answer("2")
    chooser.expect(MENU)
    chooser.answer("r")

    lines = listing.splitlines()
    assert lines[0] == "Found 2 resumable sessions (most recent first):"
    assert lines[1] == f"  1. {new_short} - PAUSED - 'Newer work'"
    assert re.fullmatch(r"     Interrupted: \d+ seconds? ago \(fresh\)", lines[3])
    assert lines[4] == f"  2. {old_short} - PAUSED - 'Older work'"
    assert lines[5:8] == [
        "     Paused at: the start",
        "     Interrupted: 8 days ago (stale)",
        "     Note: interrupted over a week ago: consider starting over "
        "(`acode session discard ID`, then `acode run`)",
    ]
    rest = chooser.finish(expect=0)
    assert f"Resuming session {old_short}: Older work" in rest
    assert acode.status(older)["state"] == "COMPLETED"
    assert acode.status(newer)["state"] == "PAUSED"
    assert len(read_pids(acode.workspace / "new.pids")) == 1


def test_autopilot_never_asks_even_on_a_terminal(
    acode: Cli, terminal: OpenTerminal, monkeypatch: pytest.MonkeyPatch
) -> None:
    older = _paused_days_ago(acode, monkeypatch, "Older work", "old", days=1)
    newer = _paused(acode, "Newer work", "new")

    auto = terminal("resume", "--mode", "autopilot")

    rest = auto.finish(expect=0)
    assert "Resume" not in rest.split("Resuming session")[0]  # no question came first
    assert "Newer work" in rest
    assert acode.status(newer)["state"] == "COMPLETED"
    assert acode.status(older)["state"] == "PAUSED"
    # Without a terminal, autopilot is the default: the other one, which is a day old,
    # needs a person, or a flag that says one decided.
    stopped = acode("resume", expect=18)
    assert stopped.flat_err.startswith(
        "error ACODE-RESUME-008: autopilot does not resume session "
        f"{acode.status(older)['short_id']} on its own: interrupted 1 day ago (moderate, 24 "
        "hours or more)"
    )
    assert acode.status(older)["state"] == "PAUSED"
    assert "Older work" in acode("resume", "--any-age").out
    assert acode.status(older)["state"] == "COMPLETED"


def test_preflight_reports_everything_and_goes_on_only_on_proceed(
    acode: Cli, terminal: OpenTerminal
) -> None:
    session = _paused(acode, "Careful work")
    short = acode.status(session)["short_id"]
    (acode.workspace / "job-1.txt").write_text("edited by a person\n")
    before = _events(acode, session)
    without_tty = acode("resume", "--mode", "preflight", expect=2)
    assert without_tty.flat_err == (
        "error ACODE-USAGE-001: --mode preflight needs a terminal: it goes on only when you "
        "type 'proceed' hint: use --mode autopilot in scripts, or --dry-run to see the report"
    )

    stopped = terminal("resume", session, "--mode", "preflight")
    report = stopped.expect("Type 'proceed' to resume, anything else to stop: ")
    stopped.answer("yes")

    assert f"Would resume session {short}: Careful work" in report
    assert "  In progress: nap (retry)" in report
    assert "  ✓ Integrity: all 9 events verified from the first (--verify)\n" in report
    assert re.search(
        r"\nAge and risk:\n  Interrupted: \d+ seconds? ago \(fresh\)\n"
        r"  Changed files: job-1.txt \(modified\)\n  Configuration changes: none\n"
        r"  In progress: nap: run: echo .* -> retry\n"
        r"  A rollback will: revert nothing \(the step runs again\)\n",
        report,
    )
    assert "Files the session touched (2):\n  ✗ job-1.txt: Modified\n  ✓ job-2.txt: unchanged" in (
        report
    )
    assert "Remaining plan:\n  Task 1: Main\n    - (in progress) nap: run: echo" in report
    assert "\n    - last: write: job-3.txt\n" in report
    assert "yes\nNot resumed; nothing was changed." in stopped.finish(expect=0)
    assert _events(acode, session) == before

    proceeding = terminal("resume", session, "--mode", "preflight")
    proceeding.expect("Type 'proceed' to resume, anything else to stop: ")
    proceeding.answer("proceed")

    rest = proceeding.finish(expect=0)
    assert rest.rstrip().endswith(f"Session {short} completed: 4 steps done.")
    # The person saw the change and said proceed: it stays.
    assert (acode.workspace / "job-1.txt").read_text() == "edited by a person\n"


def test_changed_files_prompt_can_view_abort_or_continue(
    acode: Cli, terminal: OpenTerminal
) -> None:
    session = _paused(acode, "Shared files")
    (acode.workspace / "job-2.txt").write_text("2\nand a line of mine\n")
    question = "[C]ontinue anyway, [A]bort, [V]iew changes [c/a/v] (a): "

    aborted = terminal("resume", session)
    aborted.expect(MENU)
    aborted.answer("r")
    shown = aborted.expect(question)
    aborted.answer("a")
    assert "  ✗ Changed since it stopped: job-2.txt (modified)\n" in aborted.screen

    assert "  ✗ Files the session touched: 2 checked, 1 changed\n    - job-2.txt (modified, " in (
        shown
    )
    assert "The session was working on these files. Changes may conflict.\n" in shown
    assert "error ACODE-RESUME-004: files of session " in aborted.finish(expect=17)
    assert acode.status(session)["resumes"] == 0

    viewer = terminal("resume", session)
    viewer.expect(MENU)
    viewer.answer("r")
    viewer.expect(question)
    viewer.answer("v")
    diff = viewer.expect(question)
    viewer.answer("c")

    assert "--- job-2.txt (recorded)\n+++ job-2.txt (now)\n" in diff
    assert "\n 2\n+and a line of mine\n" in diff
    assert viewer.finish(expect=0).rstrip().endswith("completed: 4 steps done.")
    assert (acode.workspace / "job-2.txt").read_text() == "2\nand a line of mine\n"


STRATEGY_QUESTION = (
    "Step 'nap' (run) was interrupted half-way. [R]oll back and run again, run again as "
    "it is ([T]retry), or [S]top [r/t/s] (r): "
)
# Rich erases the line it redraws its live display on; a question on that line is gone.
ERASE_LINE = b"\x1b[2K"


def test_strategy_prompt_asks_what_to_do_with_the_interrupted_step(
    acode: Cli, terminal: OpenTerminal
) -> None:
    session = _paused(acode, "Half done")
    question = STRATEGY_QUESTION

    stop = terminal("resume", session, "--strategy", "prompt")
    stop.expect(MENU)
    stop.answer("r")
    stop.expect(question)
    stop.answer("s")

    assert "Paused session" in stop.finish(expect=130)
    assert acode.status(session)["state"] == "PAUSED"
    assert len(read_pids(acode.workspace / "job.pids")) == 1  # the command did not run

    retry = terminal("resume", session, "--strategy", "prompt")
    retry.expect(MENU)
    retry.answer("r")
    retry.expect(question)
    retry.answer("t")

    assert retry.finish(expect=0).rstrip().endswith("completed: 4 steps done.")
    assert len(read_pids(acode.workspace / "job.pids")) == 2


def test_the_strategy_question_stays_on_the_screen(acode: Cli, terminal: OpenTerminal) -> None:
    session = _paused(acode, "Half done")
    asking = terminal("resume", session, "--strategy", "prompt")
    asking.expect(MENU)
    asking.answer("r")
    asking.expect(STRATEGY_QUESTION)

    redrawn = asking.idle(0.5)

    asking.answer("s")
    asking.finish(expect=130)
    assert ERASE_LINE not in redrawn


APPROVAL = plan_yaml(
    "Needs a yes",
    '{id: before, write: before.txt, content: "1\\n"}',
    "{id: ok, approve: Ship it?}",
    '{id: after, write: after.txt, content: "2\\n"}',
)


def test_approvals_are_asked_on_a_terminal_except_in_autopilot(
    acode: Cli, terminal: OpenTerminal
) -> None:
    acode.write("plan.yml", APPROVAL)
    session = acode("run", "plan.yml", "--json", expect=20).json_lines()[0]["id"]

    auto = terminal("resume", session, "--mode", "autopilot")
    assert "is waiting for approval of step 'ok': Ship it?" in auto.finish(expect=20)

    asked = terminal("resume", session)
    asked.expect(MENU)
    asked.answer("r")
    asked.expect("Approval needed (ok): Ship it? [y/n/v/?]: ")
    assert ERASE_LINE not in asked.idle(0.3)  # the progress display waits with the question
    asked.answer("y")

    assert asked.finish(expect=0).rstrip().endswith("completed: 3 steps done.")
    assert (acode.workspace / "after.txt").read_text() == "2\n"
    decided = [e for e in _events(acode, session) if e["type"] == "approval_decided"]
    assert [e["payload"]["approved"] for e in decided] == [True]


def test_ctrl_c_at_a_question_changes_nothing_or_pauses(acode: Cli, terminal: OpenTerminal) -> None:
    acode.write("plan.yml", APPROVAL)
    session = acode("run", "plan.yml", "--json", expect=20).json_lines()[0]["id"]
    before = _events(acode, session)

    choosing = terminal("resume")
    choosing.expect(MENU)
    choosing.type("\x03")  # Ctrl+C before anything was written
    choosing.finish(expect=130)
    assert _events(acode, session) == before

    approving = terminal("resume", session)
    approving.expect(MENU)
    approving.answer("r")
    approving.expect("Approval needed (ok): Ship it? [y/n/v/?]: ")
    approving.type("\x03")  # Ctrl+C at the approval: the session pauses

    assert "Paused session" in approving.finish(expect=130)
    status = acode.status(session)
    assert (status["state"], status["lock"]) == ("PAUSED", None)
    assert not (acode.workspace / "after.txt").exists()
