"""`acode run` and `acode resume` end to end: plans to completion, failures, approvals
and repeated interruptions, through the real executable."""

from __future__ import annotations

import re
import signal

from tests.cli.conftest import Cli, plan_yaml, wait_for_pid

__all__: list[str] = []

DEMO = plan_yaml(
    "Demo plan",
    '{id: greet, write: out.txt, content: "hello\\n"}',
    "{id: log, run: echo ran >> log.txt, paths: [log.txt]}",
    "{id: look, read: out.txt}",
)

STEP_FUNCTIONS = """\
from pathlib import Path


def record(ctx):
    with Path(ctx.workspace, "python.log").open("a") as log:
        log.write(f"{ctx.step_id} {ctx.idempotency_key}\\n")
    return {"step": ctx.step_id}
"""


def test_run_completes_a_plan(acode: Cli) -> None:
    acode.write("plan.yml", DEMO)

    result = acode("run", "plan.yml")

    row = acode.only_session()
    short = row["short_id"]
    lines = result.out.splitlines()
    assert lines[0] == f"Session {short} started: Demo plan (1 tasks, 3 steps)"
    assert lines[1].startswith("  ✓ [1/3] main > greet: write: out.txt (")
    assert lines[2].startswith("  ✓ [2/3] main > log: run: echo ran >> log.txt (")
    assert lines[3].startswith("  ✓ [3/3] main > look: read: out.txt (")
    assert lines[-1] == f"Session {short} completed: 3 steps done."
    assert result.err == ""
    assert (acode.workspace / "out.txt").read_text() == "hello\n"
    assert (acode.workspace / "log.txt").read_text() == "ran\n"
    assert row["state"] == "COMPLETED"
    assert row["title"] == "Demo plan"


def test_run_json_prints_one_object_a_line(acode: Cli) -> None:
    acode.write("plan.yml", DEMO)

    records = acode("run", "plan.yml", "--json").json_lines()

    started, *steps, final = records
    assert started["event"] == "started"
    assert started["title"] == "Demo plan"
    assert started["total_steps"] == 3
    done = [r["step"] for r in steps if r["event"] == "step" and r["phase"] == "done"]
    assert done == ["greet", "log", "look"]
    assert final == {
        "event": "session",
        "id": started["id"],
        "state": "COMPLETED",
        "steps_completed": 3,
        "total_steps": 3,
        "exit_code": 0,
        "message": final["message"],
    }


def test_a_failing_step_fails_the_session_for_good(acode: Cli) -> None:
    acode.write(
        "plan.yml",
        plan_yaml(
            "Breaks",
            "{id: boom, run: echo broken >&2; exit 3}",
            '{id: never, write: never.txt, content: "x"}',
        ),
    )

    result = acode("run", "plan.yml", expect=1)

    found = re.search(r"Session (\S+) FAILED", result.flat_err)
    assert found, result.describe()
    short = found.group(1)
    assert "exited with status 3" in result.flat_err
    assert "broken" in result.flat_err
    assert not (acode.workspace / "never.txt").exists()
    status = acode.status(short)
    assert status["state"] == "FAILED"
    assert status["steps_failed"] == 1
    refused = acode("resume", short, expect=15)
    assert f"cannot resume session {short}: it is FAILED" in refused.flat_err


def _nap(pid_file: str) -> str:
    """A command that records its pid and, on its first attempt only, sleeps a second."""
    return f"'echo $$ >> {pid_file}; [ $(wc -l < {pid_file}) -gt 1 ] || exec sleep 1'"


def test_pausing_twice_and_resuming_twice_runs_every_step_once(acode: Cli) -> None:
    acode.write("plan_steps.py", STEP_FUNCTIONS)
    acode.write(
        "plan.yml",
        plan_yaml(
            "Twice interrupted",
            '{id: p1, python: "plan_steps:record"}',
            f"{{id: nap1, run: {_nap('nap1.pids')}}}",
            '{id: p2, python: "plan_steps:record"}',
            f"{{id: nap2, run: {_nap('nap2.pids')}}}",
            '{id: p3, python: "plan_steps:record"}',
        ),
    )
    nap1, nap2 = acode.watch_pids("nap1.pids"), acode.watch_pids("nap2.pids")

    first = acode.start("run", "plan.yml")
    wait_for_pid(nap1)
    first.proc.send_signal(signal.SIGINT)
    acode.finish(first, expect=130)
    row = acode.only_session()
    assert row["state"] == "PAUSED"

    second = acode.start("resume", row["short_id"])
    wait_for_pid(nap2)
    second.proc.send_signal(signal.SIGINT)
    paused = acode.finish(second, expect=130)
    assert f"Paused session {row['short_id']}; 3 steps done." in paused.flat_err

    records = acode("resume", row["short_id"], "--json").json_lines()

    assert records[0]["remaining_steps"] == 2
    phases = [(r["step"], r["phase"]) for r in records if r["event"] == "step"]
    assert phases[:3] == [("p1", "skipped"), ("nap1", "skipped"), ("p2", "skipped")]
    assert ("nap2", "done") in phases
    assert ("p3", "done") in phases
    assert records[-1]["state"] == "COMPLETED"
    assert records[-1]["exit_code"] == 0
    status = acode.status(row["id"])
    assert status["resumes"] == 2
    logged = (acode.workspace / "python.log").read_text().splitlines()
    assert [line.split()[0] for line in logged] == ["p1", "p2", "p3"]
    assert len({line.split()[1] for line in logged}) == 3  # three distinct idempotency keys
    # The interrupted commands ran again because they had not finished; nothing else did.
    assert len(nap1.read_text().splitlines()) == 2
    assert len(nap2.read_text().splitlines()) == 2
    events = acode("session", "history", row["id"], "--json").json()
    completed = [e["payload"]["step"] for e in events if e["type"] == "step_completed"]
    assert completed == ["p1", "nap1", "p2", "nap2", "p3"]


