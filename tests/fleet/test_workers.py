"""Worker processes, each in a directory of its own (its machine), taking items of one
queue in a real PostgreSQL and pushing to a bare repository on disk: every item ends
exactly once, its branch holds what an uninterrupted run leaves, no step ran twice (the
effects file outside every workspace), whatever a worker meets: SIGTERM, SIGKILL, a
network that swallows its packets."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.fleet.conftest import Fleet, git, reference_tree, write_plan


def _queue(fleet: Fleet, bare: Path, count: int, effects: Path, sleep: float = 0) -> list[str]:
    trees = []
    for i in range(1, count + 1):
        plan = write_plan(fleet.root / f"plan{i}.yaml", i, effects, sleep)
        added = fleet.acode("queue", "add", str(plan), "--repo", str(bare))
        assert added.returncode == 0, added.stderr
        alone = write_plan(fleet.root / f"ref{i}.yaml", i, fleet.root / "ref-effects")
        trees.append(reference_tree(fleet, bare, alone, f"ref{i}"))
    return trees


def _check_done(fleet: Fleet, bare: Path, trees: list[str], effects: Path) -> None:
    items = fleet.items()
    assert [i["state"] for i in items] == ["done"] * len(trees), items
    for n, (item, tree) in enumerate(zip(items, trees, strict=True), start=1):
        assert git(bare, "rev-parse", f"{item['result_branch']}^{{tree}}") == tree
        subjects = git(bare, "log", "--format=%s", item["result_branch"]).splitlines()
        assert subjects.count(f"Add a{n}") == 1, f"a commit doubled: {subjects}"
    lines = effects.read_text(encoding="utf-8").splitlines()
    expected = [f"{i}-{e}" for i in range(1, len(trees) + 1) for e in ("e1", "e2")]
    assert sorted(lines) == sorted(expected), "a step ran twice, or not at all"


def test_two_workers_run_every_item_exactly_once(fleet: Fleet, bare_repo: Path) -> None:
    effects = fleet.root / "effects"
    trees = _queue(fleet, bare_repo, 3, effects)

    a = fleet.worker("a", "--once", "--concurrency", "2")
    b = fleet.worker("b", "--once")

    assert a.wait(120) == 0
    assert b.wait(120) == 0
    _check_done(fleet, bare_repo, trees, effects)
    claimed = [e["item"] for n in "ab" for e in fleet.output(n) if e["event"] == "claimed"]
    assert sorted(claimed) == [1, 2, 3], "an item was claimed twice"
    status = fleet.acode("worker", "status", "--json")
    assert [w["stopped_at"] is not None for w in json.loads(status.stdout)] == [True, True]


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_worker_gives_the_items_back_and_another_worker_resumes_them(
    fleet: Fleet, bare_repo: Path, stop: signal.Signals
) -> None:
    effects = fleet.root / "effects"
    trees = _queue(fleet, bare_repo, 2, effects, sleep=3)
    a = fleet.worker("a", "--concurrency", "2")
    fleet.wait_for(
        "both sessions started",
        lambda: effects.exists() and len(effects.read_text().splitlines()) >= 2,
    )

    a.send_signal(stop)

    assert a.wait(60) == 0
    items = fleet.items()
    assert [i["state"] for i in items] == ["queued", "queued"], items
    assert all(i["session_id"] for i in items)
    assert {e["event"] for e in fleet.output("a")} >= {"released", "stopped"}
    b = fleet.worker("b", "--once", "--concurrency", "2")
    assert b.wait(120) == 0
    _check_done(fleet, bare_repo, trees, effects)
    resumed = [e for e in fleet.output("b") if e["event"] == "claimed"]
    assert {e["action"] for e in resumed} == {"resume"}


def test_a_killed_workers_items_are_taken_when_its_leases_lapse(
    fleet: Fleet, bare_repo: Path
) -> None:
    effects = fleet.root / "effects"
    trees = _queue(fleet, bare_repo, 2, effects, sleep=3)
    a = fleet.worker("a", "--concurrency", "2")
    fleet.wait_for(
        "both sessions started",
        lambda: effects.exists() and len(effects.read_text().splitlines()) >= 2,
    )

    os.kill(a.pid, signal.SIGKILL)
    a.wait()
    b = fleet.worker("b", "--once", "--concurrency", "2")

    assert b.wait(120) == 0
    _check_done(fleet, bare_repo, trees, effects)
    claims = [e for e in fleet.output("b") if e["event"] == "claimed"]
    assert sorted((e["item"], e["epoch"]) for e in claims) == [(1, 2), (2, 2)]


def test_a_killed_launcher_is_reported_and_its_session_resumed(
    fleet: Fleet, bare_repo: Path
) -> None:
    effects = fleet.root / "effects"
    trees = _queue(fleet, bare_repo, 1, effects, sleep=3)
    a = fleet.worker("a", "--once")
    fleet.wait_for("the session started", effects.exists)
    (launcher,) = [e["pid"] for e in fleet.output("a") if e["event"] == "launcher"]

    os.kill(launcher, signal.SIGKILL)

    # Its session paused with it; the worker lets the item's lease lapse, takes it again
    # and resumes the session from its last completed step with a new launcher.
    assert a.wait(120) == 0
    _check_done(fleet, bare_repo, trees, effects)
    events = [e["event"] for e in fleet.output("a")]
    assert (events.count("launcher_died"), events.count("launcher")) == (1, 2), events
    claims = [e for e in fleet.output("a") if e["event"] == "claimed"]
    assert [(e["epoch"], e["action"]) for e in claims] == [(1, "start"), (2, "resume")]


def _ssh(path: Path, body: str) -> str:
    """A stand-in for ssh: git runs ``ssh HOST COMMAND``; this runs COMMAND here."""
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(0o755)
    return str(path)


def test_a_worker_killed_before_its_sessions_started_loses_them_to_another(
    fleet: Fleet, bare_repo: Path
) -> None:
    effects = fleet.root / "effects"
    url = f"ssh://repo.invalid{bare_repo}"
    plan = write_plan(fleet.root / "plan1.yaml", 1, effects)
    assert fleet.acode("queue", "add", str(plan), "--repo", url).returncode == 0
    alone = write_plan(fleet.root / "ref1.yaml", 1, fleet.root / "ref-effects")
    tree = reference_tree(fleet, bare_repo, alone, "ref1")
    # Worker a's clone never gets an answer: it holds the item, no session started.
    fleet.extra_env = {"GIT_SSH_COMMAND": _ssh(fleet.root / "stuck-ssh", "sleep 20")}
    a = fleet.worker("a")
    fleet.wait_for(
        "worker a to claim the item",
        lambda: any(e["event"] == "claimed" for e in fleet.output("a")),
    )

    os.kill(a.pid, signal.SIGKILL)
    a.wait()
    serve = 'for command; do :; done; exec sh -c "$command"'  # the last argument
    fleet.extra_env = {"GIT_SSH_COMMAND": _ssh(fleet.root / "ssh", serve)}
    b = fleet.worker("b", "--once")

    assert b.wait(120) == 0
    (item,) = fleet.items()
    assert (item["state"], item["epoch"], item["attempts"]) == ("done", 2, 2), item
    assert git(bare_repo, "rev-parse", f"{item['result_branch']}^{{tree}}") == tree
    assert sorted(effects.read_text().splitlines()) == ["1-e1", "1-e2"]
    assert [e["action"] for e in fleet.output("b") if e["event"] == "claimed"] == ["start"]


def test_a_partitioned_worker_stops_and_its_late_writes_are_refused(
    fleet: Fleet, bare_repo: Path
) -> None:
    effects = fleet.root / "effects"
    trees = _queue(fleet, bare_repo, 1, effects, sleep=4)
    from tests.support.tcp_proxy import Proxy

    cut = Proxy(fleet.pg.target).start()  # worker a's own network to the queue
    try:
        a = fleet.worker("a", url=fleet.pg.url_via(cut.port, fleet.dbname))
        fleet.wait_for("the session started", effects.exists)
        cut.set_mode("blackhole")
        b = fleet.worker("b", "--once")
        assert b.wait(120) == 0
        cut.set_mode("pass")
        fleet.wait_for(
            "worker a to see its lease gone",
            lambda: any(e["event"] == "lost" for e in fleet.output("a")),
        )
        a.send_signal(signal.SIGTERM)
        assert a.wait(60) == 0
    finally:
        cut.close()
    _check_done(fleet, bare_repo, trees, effects)
    (item,) = fleet.items()
    assert item["epoch"] == 2
    assert item["worker_id"] is not None
    assert not any(e["event"] in ("done", "failed", "released") for e in fleet.output("a"))


def test_a_stale_epoch_writes_nothing(fleet: Fleet, bare_repo: Path) -> None:
    from acode.fleet.queue import LeaseLost, Queue

    fleet.acode("queue", "add", "Fix", "--repo", str(bare_repo))
    first, second = Queue(fleet.url), Queue(fleet.url)
    try:
        old = first.claim("default", "w1", 0.1)
        assert old is not None
        import time

        time.sleep(0.3)
        new = second.claim("default", "w2", 30)
        assert new is not None
        assert new.epoch == old.epoch + 1
        for write in (
            lambda: first.finish(old, branch="x", error=None),
            lambda: first.release(old),
            lambda: first.record_session(old, "0" * 32, "/tmp"),
            lambda: first.renew(old, 30),
        ):
            try:
                write()
            except LeaseLost:
                continue
            raise AssertionError("a write with a stale epoch was taken")
        assert first.renew_all([old], 30) == set()
    finally:
        first.close()
        second.close()
    (item,) = fleet.items()
    assert (item["state"], item["worker_id"], item["result_branch"]) == ("running", "w2", None)


def test_a_failing_session_fails_its_item_not_the_worker(fleet: Fleet, bare_repo: Path) -> None:
    broken = fleet.root / "broken.yaml"
    broken.write_text(
        "title: broken\ntasks:\n  - id: t\n    title: t\n    steps:\n"
        "      - {id: boom, run: 'echo no such luck >&2; exit 3'}\n",
        encoding="utf-8",
    )
    effects = fleet.root / "effects"
    assert fleet.acode("queue", "add", str(broken), "--repo", str(bare_repo)).returncode == 0
    trees = _queue(fleet, bare_repo, 1, effects)

    worker = fleet.worker("a", "--once")

    assert worker.wait(120) == 0
    failed, done = fleet.items()
    assert failed["state"] == "failed"
    assert "exit" in failed["error"]
    assert failed["result_branch"] is None
    assert done["state"] == "done"
    assert git(bare_repo, "rev-parse", f"{done['result_branch']}^{{tree}}") == trees[0]


def test_a_branch_holding_other_work_is_never_overwritten(tmp_path: Path, bare_repo: Path) -> None:
    from acode.errors import FleetError
    from acode.fleet.repo import push_result, result_branch

    session = "01a21bd3-11e9-75a1-8e7a-c9daa4b70661"
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    for clone in (theirs, ours):
        git(tmp_path, "clone", "-q", str(bare_repo), str(clone))
    (theirs / "x.txt").write_text("someone else's\n")
    git(theirs, "add", "x.txt")
    git(theirs, "commit", "-q", "-m", "theirs")
    git(theirs, "push", "-q", "origin", f"HEAD:refs/heads/{result_branch(session)}")
    before = git(bare_repo, "rev-parse", result_branch(session))
    (ours / "y.txt").write_text("ours\n")

    with pytest.raises(FleetError, match="holds other commits: not overwritten"):
        push_result(ours, str(bare_repo), session)
    assert git(bare_repo, "rev-parse", result_branch(session)) == before


def test_a_task_for_the_model_runs_as_acode_run_runs_it(fleet: Fleet, tmp_path: Path) -> None:
    from tests.agent.scenario import TASK, VALIDATE_PY, expected_login, rules, start_repository
    from tests.support.fake_openai import FakeOpenAI

    source = tmp_path / "agent-source"
    start_repository(source)
    bare = tmp_path / "agent.git"
    git(tmp_path, "clone", "-q", "--bare", str(source), str(bare))
    assert fleet.acode("queue", "add", TASK, "--repo", str(bare)).returncode == 0

    with FakeOpenAI() as model:
        model.converse(rules())
        fleet.extra_env = {
            "ACODE_MODEL_BASE_URL": model.base_url,
            "ACODE_MODEL_NAME": "fake-model",
        }
        worker = fleet.worker("a", "--once")
        assert worker.wait(120) == 0

    (item,) = fleet.items()
    assert item["state"] == "done", item
    assert (item["kind"], item["task"]) == ("task", TASK)
    branch = item["result_branch"]
    assert git(bare, "show", f"{branch}:src/validate.py") + "\n" == VALIDATE_PY
    assert git(bare, "show", f"{branch}:src/login.py") + "\n" == expected_login()


def test_cancelling_a_running_item_stops_its_session(fleet: Fleet, bare_repo: Path) -> None:
    effects = fleet.root / "effects"
    _queue(fleet, bare_repo, 1, effects, sleep=30)
    worker = fleet.worker("a")
    fleet.wait_for("the session started", effects.exists)

    assert fleet.acode("queue", "cancel", "1").returncode == 0
    fleet.wait_for(
        "the worker to stop it", lambda: any(e["event"] == "lost" for e in fleet.output("a"))
    )
    worker.send_signal(signal.SIGTERM)

    assert worker.wait(60) == 0
    (item,) = fleet.items()
    assert (item["state"], item["result_branch"]) == ("cancelled", None)
    assert effects.read_text().splitlines() == ["1-e1"], "the session went on"
    assert git(bare_repo, "branch", "--list", "acode/*") == ""
    assert _running_in(fleet.root) == [], "a step's command outlived the cancelled item"


def _running_in(root: Path) -> list[str]:
    """The command lines of the processes working in a folder under ``root``."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cwd", "cmdline"]):
        if (proc.info["cwd"] or "").startswith(str(root)):
            found.append(" ".join(proc.info["cmdline"] or []))
    return found


