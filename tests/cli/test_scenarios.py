"""The ten user verification scenarios of the specification, end to end: the real `acode`
executable in a temporary workspace, interrupted with real signals (SIGINT as Ctrl+C
sends it, SIGKILL as `kill -9` does), every exit status asserted.

A plan "naps" in a run step on its first attempt only: the test waits until that
command has started (its pid is in a file) and interrupts acode there, mid-run; the
attempt after a resume does not nap, so nothing waits for a timer.
"""

from __future__ import annotations

import os
import re
import signal
from typing import Any

from tests.cli.conftest import (
    Cli,
    Result,
    alive,
    plan_yaml,
    read_pids,
    step_started,
    wait_for,
)

__all__: list[str] = []


def _nap(pids: str) -> str:
    """A run step command that records its pid and naps on its first attempt only: for
    longer than any test takes to interrupt it, however slow the machine (or the
    coverage `make test` measures) makes the commands the test runs meanwhile."""
    return f"'echo $$ >> {pids}; [ $(wc -l < {pids}) -gt 1 ] || exec sleep 120'"


def _note(word: str) -> str:
    """A run step that leaves a trace of each time it runs."""
    return f"{{id: {word}, run: echo {word} >> work.log, paths: [work.log]}}"


def _three_tasks(title: str, nap_task: int, nap_at: int, pids: str = "nap.pids") -> str:
    """Three tasks of notes, with the napping step at (task, position in that task)."""
    tasks = {
        1: (
            "analyze",
            "Analyze existing code",
            ["{id: read-login, read: src/login.py}", _note("a1")],
        ),
        2: (
            "implement",
            "Add email validator",
            [
                '{id: validator, write: src/validators.py, content: "def is_email(s): ...\\n"}',
                _note("i1"),
                _note("i2"),
            ],
        ),
        3: ("verify", "Check the result", [_note("v1"), _note("v2")]),
    }
    tasks[nap_task][2].insert(nap_at, f"{{id: nap, run: {_nap(pids)}}}")
    text = f"title: {title}\ntasks:\n"
    for task_id, task_title, steps in tasks.values():
        text += f"  - id: {task_id}\n    title: {task_title}\n    steps:\n"
        text += "".join(f"      - {step}\n" for step in steps)
    return text


def _workspace(acode: Cli, plan: str) -> None:
    acode.write("src/login.py", "def login(user):\n    return user\n")
    acode.write("plan.yml", plan)


def _interrupt_run(acode: Cli, *args: str, pids: str = "nap.pids") -> tuple[str, Result]:
    """Start `acode ARGS`, press Ctrl+C once its napping step runs; returns the short id
    and what acode printed. Ctrl+C reaches the terminal's foreground process group, which
    is acode alone: a step's command runs in a session of its own."""
    pid_file = acode.watch_pids(pids)
    seen = len(read_pids(pid_file))
    running = acode.start(*args)
    step_started(acode, running, pid_file, seen + 1)
    os.killpg(running.pid, signal.SIGINT)
    result = acode.finish(running, expect=130)
    paused = re.search(r"Paused session (\S+);", result.flat_err)
    assert paused, result.describe()
    return paused.group(1), result


def _history(acode: Cli, session: str) -> list[dict[str, Any]]:
    events = acode("session", "history", session, "--json").json()
    assert isinstance(events, list)
    return events


def _completed_steps(events: list[dict[str, Any]]) -> list[str]:
    return [e["payload"]["step"] for e in events if e["type"] == "step_completed"]


def _work_log(acode: Cli) -> list[str]:
    return (acode.workspace / "work.log").read_text().split()


