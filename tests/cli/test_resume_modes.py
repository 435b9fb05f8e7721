"""Specification 002's modes: the mode a session started in, autopilot's age and conflict
rules and the decision it logs, interactive's start over and details, a session whose
history cannot be trusted, and the `session_resume` log record; on real terminals
(tests/cli/conftest.py ``Terminal``), with real killed processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from typing import Any

import pytest

from tests.cli.conftest import Cli, OpenTerminal, plan_yaml, wait_for_pid
from tests.cli.test_modes import MENU, _events, _paused, _paused_days_ago
from tests.support.attacker import Attacker

__all__: list[str] = []


def _log(acode: Cli, event: str) -> list[dict[str, Any]]:
    """The records ``event`` of the workspace's real log file, oldest first."""
    log = acode.workspace / ".agent" / "state" / "logs" / "acode.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in records if r["event"] == event]


def test_autopilot_resumes_a_fresh_session_and_logs_why_and_the_replay_order(acode: Cli) -> None:
    session = _paused(acode, "Fresh work")

    acode("resume")  # no terminal: autopilot

    (decision,) = _log(acode, "autopilot_decision")
    assert (decision["session_id"], decision["decision"], decision["safe"]) == (
        session,
        "resume",
        True,
    )
    assert re.fullmatch(
        r"interrupted \d+ seconds? ago \(fresh, under 24 hours\)", decision["reasons"][0]
    )
    assert decision["reasons"][1:] == [
        "2 file(s) the session touched unchanged",
        "configuration unchanged",
    ]
    (record,) = _log(acode, "session_resume")
    assert record["mode"] == "autopilot"
    assert 0 <= record["interrupted_seconds"] < 3600
    assert record["replay_order"] == {
        "by": "timestamp, event_id",
        "steps": 2,
        "positions": [[1, 2]],
        "first": "one",
        "last": "two",
    }


