"""What a person reads and types when resuming: every hint is a command that works when
pasted, `--force` resumes despite the environment report, and the resume says where the
session is ("Task 2/3, Step 3/5 (implement > build)") and how long its work took."""

from __future__ import annotations

import os
import re
import shlex
import signal
from pathlib import Path

import pytest

from acode.engine.lifecycle import start_session
from tests.cli.conftest import Cli, Result, plan_yaml, step_started

__all__: list[str] = []

NAP = "echo $$ >> nap.pids; [ $(wc -l < nap.pids) -gt 1 ] || exec sleep 30"
PLAN = (
    "title: Add input validation\n"
    "tasks:\n"
    "  - id: analyze\n"
    "    title: Analyze existing code\n"
    "    steps:\n"
    "      - {id: read-login, read: src/login.py}\n"
    "  - id: implement\n"
    "    title: Add email validator\n"
    "    steps:\n"
    "      - {id: validator, write: src/validators.py, content: 'def is_email(s): ...'}\n"
    f'      - {{id: build, run: "{NAP}"}}\n'
    "      - {id: log, run: echo done >> build.log}\n"
)


def _paused(acode: Cli) -> str:
    """The plan above, paused by Ctrl+C (SIGINT) in its build step; its short id."""
    acode.write("src/login.py", "def login(user):\n    return user\n")
    acode.write("plan.yml", PLAN)
    pids = acode.watch_pids("nap.pids")
    running = acode.start("run", "plan.yml", "--json")
    step_started(acode, running, pids)
    os.kill(running.pid, signal.SIGINT)
    acode.finish(running, expect=130)
    return str(acode.only_session()["short_id"])


def _pasted(result: Result) -> list[str]:
    """The command the hint of ``result``'s error ends with, as a shell splits it."""
    hint = result.err[result.err.index("hint: ") :].strip()
    command = hint[hint.rindex("acode ") :]
    words = shlex.split(command)
    assert words[0] == "acode", hint
    return words[1:]


def test_resume_force_goes_on_past_changed_files(acode: Cli) -> None:
    short = _paused(acode)
    acode.write("src/validators.py", "def is_email(s): return '@' in s\n")  # a person's edit

    refused = acode("resume", expect=17)
    assert "--continue-on-changes" in refused.flat_err

    done = acode("resume", short, "--force")
    assert done.out.splitlines()[-1] == f"Session {short} completed: 4 steps done."
    assert "  ✗ Files the session touched: 2 checked, 1 changed" in done.out
    assert (acode.workspace / "src/validators.py").read_text() == (
        "def is_email(s): return '@' in s\n"
    )  # kept


def test_abort_on_changes_wins_over_force(acode: Cli) -> None:
    short = _paused(acode)
    acode.write("src/validators.py", "mine\n")
    acode("resume", short, "--force", "--abort-on-changes", expect=17)
    assert acode.status(short)["resumes"] == 0


def test_force_does_not_go_past_a_missing_model(acode: Cli) -> None:
    acode.write(".agent/config.yml", "model:\n  base_url: http://127.0.0.1:9/v1\n  name: absent\n")
    acode.write("plan.yml", plan_yaml("Ask", f'{{id: nap, run: "{NAP}"}}', "{id: m, model: Hi}"))
    pids = acode.watch_pids("nap.pids")
    running = acode.start("run", "plan.yml", "--json")
    step_started(acode, running, pids)
    os.kill(running.pid, signal.SIGINT)
    acode.finish(running, expect=130)
    short = acode.only_session()["short_id"]

    refused = acode("resume", short, "--force", expect=17)
    assert "Model absent unavailable" in refused.out or "model server" in refused.flat_err
    assert "(--force does not go past this)" in refused.flat_err


def test_the_hint_after_changed_files_works_when_pasted(acode: Cli) -> None:
    short = _paused(acode)
    acode.write("src/validators.py", "mine\n")

    refused = acode("resume", expect=17)
    pasted = _pasted(refused)
    assert pasted == ["resume", short, "--continue-on-changes"]
    done = acode(*pasted)
    assert done.out.splitlines()[-1] == f"Session {short} completed: 4 steps done."


def test_the_hint_after_a_changed_configuration_works_when_pasted(acode: Cli) -> None:
    short = _paused(acode)
    acode.write(".agent/config.yml", "run:\n  default_timeout_seconds: 60\n")

    refused = acode("resume", expect=17)
    assert "run.default_timeout_seconds: 600.0 -> 60.0" in refused.flat_err
    pasted = _pasted(refused)
    assert pasted == ["resume", short, "--force"]
    assert acode(*pasted).out.splitlines()[-1] == f"Session {short} completed: 4 steps done."