def test_scenario_01_basic_resume(acode: Cli) -> None:
    _workspace(acode, _three_tasks("Add input validation", nap_task=2, nap_at=2))

    # 1. Run `acode run "task"` (acode runs a plan file)
    # 2. Press Ctrl+C mid-run: during task 2, step 3
    short, paused = _interrupt_run(acode, "run", "plan.yml")
    assert f"Paused session {short}; 4 steps done. Resume with: acode resume {short}" in (
        paused.flat_err
    )
    assert _work_log(acode) == ["a1", "i1"]
    assert acode.status(short)["state"] == "PAUSED"

    # 3. Run `acode resume`
    resumed = acode("resume")

    # 4. Verify: continues from the pause point
    lines = resumed.out.splitlines()
    assert lines[:6] == [
        f"Resuming session {short}: Add input validation",
        "  Loaded state: PAUSED at Task 2/3, Step 3/4 (implement > nap)",
        "  Skipping: Task 1: Analyze existing code (complete)",
        "  Skipping: Task 2, Steps 1-2 (complete)",
        "  In progress: nap -> retry",
        "  Starting from: Task 2/3, Step 3/4 (implement > nap); 4 steps remaining",
    ]
    assert re.fullmatch(
        r"  Time: 4 completed steps took \d+\.\ds; the 4 remaining: about \d+\.\ds at their mean",
        lines[6],
    )
    ready = lines.index("Environment ready. Resuming...")  # every resume shows its checks
    assert lines[7] == "Validating environment..."
    steps = lines[ready + 1 : -1]
    done = [re.sub(r"^  ✓ \[(\d)/8\] (\S+) > (\S+):.*", r"\1 \2 \3", line) for line in steps]
    assert done == ["5 implement nap", "6 implement i2", "7 verify v1", "8 verify v2"]
    assert lines[-1] == f"Session {short} completed: 8 steps done."
    assert _work_log(acode) == ["a1", "i1", "i2", "v1", "v2"]
    assert acode.status(short)["state"] == "COMPLETED"


def test_scenario_02_resume_specific(acode: Cli) -> None:
    acode.write("first.yml", _three_tasks("First job", 1, 0, pids="first.pids"))
    acode.write("second.yml", _three_tasks("Second job", 1, 0, pids="second.pids"))
    acode.write("src/login.py", "def login(user):\n    return user\n")

    # 1. Start and pause session abc123
    _interrupt_run(acode, "run", "first.yml", pids="first.pids")
    # 2. Start and pause session def456
    _interrupt_run(acode, "run", "second.yml", pids="second.pids")
    # Sessions started within a minute share their first 8 digits; the short ids grow
    # until they differ, so they are read once both sessions exist.
    newer, older = acode.sessions()
    assert (newer["title"], older["title"]) == ("Second job", "First job")
    abc, def_ = older["short_id"], newer["short_id"]

    # 3. Run `acode resume abc123`
    resumed = acode("resume", abc)

    # 4. Verify: abc123 resumed, not def456
    assert resumed.out.splitlines()[0] == f"Resuming session {abc}: First job"
    assert resumed.out.splitlines()[-1] == f"Session {abc} completed: 8 steps done."
    assert def_ not in resumed.out
    first, second = acode.status(abc), acode.status(def_)
    assert (first["state"], first["resumes"]) == ("COMPLETED", 1)
    assert (second["state"], second["resumes"], second["steps_completed"]) == ("PAUSED", 0, 0)
    assert len(read_pids(acode.workspace / "first.pids")) == 2
    assert len(read_pids(acode.workspace / "second.pids")) == 1


def test_scenario_02_with_the_id_acode_printed(acode: Cli) -> None:
    acode.write("plan.yml", plan_yaml("Waits", "{id: ok, approve: Go on?}"))
    first = acode("run", "plan.yml", expect=20)
    printed = re.search(r"then: acode resume (\S+)", first.flat_err)
    assert printed, first.describe()
    acode("run", "plan.yml", expect=20)

    acode("resume", printed.group(1), expect=20)


def test_scenario_03_skip_completed(acode: Cli) -> None:
    _workspace(acode, _three_tasks("Three tasks", nap_task=3, nap_at=0))

    # 1. Complete 2 of 3 tasks
    # 2. Interrupt the session (at the first step of task 3)
    short, _ = _interrupt_run(acode, "run", "plan.yml")
    assert _work_log(acode) == ["a1", "i1", "i2"]

    # 3. Resume
    records = acode("resume", short, "--json").json_lines()

    # 4. Verify: only task 3 executes
    resuming = records[0]
    assert resuming["event"] == "resuming"
    assert resuming["continuation"]["skipped_tasks"] == ["analyze", "implement"]
    assert resuming["skipped_steps"] == 5
    assert resuming["remaining_steps"] == 3
    ran = [(r["task"], r["step"]) for r in records if r.get("phase") == "done"]
    assert ran == [("verify", "nap"), ("verify", "v1"), ("verify", "v2")]
    skipped = {r["task"] for r in records if r.get("phase") == "skipped"}
    assert skipped == {"analyze", "implement"}
    assert records[-1]["state"] == "COMPLETED"
    assert records[-1]["exit_code"] == 0
    assert _work_log(acode) == ["a1", "i1", "i2", "v1", "v2"]  # tasks 1 and 2 ran once
    assert _completed_steps(_history(acode, short)).count("validator") == 1


