"""Ctrl+C and SIGTERM on a real `acode run`: pause, exit 130, no stray processes, and a
resume that runs the interrupted command again."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from tests.cli.conftest import Cli, alive, plan_yaml, read_pids, wait_for, wait_for_pid

__all__: list[str] = []


def _nap_plan(prelude: str = "") -> str:
    # Only the first attempt naps, so that the run after a resume need not wait again.
    command = f"{prelude}echo $$ >> nap.pids; [ $(wc -l < nap.pids) -gt 1 ] || exec sleep 2"
    return plan_yaml(
        "Napping",
        '{id: first, write: first.txt, content: "1\\n"}',
        f'{{id: nap, run: "{command}"}}',
        '{id: last, write: last.txt, content: "3\\n"}',
    )


NAP = _nap_plan()
# A command that ignores SIGTERM keeps acode in its grace period after the first signal,
# which is when a person presses Ctrl+C a second time.
STUBBORN_NAP = _nap_plan("trap '' TERM; ")
PAUSED = re.compile(r"Paused session (\S+); 1 step done\.")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_pauses_the_run_and_resume_finishes_it(acode: Cli, signum: int) -> None:
    acode.write("plan.yml", NAP)
    pids = acode.watch_pids("nap.pids")
    run = acode.start("run", "plan.yml")
    child = wait_for_pid(pids)

    sent = time.monotonic()
    os.kill(run.pid, signum)
    result = acode.finish(run, expect=130)

    assert time.monotonic() - sent < 1.5  # well before the 2 s command would have ended
    assert not alive(child)
    paused = PAUSED.search(result.flat_err)
    assert paused, result.describe()
    short = paused.group(1)
    assert f"Resume with: acode resume {short}" in result.flat_err
    status = acode.status(short)
    assert status["state"] == "PAUSED"
    assert status["reason"] == "interrupted"
    assert status["steps_completed"] == 1
    assert status["lock"] is None
    assert not (acode.workspace / "last.txt").exists()

    resumed = acode("resume")

    assert "In progress: nap -> retry" in resumed.out
    assert resumed.out.splitlines()[-1] == f"Session {short} completed: 3 steps done."
    assert len(read_pids(pids)) == 2  # the interrupted command was not recorded as done
    assert (acode.workspace / "last.txt").read_text() == "3\n"


def test_a_second_sigint_exits_at_once_and_resume_still_works(acode: Cli) -> None:
    acode.write("plan.yml", STUBBORN_NAP)
    pids = acode.watch_pids("nap.pids")
    run = acode.start("run", "plan.yml")
    wait_for_pid(pids)

    os.kill(run.pid, signal.SIGINT)
    time.sleep(0.2)
    second = time.monotonic()
    os.kill(run.pid, signal.SIGINT)
    acode.finish(run, expect=130)

    assert time.monotonic() - second < 1.0  # not after the 2 s grace period
    resumed = acode("resume")

    assert resumed.out.splitlines()[-1].endswith("completed: 3 steps done.")
    assert (acode.workspace / "last.txt").read_text() == "3\n"
    assert acode.only_session()["state"] == "COMPLETED"


def test_a_second_sigint_leaves_no_step_process_behind(acode: Cli) -> None:
    acode.write("plan.yml", STUBBORN_NAP)
    pids = acode.watch_pids("nap.pids")
    run = acode.start("run", "plan.yml")
    child = wait_for_pid(pids)

    os.kill(run.pid, signal.SIGINT)
    time.sleep(0.2)
    os.kill(run.pid, signal.SIGINT)
    acode.finish(run, expect=130)

    wait_for("the step's command to stop", lambda: not alive(child), timeout=0.5)
