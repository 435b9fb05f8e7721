"""The work-session runbook with acode killed inside each step, at seeded moments.

Each step of the runbook ("Work sessions" in docs/requirements.md: task, work session,
spawn, breadcrumbs, the subtask's close with its summary to the parent, resume, close)
runs in a process that an audit hook SIGKILLs at its N-th file rename (the instant a task
file or a work session document is published, after its record was committed) or that a
timer kills. Like a
person, the test then looks whether the step took effect and runs it again if not. At the
end the documents must agree with the record, no task may be doubled, every breadcrumb id
must follow the one before, and the parent must hold exactly one summary of its subtask.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from acode.engine.journal import verify_history
from acode.security.signing import SECRET_ENV, Signer
from acode.store.base import open_store
from acode.system.workspace import StatePaths
from tests.cli.conftest import ACODE, make_env
from tests.crash.harness import CASES, SEED
from tests.crash.workload import install_hook

pytestmark = pytest.mark.crash

WORK_CASES = max(2, CASES // 4)


class Runbook:
    def __init__(self, ws: Path, env: dict[str, str], rng: random.Random) -> None:
        self.ws, self.env, self.rng = ws, env, rng
        self.kills = 0

    def _run(self, args: list[str], extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
        proc = subprocess.Popen(
            [ACODE, *args, "--workspace", str(self.ws)],
            env={**self.env, **extra},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        if not extra and self.rng.random() < 0.5:
            time.sleep(self.rng.uniform(0.05, 0.6))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
        assert "Traceback" not in err, err
        assert "internal error" not in err, err
        return subprocess.CompletedProcess(args, proc.returncode, out, err)

    def step(self, args: list[str], done: Callable[[], bool]) -> str:
        """Run ``args`` killed at a drawn moment, then again (unkilled) until ``done``."""
        kill = {
            "CRASHTEST_KILL_EVENT": "os.rename",
            "CRASHTEST_KILL_MATCH": "",
            "CRASHTEST_KILL_NTH": str(self.rng.randint(1, 4)),
        }
        first = self._run(args, kill if self.rng.random() < 0.6 else {})
        if first.returncode == 0:
            return first.stdout
        assert first.returncode == -signal.SIGKILL, first.stderr
        self.kills += 1
        if done():
            return ""
        again = self._run(args, {})
        if again.returncode == -signal.SIGKILL:
            self.kills += 1
            if done():
                return ""
            again = self._run(args, {"CRASHTEST_NO_KILL": "1"})
        assert again.returncode == 0, again.stderr
        return again.stdout

    def json(self, *args: str) -> Any:
        done = subprocess.run(
            [ACODE, *args, "--workspace", str(self.ws), "--json"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


@pytest.mark.parametrize("case", range(WORK_CASES), ids=lambda c: f"case-{c}")
def test_the_runbook_survives_kills_at_every_step(case: int, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    env = make_env(tmp_path / "config")
    env["PYTHONPATH"] = str(install_hook(tmp_path / "hook"))
    book = Runbook(ws, env, random.Random(f"{SEED}-work-{case}"))
    context = f"seed {SEED}, case {case}"

    def tasks() -> list[dict[str, Any]]:
        return list(book.json("task", "list"))

    def sessions() -> list[dict[str, Any]]:
        return list(book.json("work", "list"))

    config = ws / ".agent/config.yml"
    book.step(
        ["settings", "set", "ai_stacking_mode", "handsoff"],
        lambda: config.exists() and "handsoff" in config.read_text(),
    )
    book.step(["task", "add", "Implement feature X"], lambda: len(tasks()) == 1)
    book.step(["work", "task", "task-001"], lambda: len(sessions()) == 1)
    parent = sessions()[0]["id"]
    book.step(
        ["work", "spawn", "--from-task", "task-001", "--title", "Investigate component Y"],
        lambda: len(sessions()) == 2,
    )
    child = next(s["id"] for s in sessions() if s["id"] != parent)

    def recorded(finding: str) -> Callable[[], bool]:
        return lambda: (
            finding in {b["message"] for b in book.json("work", "show", child)["breadcrumbs"]}
        )

    for finding in ("validate()", "sanitize()", "transform()"):
        book.step(
            ["wsession", "breadcrumb", "add", "--cookie", child, "--message", finding],
            recorded(finding),
        )
    book.step(
        ["task", "done", "task-002", "--summary", "Y has three functions"],
        lambda: book.json("work", "show", child)["status"] == "closed",
    )
    book.step(["work", "resume", parent], lambda: False)
    book.step(
        ["work", "close", parent], lambda: book.json("work", "show", parent)["status"] == "closed"
    )

    context += f", {book.kills} kills landed"
    assert book.kills >= 1, context
    assert [t["id"] for t in tasks()] == ["task-001", "task-002"], context
    assert all(t["status"] == "done" for t in tasks()), context
    for doc in sessions():
        on_disk = json.loads((ws / "docs/acode/work_sessions" / f"{doc['id']}.json").read_text())
        assert on_disk == doc, context
    crumbs = book.json("work", "show", child)["breadcrumbs"]
    ids = [b["id"] for b in crumbs]
    assert ids == [f"bc-{n:03d}" for n in range(1, len(ids) + 1)], context
    assert {b["message"] for b in crumbs} == {"validate()", "sanitize()", "transform()"}, context
    summaries = [
        b for b in book.json("work", "show", parent)["breadcrumbs"] if b["kind"] == "summary"
    ]
    assert len(summaries) == 1, context
    assert "Y has three functions" in summaries[0]["message"], context
    for task in tasks():
        on_disk = json.loads((ws / "docs/acode/tasks" / f"{task['id']}.json").read_text())
        assert on_disk == task, context
    # Every session's history, replayed whole, agrees with its checkpoints, its steps
    # table and its step id ledger (the ledger sessions skip their recorded steps).
    store = open_store(StatePaths(ws).db)
    try:
        signer = Signer(env[SECRET_ENV].encode())
        for row in store.sessions():
            verify_history(store, row, signer)
    finally:
        store.close()
