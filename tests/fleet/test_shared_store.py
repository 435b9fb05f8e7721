"""A session left by a dead worker goes on elsewhere: with PostgreSQL as the session store
shared by every worker, another worker, in a directory of its own (another machine),
resumes it in a fresh clone from its last completed step, its work tree fetched by the
hand-off ref; and a resume refused because the session is still held (exit 16) is tried
again, not failed. Real workers, a real PostgreSQL, a bare repository on disk."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import psutil
import pytest

from acode.errors import ErrorCode
from tests.fleet.conftest import ACODE, Fleet, git, reference_tree, write_plan

__all__: list[str] = []


def _napping_plan(path: Path, effects: Path, marker: Path) -> Path:
    """write_plan's item 1, whose idempotent ``slow`` step sleeps 30 s the first time it
    runs (it makes ``marker``) and not again: the session is killed there."""
    plan = write_plan(path, 1, effects)
    nap = f"test -e {marker} || {{ touch {marker}; sleep 30; }}"
    plan.write_text(plan.read_text().replace('"sleep 0"', json.dumps(nap)))
    return plan


def _completed_steps(fleet: Fleet) -> list[str]:
    rows = fleet.query(
        "SELECT payload FROM acode_store.events WHERE type = 'step_completed' ORDER BY sid, seq"
    )
    return [json.loads(payload)["step"] for (payload,) in rows]


@pytest.mark.parametrize("lost", ["worker", "machine"])
def test_a_dead_workers_session_goes_on_in_another_workers_fresh_clone(
    fleet: Fleet, bare_repo: Path, lost: str
) -> None:
    effects, marker = fleet.root / "effects", fleet.root / "napped"
    plan = _napping_plan(fleet.root / "plan1.yaml", effects, marker)
    tree = reference_tree(
        fleet, bare_repo, write_plan(fleet.root / "ref1.yaml", 1, fleet.root / "ref-fx"), "ref1"
    )
    fleet.extra_env = {"ACODE_STORE_URL": fleet.pg.store_url(fleet.dbname)}
    assert fleet.acode("queue", "add", str(plan), "--repo", str(bare_repo)).returncode == 0
    a = fleet.worker("a")
    fleet.wait_for("the session to nap", marker.exists)
    (item,) = fleet.items()
    session = item["session_id"]
    fleet.wait_for(
        "the work tree's ref on the remote",
        lambda: git(bare_repo, "for-each-ref", f"refs/acode/sessions/{session}") != "",
    )

    # "worker": the session gets SIGTERM from the kernel and pauses; "machine": it dies
    # mid-step with its worker, as when the machine is lost.
    os.kill(a.pid, signal.SIGSTOP)  # frozen, so that it sees none of its session's end
    doomed = [a.pid]
    if lost == "machine":
        doomed += [p.pid for p in psutil.Process(a.pid).children(recursive=True)]
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):  # a git that just ended
                os.kill(pid, sig)
    a.wait()
    # Worker a's machine, as b sees it: another one (b resumes a workspace of its own
    # machine in place).
    fleet.execute("UPDATE acode_fleet.queue_items SET session_host = 'machine-a'")
    b = fleet.worker("b", "--once")

    assert b.wait(120) == 0
    (item,) = fleet.items()
    assert (item["state"], item["epoch"], item["session_id"]) == ("done", 2, session), item
    left = fleet.root / "a" / ".agent" / "fleet" / "item-1" / "repo"
    assert (left / "out" / "a1.txt").exists()
    assert not (left / "out" / "b1.txt").exists(), "the rest ran in a's clone"
    claims = [e for e in fleet.output("b") if e["event"] == "claimed"]
    assert [e["action"] for e in claims] == ["resume"]
    branch = item["result_branch"]
    assert git(bare_repo, "rev-parse", f"{branch}^{{tree}}") == tree
    assert git(bare_repo, "log", "--format=%s", branch).splitlines().count("Add a1") == 1
    assert sorted(effects.read_text().splitlines()) == ["1-e1", "1-e2"], "a step ran twice"
    assert sorted(_completed_steps(fleet)) == sorted(["w1", "e1", "slow", "e2", "c", "w2"])
    stored = fleet.query("SELECT id, workspace FROM acode_store.sessions")
    assert stored == [(session, "acode-fleet-item-1")]


@pytest.mark.parametrize("outside", [True, False], ids=["acted-outside", "stayed-inside"])
def test_a_session_whose_work_tree_never_reached_the_repository_is_out_of_reach(
    fleet: Fleet, bare_repo: Path, outside: bool
) -> None:
    """Its machine lost before it pushed the work tree: the resume in a fresh clone is
    refused, and the item goes on as without a shared store: it fails after a step that
    acted outside, else starts over."""
    effects, marker = fleet.root / "effects", fleet.root / "napped"
    plan = _napping_plan(fleet.root / "plan1.yaml", effects, marker)
    tree = reference_tree(
        fleet, bare_repo, write_plan(fleet.root / "ref1.yaml", 1, fleet.root / "ref-fx"), "ref1"
    )
    fleet.extra_env = {"ACODE_STORE_URL": fleet.pg.store_url(fleet.dbname)}
    assert fleet.acode("queue", "add", str(plan), "--repo", str(bare_repo)).returncode == 0
    a = fleet.worker("a")
    fleet.wait_for("the session to nap", marker.exists)
    os.kill(a.pid, signal.SIGKILL)
    a.wait()
    (item,) = fleet.items()
    git(bare_repo, "update-ref", "-d", f"refs/acode/sessions/{item['session_id']}")
    # "stayed-inside": as if its steps had not acted outside (it cannot be told from here).
    fleet.execute(
        "UPDATE acode_fleet.queue_items SET session_host = 'machine-a', outside_effects = %s",
        (outside,),
    )

    b = fleet.worker("b", "--once")

    assert b.wait(120) == 0
    (item,) = fleet.items()
    events = fleet.output("b")
    if outside:
        assert (item["state"], item["result_branch"]) == ("failed", None), item
        assert "cannot be resumed here: error ACODE-HANDOFF-001" in item["error"]
        assert "starting over could do that twice" in item["error"]
        assert effects.read_text().splitlines() == ["1-e1"], "a step ran again"
        return
    assert item["state"] == "done", item
    assert [e["event"] for e in events if e["event"] in ("restart", "done")] == [
        "restart",
        "done",
    ]
    assert git(bare_repo, "rev-parse", f"{item['result_branch']}^{{tree}}") == tree


def test_a_session_process_gets_the_store_and_its_name_never_the_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from acode.fleet.reclaim import store_workspace
    from acode.fleet.session_env import launcher_env, session_env
    from tests.fleet.test_decisions import _item

    monkeypatch.setenv("ACODE_FLEET_URL", "postgresql://fleet:pw@q/db")
    monkeypatch.delenv("ACODE_STORE_URL", raising=False)
    store = "postgresql://store:pw@s/db"  # from the worker's settings file, say

    env = session_env(store_workspace(_item(id=7)), store, 4.5)

    assert "ACODE_FLEET_URL" not in env
    assert env["ACODE_STORE_URL"] == store
    assert env["ACODE_STORE_WORKSPACE"] == "acode-fleet-item-7"
    assert env["ACODE_HANDOFF_REMOTE"] == "origin"
    assert env["ACODE_FLEET_LEASE_SECONDS"] == "4.5"  # the session's lease lapses with the item's
    assert env["GIT_TERMINAL_PROMPT"] == "0"
    assert env["ACODE_START_GATE"] == "1"
    launcher = launcher_env(store)
    assert launcher["ACODE_STORE_URL"] == store
    assert "ACODE_FLEET_URL" not in launcher
    plain = session_env("acode-fleet-item-7", None, 30.0)
    assert not {"ACODE_FLEET_URL", "ACODE_STORE_URL", "ACODE_HANDOFF_REMOTE"} & set(plain)


def test_a_resume_refused_while_the_session_is_held_is_tried_again(
    fleet: Fleet, bare_repo: Path
) -> None:
    """The claimed item's session is still run by a live process (its lock held): the
    worker's resume exits 16; the worker waits, tries again, and finishes the item once
    that process has ended the session."""
    effects, marker = fleet.root / "effects", fleet.root / "napped"
    plan = _napping_plan(fleet.root / "plan1.yaml", effects, marker)
    plan.write_text(plan.read_text().replace("sleep 30", "sleep 4"))
    tree = reference_tree(
        fleet, bare_repo, write_plan(fleet.root / "ref1.yaml", 1, fleet.root / "ref-fx"), "ref1"
    )
    assert fleet.acode("queue", "add", str(plan), "--repo", str(bare_repo)).returncode == 0
    workspace = fleet.root / "dead-worker" / ".agent" / "fleet" / "item-1" / "repo"
    git(fleet.root, "clone", "-q", str(bare_repo), str(workspace))
    live = subprocess.Popen(
        [ACODE, "run", str(plan), "-w", str(workspace), "--json", "--mode", "autopilot"],
        cwd=workspace,
        env=fleet.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    fleet.procs.append(live)
    assert live.stdout is not None
    session = json.loads(live.stdout.readline())["id"]
    fleet.wait_for("the session to nap", marker.exists)
    host = socket.gethostname()
    fleet.execute(
        "UPDATE acode_fleet.queue_items SET state = 'running', epoch = 1, attempts = 1,"
        " worker_id = 'dead', worker_host = %s, worker_pid = 1, lease_expires = now(),"
        " session_id = %s, session_host = %s, session_workspace = %s, outside_effects = true",
        (host, session, host, str(workspace)),
    )

    b = fleet.worker("b", "--once")

    assert b.wait(120) == 0
    assert live.wait(60) == 0
    events = fleet.output("b")
    waiting = [e for e in events if e["event"] == "waiting"]
    assert waiting, events
    assert waiting[0]["session"] == session
    assert f"{ErrorCode.LOCKED.value}: session {session[:13]} is locked" in waiting[0]["reason"]
    (item,) = fleet.items()
    assert (item["state"], item["epoch"]) == ("done", 2), item
    assert git(bare_repo, "rev-parse", f"{item['result_branch']}^{{tree}}") == tree
    assert sorted(effects.read_text().splitlines()) == ["1-e1", "1-e2"], "a step ran twice"