def test_autopilot_stops_an_old_session_without_a_terminal_and_hands_it_over_on_one(
    acode: Cli, terminal: OpenTerminal, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _paused_days_ago(acode, monkeypatch, "Old work", "old", days=3)
    short = acode.status(session)["short_id"]
    before = _events(acode, session)

    stopped = acode("resume", expect=18)

    assert stopped.flat_err == (
        f"error ACODE-RESUME-008: autopilot does not resume session {short} on its own: "
        "interrupted 3 days ago (moderate, 24 hours or more) hint: look first: acode resume "
        f"--dry-run {short}; then resume it on a terminal (acode resume {short}) or here with: "
        f"acode resume {short} --mode autopilot --any-age; nothing was changed"
    )
    assert _events(acode, session) == before
    assert _log(acode, "autopilot_decision")[-1]["decision"] == "stopped"

    handed = terminal("resume", "--mode", "autopilot")
    shown = handed.expect(MENU)
    handed.answer("a")
    handed.finish(expect=0)

    assert shown.startswith(
        f"Autopilot does not resume session {short} on its own: interrupted 3 days ago "
        "(moderate, 24 hours or more). Switching to interactive mode.\n"
        f"Session {short}: Old work\n  PAUSED, interrupted 3 days ago (moderate)\n"
    )
    assert _log(acode, "autopilot_decision")[-1]["decision"] == "interactive"
    assert _events(acode, session) == before

    acode("resume", "--any-age")
    (record,) = _log(acode, "session_resume")
    assert record["interrupted_seconds"] >= 3 * 86400
    assert acode.status(session)["state"] == "COMPLETED"


def test_autopilot_stops_on_changed_files_with_exit_17(acode: Cli) -> None:
    session = _paused(acode, "Shared work")
    short = acode.status(session)["short_id"]
    (acode.workspace / "job-1.txt").write_text("mine\n")

    stopped = acode("resume", expect=17)

    assert stopped.flat_err.startswith(
        f"error ACODE-RESUME-004: files of session {short} changed since it stopped: job-1.txt"
    )
    decision = _log(acode, "autopilot_decision")[-1]
    assert (decision["decision"], decision["conflicts"]) == (
        "stopped",
        ["1 changed file(s): job-1.txt"],
    )
    acode("resume", short, "--mode", "autopilot", "--continue-on-changes")
    assert (acode.workspace / "job-1.txt").read_text() == "mine\n"


def test_the_mode_chosen_at_run_is_recorded_and_is_the_default_of_its_resume(
    acode: Cli, terminal: OpenTerminal
) -> None:
    acode.write("careful.yml", plan_yaml("Careful", '{id: one, write: c.txt, content: "1\\n"}'))
    acode.write("wait.yml", plan_yaml("Waits", "{id: ok, approve: Go?}"))
    started = acode("run", "careful.yml", "--mode", "preflight", "--json").json_lines()[0]
    assert started["event"] == "started"
    waiting = acode("run", "wait.yml", "--json", expect=20).json_lines()[0]["id"]
    created = [_events(acode, s)[0]["payload"] for s in (started["id"], waiting)]
    assert [(c["mode"], c["mode_chosen"]) for c in created] == [
        ("preflight", True),
        ("autopilot", False),  # no terminal: the default, recorded as such
    ]

    # A session the default put in autopilot is interactive on a terminal.
    asked = terminal("resume", waiting)
    asked.expect(MENU)
    asked.answer("a")
    asked.finish(expect=0)

    # One started with --mode autopilot never asks, even on a terminal: neither the run
    # nor its resume.
    acode.write("auto.yml", plan_yaml("Auto", "{id: ok, approve: Go?}"))
    run = terminal("run", "auto.yml", "--mode", "autopilot")
    assert "is waiting for approval of step 'ok': Go?" in run.finish(expect=20)
    auto = acode.sessions()[0]
    assert _events(acode, auto["id"])[0]["payload"]["mode"] == "autopilot"
    never = terminal("resume", auto["id"])
    assert "is waiting for approval of step 'ok': Go?" in never.finish(expect=20)
    assert _log(acode, "session_resume")[-1]["mode"] == "autopilot"


def test_a_preflight_session_resumes_in_preflight(acode: Cli, terminal: OpenTerminal) -> None:
    steps = ("{id: ok, approve: Go?}", "{id: w, write: w.txt, content: x}")
    acode.write("job.yml", plan_yaml("Careful", *steps))
    session = acode("run", "job.yml", "--mode", "preflight", "--json", expect=20)
    session_id = session.json_lines()[0]["id"]
    short = acode.status(session_id)["short_id"]

    refused = acode("resume", session_id, expect=2)
    assert refused.flat_err.endswith(
        f"hint: resume it on a terminal, or here with: acode resume {short} --mode autopilot"
    )

    careful = terminal("resume", session_id)
    report = careful.expect("Type 'proceed' to resume, anything else to stop: ")
    careful.answer("no")
    careful.finish(expect=0)
    assert "Age and risk:" in report
    assert "  ✓ Integrity: all " in report


def test_start_over_discards_the_session_and_runs_its_plan_again(
    acode: Cli, terminal: OpenTerminal
) -> None:
    session = _paused(acode, "Start again")
    short = acode.status(session)["short_id"]
    acode.write("notes.txt", "a person's own file\n")

    again = terminal("resume", session)
    again.expect(MENU)
    again.answer("v")
    details = again.expect(MENU)  # the dry run's report, then the question again
    again.answer("s")
    again.expect(
        f"Discard session {short} (its history stays) and run its plan again from the first "
        "step, on the files as they are now? [y/n] (n): "
    )
    again.answer("y")
    rest = again.finish(expect=0)

    assert f"Would resume session {short}: Start again" in details
    assert "Validating environment..." in details
    assert f"Discarded session {short} (Start again)" in rest
    assert re.search(r"Session \S+ started: Start again \(1 tasks, 4 steps\)", rest)
    assert rest.rstrip().endswith("completed: 4 steps done.")
    rows = {r["id"]: r for r in acode("session", "list", "--all", "--json").json()}
    assert rows[session]["archived"] is True
    (new,) = [r for r in rows.values() if r["id"] != session]
    assert (new["title"], new["state"]) == ("Start again", "COMPLETED")
    assert (acode.workspace / "notes.txt").read_text() == "a person's own file\n"
    assert acode("session", "history", session).code == 0  # its history stays


def test_a_session_that_cannot_be_trusted_offers_verify_export_and_discard(
    acode: Cli, terminal: OpenTerminal
) -> None:
    session = _paused(acode, "Edited")
    short = acode.status(session)["short_id"]
    Attacker(acode.workspace).edit_payload(session, 8, lambda p: p.update(command="rm -rf /"))

    refused = acode("resume", session, expect=1)
    assert refused.flat_err.startswith(f"error ACODE-CKPT-002: session {short}: event 8")
    assert refused.flat_err.endswith(
        f"options: check all of it from its first event: acode resume --dry-run --verify "
        f"{short}; read it: acode session history {short}; export what can be read: acode "
        f"session export {short} --format json -o {short}.json; give it up, its history "
        f"kept: acode session discard {short}"
    )

    menu = (
        "[V]erify from the first event, [H]istory, [E]xport what can be read, [D]iscard, "
        "[A]bort [v/h/e/d/a] (a): "
    )
    asked = terminal("resume", session)
    asked.expect(menu)
    asked.answer("v")
    verified = asked.expect(menu)
    asked.answer("h")
    history = asked.expect(menu)
    asked.answer("e")
    asked.expect(f"Export to ({short}.json): ")
    asked.answer("")
    exported = asked.expect(menu)
    asked.answer("d")
    rest = asked.finish(expect=0)

    assert "error ACODE-CKPT-002" in verified
    assert "step_started" in history
    assert f"Wrote {short}.json" in exported
    assert json.loads((acode.workspace / f"{short}.json").read_text())["format"] == "acode-export"
    assert f"Discarded session {short}" in rest
    assert acode("session", "list", "--resumable", "--json").json() == []


LIBRARY = """\
import sys
import acode
from acode.engine.lifecycle import start_session
from acode.engine.plan_loader import load_plan

session = start_session("Other steps", workspace=".", plan=load_plan("plan.yml"))
print(session.id, flush=True)
session.run("other", "echo $$ >> other.pids; exec sleep 30")
"""


def test_a_plan_its_record_disagrees_with_is_acode_resume_006(acode: Cli) -> None:
    """On main the resume went on, said step 'one' was in progress, and stopped at it
    with ACODE-RESUME-007 after it had written its resume."""
    acode.write("plan.yml", plan_yaml("Other steps", '{id: one, write: one.txt, content: "1"}'))
    acode.write("program.py", LIBRARY)
    pids = acode.watch_pids("other.pids")
    program = subprocess.Popen(
        [sys.executable, "program.py"],
        cwd=acode.workspace,
        env=acode.env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert program.stdout is not None
    session = program.stdout.readline().strip()
    wait_for_pid(pids)
    os.kill(program.pid, signal.SIGKILL)  # killed in the step: it stays in progress
    program.wait()
    program.stdout.close()
    before = _events(acode, session)

    refused = acode("resume", session, expect=1)

    short = acode.status(session)["short_id"]
    assert refused.flat_err == (
        f"error ACODE-RESUME-006: cannot plan the continuation of session {short}: step 1 "
        "was recorded as 'other', but its plan has 'one' there; it was recorded by a program "
        f"that ran other steps than its plan hint: run that program again "
        f"(acode.resume_session('{short}')), or give the session up: acode session discard "
        f"{short}; nothing was changed"
    )
    assert _events(acode, session) == before