def test_scenario_04_terminal_state_rejected(acode: Cli) -> None:
    _workspace(acode, _three_tasks("Done already", nap_task=1, nap_at=0))
    # 1. Complete a session (its nap is over before it starts: the pid file has a line)
    (acode.workspace / "nap.pids").write_text("0\n")
    short = acode("run", "plan.yml", "--json").json_lines()[0]["id"][:13]
    before = _history(acode, short)

    # 2. Run `acode resume <completed-session>`
    refused, dry_run, nothing = acode.many(
        [["resume", short], ["resume", short, "--dry-run"], ["resume"]], expect=None
    )

    # 3. Verify: error message
    assert refused.flat_err == (
        f"error ACODE-RESUME-002: cannot resume session {short}: it is COMPLETED hint: "
        "terminal sessions never run again; start a new one from its plan file: acode run plan.yml"
    )
    assert refused.out == ""
    assert "it is COMPLETED" in dry_run.flat_err
    assert "no resumable session in this workspace" in nothing.flat_err
    # 4. Verify: exit code non-zero (15: a terminal state; 14: nothing else to resume)
    assert (refused.code, dry_run.code, nothing.code) == (15, 15, 14)
    assert _history(acode, short) == before  # nothing was written


def test_scenario_05_lock_conflict(acode: Cli) -> None:
    _workspace(acode, _three_tasks("Long job", nap_task=2, nap_at=0))
    pids = acode.watch_pids("nap.pids")

    # 1. Start session in terminal 1
    terminal_1 = acode.start("run", "plan.yml")
    step_started(acode, terminal_1, pids)
    short = acode.only_session()["short_id"]

    # 2. Try `acode resume` in terminal 2 (the most recent session, then by id)
    latest, named, looking = acode.many(
        [["resume"], ["resume", short], ["resume", short, "--dry-run"]], expect=None
    )

    # 3. Verify: lock conflict message
    for refused in (latest, named):
        assert refused.code == 16, refused.describe()
        assert refused.flat_err.startswith("error ACODE-RESUME-003: session "), refused.describe()
        assert f"is locked by pid {terminal_1.pid} on host" in refused.flat_err
        assert "acode session unlock" in refused.flat_err
    assert looking.code == 0  # a dry run takes no lock
    assert terminal_1.proc.poll() is None  # the holder runs on, undisturbed
    assert acode.status(short)["resumes"] == 0

    os.killpg(terminal_1.pid, signal.SIGINT)
    acode.finish(terminal_1, expect=130)
    assert acode("resume").out.splitlines()[-1] == f"Session {short} completed: 8 steps done."


def test_scenario_06_environment_changed(acode: Cli) -> None:
    _workspace(acode, _three_tasks("Validators", nap_task=2, nap_at=1))
    # 1. Pause session working on file X (src/validators.py, written by task 2)
    short, _ = _interrupt_run(acode, "run", "plan.yml")
    before = _history(acode, short)

    # 2. Modify file X externally
    x = acode.workspace / "src" / "validators.py"
    x.write_text("def is_email(s): return '@' in s\n")

    # 3. Resume (no terminal to ask on, so the change stops it), and look first
    refused, preview = acode.many([["resume"], ["resume", "--dry-run"]], expect=None)

    # 4. Verify: warning about changes
    assert refused.code == 17, refused.describe()
    assert refused.flat_err.startswith(
        f"error ACODE-RESUME-004: files of session {short} changed since it stopped: "
        f"src/validators.py (Modified) hint: review them (`acode resume {short} --dry-run`), "
        f"restore them, or keep them and go on: acode resume {short} --continue-on-changes"
    )
    assert preview.code == 0
    assert "  ✗ Files the session touched: 3 checked, 1 changed" in preview.out
    assert re.search(r"^    - src/validators\.py \(modified, \d+s ago\)$", preview.out, re.M)
    assert _history(acode, short) == before

    kept = acode("resume", "--continue-on-changes")
    assert "  ✗ Files the session touched: 3 checked, 1 changed" in kept.out
    assert kept.out.splitlines()[-1] == f"Session {short} completed: 8 steps done."
    assert x.read_text() == "def is_email(s): return '@' in s\n"  # the person's edit stays


# Scenario 7 (sync pending: degraded mode shown, works locally) needs a PostgreSQL
# server; it lives with the sync tests: tests/sync/test_commands.py::test_scenario_07_sync_pending.