def test_a_finished_plan_session_names_its_plan_file_and_that_command_works(
    acode: Cli, tmp_path: Path
) -> None:
    acode.write(
        "my plans/the plan.yml", plan_yaml("It's done", "{id: a, write: a.txt, content: a}")
    )
    first = acode("run", "my plans/the plan.yml", "--json").json_lines()[0]["id"]
    short = first[:13]

    refused = acode("resume", short, expect=15)
    assert refused.flat_err == (
        f"error ACODE-RESUME-002: cannot resume session {short}: it is COMPLETED hint: terminal "
        "sessions never run again; start a new one from its plan file: "
        "acode run 'my plans/the plan.yml'"
    )
    again = acode(*_pasted(refused), "--json").json_lines()
    assert again[-1]["state"] == "COMPLETED"
    assert again[0]["id"] != first
    assert again[0]["title"] == "It's done"

    # From outside the workspace, the command names it.
    elsewhere = acode("resume", short, "--workspace", str(acode.workspace), cwd=tmp_path, expect=15)
    pasted = _pasted(elsewhere)
    assert pasted[-2:] == ["--workspace", str(acode.workspace)]
    assert acode(*pasted, cwd=tmp_path).out.rstrip().endswith("completed: 1 step done.")
    assert len(acode.sessions()) == 3


def test_a_finished_agent_session_names_its_task_quoted_for_the_shell(
    acode: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", acode.env["ACODE_CHECKPOINT_SECRET"])
    monkeypatch.setenv("XDG_CONFIG_HOME", acode.env["XDG_CONFIG_HOME"])
    task = """Fix the "login" bug; don't touch $HOME or `tests`"""
    session = start_session(task, acode.workspace, agent_task=task)
    session.complete()
    session.close()

    refused = acode("resume", session.id[:13], expect=15)
    assert _pasted(refused) == ["run", task]  # the shell gives acode the task unchanged


def test_an_older_plan_session_without_its_plan_file_falls_back_to_a_placeholder(
    acode: Cli,
) -> None:
    acode.write("plan.yml", plan_yaml("Old", "{id: a, write: a.txt, content: a}"))
    short = acode("run", "plan.yml", "--json").json_lines()[0]["id"][:13]
    (acode.workspace / "plan.yml").unlink()  # as good as not recorded: it cannot be run

    refused = acode("resume", short, expect=15)
    assert refused.flat_err.endswith(
        "start a new one from the plan file of 'Old': acode run PLAN.yaml"
    )


def test_the_dry_run_and_status_say_where_the_session_is_and_what_its_work_took(
    acode: Cli,
) -> None:
    short = _paused(acode)

    preview = acode("resume", "--dry-run").out.splitlines()
    assert preview[:5] == [
        f"Would resume session {short}: Add input validation",
        "  Current state: PAUSED",
        "  Last checkpoint: Task 2/2, Step 1/3 (implement > validator)",
        "  Skipping: 2 steps (complete)",
        "  Remaining: 2 steps, from Task 2/2, Step 2/3 (implement > build)",
    ]
    assert re.fullmatch(
        r"  Time: 2 completed steps took \d+\.\ds; the 2 remaining: about \d+\.\ds at their mean",
        preview[5],
    )
    status = acode("status").out
    assert "At:      Task 2/2, Step 2/3 (implement > build)\n" in status
    assert acode.status(short)["position"] == {
        "task": "implement",
        "step": "build",
        "task_number": 2,
        "task_count": 2,
        "step_number": 2,
        "step_count": 3,
    }
    record = acode("resume", "--dry-run", "--json").json()
    assert record["resume_at"] == "Task 2/2, Step 2/3 (implement > build)"
    assert record["last_completed"]["step"] == "validator"
    assert record["work_time"]["completed_steps"] == 2
    assert record["work_time"]["remaining_steps"] == 2
    assert record["work_time"]["remaining_estimate_seconds"] is not None

    resumed = acode("resume", "--json").json_lines()[0]
    assert resumed["event"] == "resuming"
    assert resumed["work_time"]["completed_steps"] == 2


def test_with_no_step_completed_the_estimate_is_unknown(acode: Cli) -> None:
    acode.write("plan.yml", plan_yaml("Napping", f'{{id: nap, run: "{NAP}"}}', "{id: b, read: x}"))
    pids = acode.watch_pids("nap.pids")
    running = acode.start("run", "plan.yml", "--json")
    step_started(acode, running, pids)
    os.kill(running.pid, signal.SIGKILL)
    acode.finish(running, expect=-signal.SIGKILL)

    preview = acode("resume", "--dry-run").out
    assert "  Last checkpoint: the start (no step completed yet)\n" in preview
    assert (
        "  Time: 0 completed steps took 0.0s; the 2 remaining: unknown (no step completed yet)\n"
    ) in preview


@pytest.mark.parametrize(
    ("us", "text"),
    [
        (0, "0.0s"),
        (430_000, "0.4s"),
        (42_400_000, "42s"),
        (5_400_000_000, "90 min"),  # the manual's "(90 min)"
        (11_100_000_000, "3 h 05 min"),
    ],
)
def test_a_duration_reads_as_precisely_as_a_person_needs(us: int, text: str) -> None:
    from acode.cli.views import duration_text

    assert duration_text(us) == text