APPROVAL_PLAN = plan_yaml(
    "Needs a yes",
    '{id: before, write: before.txt, content: "1\\n"}',
    "{id: ok, approve: Ship it?}",
    '{id: after, write: after.txt, content: "2\\n"}',
)
WAITING = re.compile(r"Session (\S+) is waiting for approval of step 'ok': Ship it\?")


def _stop_at_approval(acode: Cli, *, check: bool = True) -> str:
    """Run the approval plan with no terminal to ask on; returns the short id."""
    acode.write("plan.yml", APPROVAL_PLAN)
    result = acode("run", "plan.yml", expect=20)
    found = WAITING.search(result.flat_err)
    assert found, result.describe()
    short = found.group(1)
    if check:
        assert f"approve: acode approve {short} deny: acode approve {short} --deny" in (
            result.flat_err
        )
        assert f"then: acode resume {short}" in result.flat_err
        status = acode.status(short)
        assert status["state"] == "AWAITING_APPROVAL"
        assert status["pending_approval"] == "ok"
        assert status["lock"] is None  # the run has ended: nobody holds the session
        assert not (acode.workspace / "after.txt").exists()
    return short


def test_an_approval_with_no_terminal_waits_for_acode_approve(acode: Cli) -> None:
    short = _stop_at_approval(acode)
    history = acode("session", "history", short, "--json").json()

    preview, as_json = acode.many(
        [["resume", short, "--dry-run"], ["resume", short, "--dry-run", "--json"]]
    )
    assert preview.out.splitlines()[:2] == [
        f"Would resume session {short}: Needs a yes",
        "  Current state: AWAITING_APPROVAL",
    ]
    assert "Remaining: 2 steps" in preview.out
    data = as_json.json()
    assert data["session_id"].startswith(short)
    assert data["remaining_steps"] == 2
    assert data["continuation"]["pending_steps"] == ["after"]
    assert acode("session", "history", short, "--json").json() == history  # wrote nothing

    approved = acode("approve", short)
    assert approved.out.splitlines() == [
        f"Approved: Ship it? (session {short}, step ok).",
        f"Continue with: acode resume {short}",
    ]
    resumed = acode("resume")  # no id: the most recent resumable session

    assert resumed.out.splitlines()[0] == f"Resuming session {short}: Needs a yes"
    assert resumed.out.splitlines()[-1] == f"Session {short} completed: 3 steps done."
    assert (acode.workspace / "after.txt").read_text() == "2\n"
    nothing = acode("approve", short, expect=2)
    assert f"session {short} has no approval waiting" in nothing.flat_err


def test_a_denied_approval_cancels_the_session(acode: Cli) -> None:
    short = _stop_at_approval(acode)
    wrong = acode("approve", short, "--step", "before", expect=2)
    assert f"session {short} has no approval waiting at step 'before'" in wrong.flat_err

    denied = acode("approve", short, "--deny", "--json").json()
    assert denied["step"] == "ok"
    assert denied["approved"] is False
    result = acode("resume", short, expect=1)

    assert f"Approval denied: session {short} cancelled." in result.flat_err
    assert not (acode.workspace / "after.txt").exists()
    again = acode("resume", short, expect=15)
    assert "it is CANCELLED" in again.flat_err


def test_a_file_only_a_done_step_wrote_is_reported_and_stops_nothing(acode: Cli) -> None:
    """before.txt was written by a step that is done, and no step still to run touches
    it: the change cannot alter what the session does (it is reported and kept). One
    the rest of the plan writes stops the resume: tests/cli/test_resume_conflicts.py."""
    short = _stop_at_approval(acode, check=False)
    (acode.workspace / "before.txt").write_text("edited by hand\n")
    acode("approve", short)

    done = acode("resume", short)

    assert re.search(r"^    - before\.txt \(modified, \d+s ago\)$", done.out, re.M)
    assert "      informational: written by Task 1, Step 1 (before); no step still to run " in (
        done.out
    )
    assert (acode.workspace / "before.txt").read_text() == "edited by hand\n"
    assert (acode.workspace / "after.txt").read_text() == "2\n"


def test_resume_dry_run_json_says_it_is_a_preview(acode: Cli) -> None:
    short = _stop_at_approval(acode, check=False)

    data = acode("resume", short, "--dry-run", "--json").json()

    assert data["event"] == "resume_preview"