def test_scenario_08_crash_recovery(acode: Cli) -> None:
    _workspace(acode, _three_tasks("Crashes", nap_task=2, nap_at=2))
    pids = acode.watch_pids("nap.pids")

    # 1. Start session
    running = acode.start("run", "plan.yml")
    child = step_started(acode, running, pids)
    # 2. Kill process (kill -9): nothing is recorded, no handler runs
    os.kill(running.pid, signal.SIGKILL)
    acode.finish(running, expect=-signal.SIGKILL)
    os.kill(child, signal.SIGKILL)  # a power loss takes the step's command too
    wait_for("the orphaned command to stop", lambda: not alive(child))
    status = acode.status(acode.only_session()["id"])
    short = status["short_id"]
    assert (status["state"], status["steps_completed"], status["lock"]) == ("EXECUTING", 4, None)

    # 3. Run `acode resume`
    resumed = acode("resume")

    # 4. Verify: resumes from the checkpoint
    assert resumed.out.splitlines()[1:6] == [
        "  Loaded state: EXECUTING at Task 2/3, Step 3/4 (implement > nap)",
        "  Skipping: Task 1: Analyze existing code (complete)",
        "  Skipping: Task 2, Steps 1-2 (complete)",
        "  In progress: nap -> retry",
        "  Starting from: Task 2/3, Step 3/4 (implement > nap); 4 steps remaining",
    ]
    assert resumed.out.splitlines()[-1] == f"Session {short} completed: 8 steps done."
    assert _work_log(acode) == ["a1", "i1", "i2", "v1", "v2"]
    assert _completed_steps(_history(acode, short)) == [
        "read-login", "a1", "validator", "i1", "nap", "i2", "v1", "v2"
    ]  # fmt: skip


def test_scenario_09_idempotency(acode: Cli) -> None:
    _workspace(acode, _three_tasks("Writes once", nap_task=2, nap_at=1))
    validators = acode.workspace / "src" / "validators.py"

    # 1. Pause after a file write (src/validators.py, then the nap)
    short, _ = _interrupt_run(acode, "run", "plan.yml")
    written = validators.stat()

    # 2. Resume
    records = acode("resume", short, "--json").json_lines()
    assert records[-1]["exit_code"] == 0

    # 3. Verify: the file is not written again (same inode: no new file was renamed in)
    again = validators.stat()
    assert (again.st_ino, again.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)
    phases = {r["step"]: r["phase"] for r in records if r["event"] == "step"}
    assert phases["validator"] == "skipped"
    # 4. Verify: the step is marked complete, once, at its first attempt
    steps = {s["step"]: s for s in acode("session", "show", short, "--json").json()["steps"]}
    assert (steps["validator"]["status"], steps["validator"]["attempt"]) == ("completed", 1)
    events = _history(acode, short)
    about = [e["type"] for e in events if e["payload"].get("step") == "validator"]
    assert about == ["step_started", "step_completed"]


def test_scenario_10_multiple_resumes(acode: Cli) -> None:
    plan = _three_tasks("Interrupted twice", nap_task=1, nap_at=1)
    plan = plan.replace(_note("v1"), f"{{id: nap2, run: {_nap('nap2.pids')}}}")
    _workspace(acode, plan)
    nap2 = acode.watch_pids("nap2.pids")
    short, _ = _interrupt_run(acode, "run", "plan.yml")

    # 1. Resume session
    second = acode.start("resume", short)
    child = step_started(acode, second, nap2)
    # 2. Interrupt again, the hard way this time
    os.kill(second.pid, signal.SIGKILL)
    acode.finish(second, expect=-signal.SIGKILL)
    os.kill(child, signal.SIGKILL)
    assert acode.status(short)["state"] == "EXECUTING"

    # 3. Resume again
    third = acode("resume", short)

    # 4. Verify: works correctly
    assert "  Loaded state: EXECUTING at Task 3/3, Step 1/2 (verify > nap2)" in third.out
    assert third.out.splitlines()[-1] == f"Session {short} completed: 8 steps done."
    status = acode.status(short)
    assert (status["state"], status["resumes"], status["steps_completed"]) == ("COMPLETED", 2, 8)
    # 5. Verify: no duplicate work (the interrupted commands ran again; they had not finished)
    assert _work_log(acode) == ["a1", "i1", "i2", "v2"]
    assert len(read_pids(acode.workspace / "nap.pids")) == 2
    assert len(read_pids(nap2)) == 2
    completed = _completed_steps(_history(acode, short))
    assert sorted(completed) == sorted(set(completed))
    assert len(completed) == 8
    assert (acode.workspace / "src" / "validators.py").exists()
