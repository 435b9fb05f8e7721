"""Workers SIGKILLed at random instants while a queue of sessions runs, PostgreSQL as the
queue and as the session store they share: plan sessions (a write, `run` steps that
append to an effects file outside every workspace, a commit) and an agent-loop session
against the test model server. Each victim is killed alone (its sessions get SIGTERM
from the kernel and pause) or with its whole machine (a pid namespace of its own, as
test_lost_machine.py has it: nothing is given back), and a new worker starts in a new
directory. At the end every item is done exactly once, each branch's tree is an
uninterrupted run's, no completed step ran again (the effects file, the store's events)
and no commit doubled.

ACODE_FLEET_CRASH_CASES (default 2) sets how many cases run; ACODE_CRASH_SEED seeds
them, as for the other crash tests, and is in every failure's message.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from tests.crash.harness import SEED, _int_setting
from tests.fleet.conftest import ACODE, Fleet, git, reference_tree, write_plan

__all__: list[str] = []

pytestmark = pytest.mark.crash

CASES = _int_setting("ACODE_FLEET_CRASH_CASES", 2)
PLANS = 3
ELSEWHERE = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
# Trees of the uninterrupted runs, by plan: they depend on the plan alone.
_TREES: dict[int, str] = {}


def _namespaces() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run([*ELSEWHERE, "true"], capture_output=True, check=False).returncode == 0


NAMESPACES = _namespaces()


class Worker:
    """A worker in a directory of its own; ``machine``: the first process of a pid
    namespace of its own, so that its SIGKILL takes its sessions too."""

    def __init__(self, fleet: Fleet, name: str, machine: bool, concurrency: int) -> None:
        self.name, self.machine = name, machine
        home = fleet.home(name)
        prefix = ELSEWHERE if machine and NAMESPACES else []
        self.proc = subprocess.Popen(
            [
                *prefix,
                ACODE,
                "worker",
                "-w",
                str(home),
                "--json",
                "--concurrency",
                str(concurrency),
            ],
            cwd=home,
            env=fleet.env(),
            stdout=(home / "worker.out").open("w"),
            stderr=(home / "worker.err").open("w"),
            text=True,
            start_new_session=True,
        )
        fleet.procs.append(self.proc)

    def kill(self) -> None:
        if not self.machine:
            os.kill(self.proc.pid, signal.SIGKILL)
        elif NAMESPACES:
            # unshare and the namespace's first process, the worker: the kernel kills the rest.
            os.killpg(self.proc.pid, signal.SIGKILL)
        else:
            tree = [self.proc.pid]
            with contextlib.suppress(psutil.NoSuchProcess):
                tree += [p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)]
            for pid in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)  # none of them sees another end
            for pid in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.proc.wait(60)

    def stop(self) -> None:
        """SIGTERM to the worker itself (in a namespace, unshare's child)."""
        pid = self.proc.pid
        if self.machine and NAMESPACES:
            with contextlib.suppress(psutil.NoSuchProcess, IndexError):
                pid = psutil.Process(pid).children()[0].pid
        os.kill(pid, signal.SIGTERM)


def _trees(fleet: Fleet, bare: Path) -> list[str]:
    for i in range(1, PLANS + 1):
        if i not in _TREES:
            alone = write_plan(fleet.root / f"ref{i}.yaml", i, fleet.root / "ref-effects")
            _TREES[i] = reference_tree(fleet, bare, alone, f"ref{i}")
    return [_TREES[i] for i in range(1, PLANS + 1)]


def _agent_repo(root: Path) -> Path:
    from tests.agent.scenario import start_repository

    source = root / "agent-source"
    start_repository(source)
    bare = root / "agent.git"
    git(root, "clone", "-q", "--bare", str(source), str(bare))
    return bare


def _finished(fleet: Fleet) -> bool:
    return all(i["state"] in ("done", "failed", "cancelled") for i in fleet.items())


def _run_case(fleet: Fleet, rng: random.Random, schedule: list[str]) -> list[Worker]:
    workers: list[Worker] = []

    def start() -> None:
        machine = rng.random() < 0.5
        worker = Worker(fleet, f"w{len(workers)}", machine, rng.choice([1, 2]))
        workers.append(worker)
        schedule.append(f"start {worker.name} ({'machine' if machine else 'worker'})")

    for _ in range(rng.choice([2, 3])):
        start()
    for _ in range(rng.randint(1, 3)):
        delay = rng.uniform(0.5, 4.0)
        time.sleep(delay)
        if _finished(fleet):
            schedule.append(f"nothing left to kill at +{delay:.2f} s")
            break
        victim = rng.choice([w for w in workers if w.proc.poll() is None])
        victim.kill()
        schedule.append(f"+{delay:.2f} s kill {victim.name}")
        start()
    fleet.wait_for("every item to end", lambda: _finished(fleet), timeout=240)
    for worker in workers:
        if worker.proc.poll() is None:
            worker.stop()
    return workers


def _check(fleet: Fleet, bare: Path, agent_bare: Path, trees: list[str], effects: Path) -> None:
    from tests.agent.scenario import VALIDATE_PY, expected_login

    items = fleet.items()
    states = [(i["id"], i["state"], i["error"]) for i in items]
    assert [i["state"] for i in items] == ["done"] * (PLANS + 1), states
    reported = Counter(
        e["item"]
        for home in fleet.root.iterdir()
        if (home / "worker.out").exists()
        for e in fleet.output(home.name)
        if e["event"] in ("done", "failed")
    )
    assert reported == Counter(i["id"] for i in items), f"an item ended twice: {reported}"
    for n, (item, tree) in enumerate(zip(items, trees, strict=False), start=1):
        branch = item["result_branch"]
        assert git(bare, "rev-parse", f"{branch}^{{tree}}") == tree, item
        subjects = git(bare, "log", "--format=%s", branch).splitlines()
        assert subjects.count(f"Add a{n}") == 1, f"a commit doubled: {subjects}"
    agent = items[PLANS]
    branch = agent["result_branch"]
    assert git(agent_bare, "show", f"{branch}:src/validate.py") + "\n" == VALIDATE_PY
    assert git(agent_bare, "show", f"{branch}:src/login.py") + "\n" == expected_login()
    subjects = git(agent_bare, "log", "--format=%s", branch).splitlines()
    assert len(subjects) == len(set(subjects)), f"a commit doubled: {subjects}"
    lines = effects.read_text(encoding="utf-8").splitlines()
    expected = [f"{i}-{e}" for i in range(1, PLANS + 1) for e in ("e1", "e2")]
    assert sorted(lines) == sorted(expected), "a step ran twice, or not at all"
    completed = Counter(
        (sid, json.loads(payload)["step"])
        for sid, payload in fleet.query(
            "SELECT sid, payload FROM acode_store.events WHERE type = 'step_completed'"
        )
    )
    assert max(completed.values()) == 1, f"a step completed twice: {completed}"
    # A worker killed before it recorded its new session's id leaves that session behind
    # (the next claim starts another), held at the start gate: it paused before its first
    # step. (A session started over, its work tree out of reach, is left behind too, but
    # only when none of its steps acted outside.) One session per item ends, the item's.
    left = fleet.query(
        "SELECT s.id, count(e.seq) FROM acode_store.sessions s LEFT JOIN acode_store.events e"
        " ON e.sid = s.sid AND e.type = 'step_started'"
        # a step of the default kind, python, names none
        " AND coalesce(e.payload::jsonb ->> 'kind', 'python') IN ('run', 'python')"
        " WHERE s.state <> 'COMPLETED' GROUP BY s.id"
    )
    assert all(n == 0 for _, n in left), f"a session left behind acted outside: {left}"
    ended = Counter(
        fleet.query("SELECT workspace FROM acode_store.sessions WHERE state = 'COMPLETED'")
    )
    assert set(ended.values()) == {1}, f"an item's session ended twice: {ended}"
    completed_ids = {
        sid
        for (sid,) in fleet.query("SELECT id FROM acode_store.sessions WHERE state = 'COMPLETED'")
    }
    assert completed_ids == {i["session_id"] for i in items}


@pytest.mark.parametrize("case", range(CASES), ids=[f"case-{i}" for i in range(CASES)])
def test_workers_killed_at_random_leave_every_session_done_once(
    fleet: Fleet, bare_repo: Path, case: int
) -> None:
    from tests.agent.scenario import TASK, rules
    from tests.support.fake_openai import FakeOpenAI

    rng = random.Random(f"{SEED}-fleet-{case}")
    effects = fleet.root / "effects"
    trees = _trees(fleet, bare_repo)
    for i in range(1, PLANS + 1):
        plan = write_plan(fleet.root / f"plan{i}.yaml", i, effects, rng.choice([0, 0.5, 1.5]))
        assert fleet.acode("queue", "add", str(plan), "--repo", str(bare_repo)).returncode == 0
    agent_bare = _agent_repo(fleet.root)
    assert fleet.acode("queue", "add", TASK, "--repo", str(agent_bare)).returncode == 0
    schedule = [f"seed {SEED}, case {case}"]
    with FakeOpenAI() as model:
        model.converse(rules(delay=0.2))
        fleet.extra_env = {
            # By TCP, as the queue is: the server's socket file is out of reach of a user
            # namespace.
            "ACODE_STORE_URL": fleet.pg.url_via(fleet.proxy.port, fleet.dbname),
            "ACODE_MODEL_BASE_URL": model.base_url,
            "ACODE_MODEL_NAME": "fake-model",
        }
        try:
            workers = _run_case(fleet, rng, schedule)
            for worker in workers:
                if worker.proc.poll() is None or worker.proc.returncode == 0:
                    assert worker.proc.wait(60) == 0, f"{worker.name} did not stop cleanly"
            _check(fleet, bare_repo, agent_bare, trees, effects)
        except AssertionError as exc:
            raise AssertionError(f"{'; '.join(schedule)}: {exc}") from exc
