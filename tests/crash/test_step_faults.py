"""A step fails somewhere in its life, the caller goes on, and the process is SIGKILLed
at a seeded random instant after the fault: the session resumes, its history verifies,
the resumed program gets back what the uninterrupted one got, and ends like it.

The program and its faults: tests/support/step_faults.py. A case draws a fault and an
instant: every SQL statement the session's database runs, every file renamed into
place and every process started counts as one, numbered as an uninterrupted run with
the same fault numbers them. The killed process is then resumed (the library's
``resume_session(verify=True)``), running the same program to its end.

What the resumed program must get back (the oracle):
  - a bug's fault (raised wherever its point is reached) leaves what the uninterrupted
    run with the fault left: outcomes, files, git history;
  - the environment's fault (``once``) was recorded as the step's failure when the
    killed process went past it: then as with the fault; when the kill came first, the
    step simply ran again on resume: as an uninterrupted run without any fault;
  - but for ``p2``, a python step marked not retryable: found interrupted, resume
    refuses to run it again, and the caller, going on, gets that refusal.

ACODE_CRASH_CASES scales the number of cases (one per crash case, at least 6), and
ACODE_CRASH_SEED replays them.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import ACODE
from tests.crash.harness import CASES, SEED
from tests.crash.workload import GitState, workspace_files
from tests.support.fake_openai import FakeOpenAI
from tests.support.step_faults import FAULTS, Fault, make_workspace, write_config

pytestmark = pytest.mark.crash

REPO = Path(__file__).resolve().parents[2]
FAULT_CASES = max(6, CASES)
MODEL_DOWN = {"status": 500, "body": "the model server is overloaded"}
NOT_RETRYABLE = "step 'p2' was interrupted and is marked not retryable"


@dataclass(frozen=True)
class Run:
    """What one run of the program left: its results file and the workspace."""

    results: dict[str, Any]
    files: dict[str, bytes]
    git: GitState


@pytest.fixture(scope="module")
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, model: FakeOpenAI) -> Path:
    root = tmp_path_factory.mktemp("fault-template")
    ws = make_workspace(root / "ws")
    write_config(ws, model.base_url)
    return ws


class Program:
    """Runs the program in copies of the template, as the processes of one case."""

    def __init__(self, root: Path, template: Path, env: dict[str, str], model: FakeOpenAI):
        self.root = root
        self.template = template
        self.env = env
        self.model = model

    def workspace(self, name: str) -> Path:
        ws = self.root / name
        shutil.copytree(self.template, ws, symlinks=True)
        return ws

    def start(
        self, ws: Path, fault: Fault | None, *, resume: str | None = None, kill_at: int = 0
    ) -> subprocess.CompletedProcess[str]:
        if fault is not None and fault.once and fault.step in ("m1", "c1") and resume is None:
            self.model.unscript()
            self.model.script(
                [MODEL_DOWN] if fault.step == "m1" else ["echo: Say hello.", MODEL_DOWN]
            )
        argv = [sys.executable, "-m", "tests.support.step_faults", "--workspace", str(ws)]
        argv += ["--results", str(ws.parent / f"{ws.name}.json")]
        argv += ["--fault", fault.name] if fault is not None else []
        argv += ["--resume", resume] if resume else []
        argv += ["--kill-at", str(kill_at)] if kill_at else []
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=120)
        finally:
            # What a killed process left running dies with it, as in a power loss.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self.model.unscript()
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def run(self, name: str, fault: Fault | None) -> Run:
        ws = self.workspace(name)
        done = self.start(ws, fault)
        assert done.returncode == 0, done.stderr
        return self.finished(ws)

    def finished(self, ws: Path) -> Run:
        results = json.loads((ws.parent / f"{ws.name}.json").read_text(encoding="utf-8"))
        return Run(results, workspace_files(ws), GitState.of(ws, self.env))

    def acode(self, ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [ACODE, *args, "--workspace", str(ws)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


@pytest.fixture
def program(
    tmp_path: Path, template: Path, crash_env: dict[str, str], model: FakeOpenAI, token: str
) -> Program:
    return Program(tmp_path, template, {**crash_env, "CRASHTEST_TOKEN": token}, model)


@pytest.fixture(scope="module")
def clean(
    tmp_path_factory: pytest.TempPathFactory,
    template: Path,
    crash_env: dict[str, str],
    model: FakeOpenAI,
) -> Run:
    """The program without any fault."""
    return Program(tmp_path_factory.mktemp("clean"), template, crash_env, model).run("ws", None)


def _history(program: Program, ws: Path, session: str) -> list[dict[str, Any]]:
    shown = program.acode(ws, "session", "history", session, "--json")
    assert shown.returncode == 0, shown.stderr
    events: list[dict[str, Any]] = json.loads(shown.stdout)
    return events


def _status(events: list[dict[str, Any]], step: str) -> str | None:
    """The type of the newest event about ``step``."""
    about = [e["type"] for e in events if e["payload"].get("step") == step]
    return about[-1] if about else None


@pytest.mark.parametrize("case", range(FAULT_CASES), ids=lambda c: f"case-{c}")
def test_killed_after_a_step_failed_the_program_resumes_to_the_same_end(
    case: int, program: Program, clean: Run
) -> None:
    rng = random.Random(f"{SEED}:step-faults:{case}")
    fault = rng.choice(FAULTS)
    faulty = program.run("reference", fault)
    fired_at, instants = faulty.results["fired_at"], faulty.results["instants"]
    if fired_at is None:
        pytest.fail(f"the fault {fault.name} was never reached: the program does not test it")
    kill_at = rng.randint(fired_at, instants)
    story = f"ACODE_CRASH_SEED={SEED} case {case}: {fault.name}, killed at instant {kill_at}"

    ws = program.workspace("ws")
    killed = program.start(ws, fault, kill_at=kill_at)
    assert killed.returncode in (0, -signal.SIGKILL), f"{story}\n{killed.stderr}"
    assert "Traceback" not in killed.stderr, f"{story}\n{killed.stderr}"
    listed = program.acode(ws, "session", "list", "--all", "--json")
    session = json.loads(listed.stdout)[0]["id"]
    events = _history(program, ws, session)
    if killed.returncode == 0:
        expected = faulty  # the run ended before the drawn instant
    else:
        # The history the kill left verifies, and resume would continue it.
        dry = program.acode(ws, "resume", session, "--dry-run", "--verify")
        assert dry.returncode == 0, f"{story}\n{dry.stdout}\n{dry.stderr}"
        recorded = _status(events, fault.step) == "step_failed"
        expected = faulty if recorded or not fault.once else clean
        resumed = program.start(ws, fault, resume=session)
        assert resumed.returncode == 0, f"{story}\n{resumed.stderr}"
    got = program.finished(ws)

    outcomes = [list(o) for o in expected.results["outcomes"]]
    if killed.returncode != 0 and _status(events, "p2") in ("step_started", "step_rolled_back"):
        outcomes[[o[0] for o in outcomes].index("p2")] = ["p2", "error", NOT_RETRYABLE]
    assert got.results["outcomes"] == outcomes, story
    assert got.results["state"] == "COMPLETED", story
    assert got.files == expected.files, story
    assert got.git == expected.git, story
