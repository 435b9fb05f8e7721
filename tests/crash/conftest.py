"""Fixtures of the crash tests: their environment, the reference run, process tokens.
Settings and the tally live in harness.py."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.crash.harness import CASES, SEED, TALLY, Reference, Tally
from tests.crash.killing import EVENT_POINTS, Pace, kill_token_processes
from tests.crash.workload import (
    MAIN_PLAN,
    ACodeCli,
    GitState,
    base_env,
    build_template,
    install_hook,
    workspace_files,
    write_plan,
)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "crash_case" in metafunc.fixturenames:
        metafunc.parametrize("crash_case", range(CASES), ids=[f"case-{i}" for i in range(CASES)])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TALLY.cases:
        terminalreporter.write_line(TALLY.summary())


@pytest.fixture(scope="session")
def crash_seed() -> int:
    return SEED


@pytest.fixture(scope="session")
def tally() -> Tally:
    return TALLY


@pytest.fixture(scope="session")
def crash_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("crash")


@pytest.fixture(scope="session")
def crash_env(crash_root: Path) -> dict[str, str]:
    """The environment of every acode process: see workload.base_env."""
    config = crash_root / "xdg-config"
    config.mkdir()
    return base_env(config, install_hook(crash_root / "hook"))


@pytest.fixture(scope="session")
def reference(crash_root: Path, crash_env: dict[str, str]) -> Reference:
    template = build_template(crash_root / "template", crash_env)
    plan_file = write_plan(MAIN_PLAN, crash_root / "plan.yaml")
    ws = crash_root / "reference"
    shutil.copytree(template, ws, symlinks=True)
    counts_file = crash_root / "event-counts.json"
    counting = {
        **crash_env,
        "CRASHTEST_COUNT_FILE": str(counts_file),
        "CRASHTEST_COUNT_POINTS": json.dumps([[p.event, p.match] for p in EVENT_POINTS]),
    }
    started = time.monotonic()
    result = ACodeCli(ws, counting).run("run", str(plan_file), "--json", timeout=120)
    seconds = time.monotonic() - started
    assert result.returncode == 0, f"the uninterrupted run failed: {result.stderr}"
    session_id = json.loads(result.stdout.splitlines()[0])["id"]
    counts = json.loads(counts_file.read_text(encoding="utf-8"))
    # A resume of the finished session refuses at once: what starting a process costs.
    started = time.monotonic()
    ACodeCli(ws, crash_env).run("resume", session_id)
    startup = time.monotonic() - started
    return Reference(
        template=template,
        plan_file=plan_file,
        env=crash_env,
        workspace=ws,
        session_id=session_id,
        files=workspace_files(ws),
        git=GitState.of(ws, crash_env),
        pace=Pace(
            startup=startup,
            steps=max(seconds - startup, 0.1),
            event_counts={p.name: n for p, n in zip(EVENT_POINTS, counts, strict=True)},
        ),
    )


@pytest.fixture
def token() -> Iterator[str]:
    """Marks every process a test starts (see killing.token_processes); whatever is
    still running when the test ends is killed."""
    value = uuid.uuid4().hex
    yield value
    kill_token_processes(value)