def test_a_session_that_ended_before_its_worker_died_is_pushed_by_the_next(
    fleet: Fleet, bare_repo: Path
) -> None:
    """A worker killed between its session's end and the push: the next claim resumes it
    in place, finds it COMPLETED, and pushes what it left."""
    import socket

    effects = fleet.root / "effects"
    (tree,) = _queue(fleet, bare_repo, 1, effects)
    workspace = fleet.root / "dead-worker" / ".agent" / "fleet" / "item-1" / "repo"
    git(fleet.root, "clone", "-q", str(bare_repo), str(workspace))
    ran = fleet.acode(
        "run", str(fleet.root / "plan1.yaml"), "-w", str(workspace), "--json", cwd=workspace
    )
    assert ran.returncode == 0, ran.stderr
    session = json.loads(ran.stdout.splitlines()[0])["id"]
    fleet.execute(
        "UPDATE acode_fleet.queue_items SET state = 'running', epoch = 1, attempts = 1,"
        " worker_id = 'dead', worker_host = %s, worker_pid = 1, lease_expires = now(),"
        " session_id = %s, session_host = %s, session_workspace = %s, outside_effects = true",
        (socket.gethostname(), session, socket.gethostname(), str(workspace)),
    )

    worker = fleet.worker("b", "--once")

    assert worker.wait(120) == 0
    _check_done(fleet, bare_repo, [tree], effects)
    assert [e["action"] for e in fleet.output("b") if e["event"] == "claimed"] == ["resume"]
