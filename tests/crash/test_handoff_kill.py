"""Hand-off under SIGKILL: the ref's move and the event that records it are two writes;
a process killed between them, or before the move, leaves a state the resume repairs,
and the session ends with its history naming exactly the ref's chain of commits."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.crash.killing import EventPoint, Kill, invoke
from tests.crash.workload import ACodeCli, acode_bin, build_template, write_plan

__all__: list[str] = []

pytestmark = pytest.mark.crash

PLAN = {
    "title": "Hand-off under kills",
    "tasks": [
        {
            "id": "t",
            "title": "Files",
            "steps": [
                {"id": "one", "write": "one.txt", "content": "1\n"},
                {"id": "two", "write": "two.txt", "content": "2\n"},
                {"id": "three", "run": "echo 3 > three.txt"},
                {"id": "four", "edit": "one.txt", "old": "1", "new": "one"},
            ],
        }
    ],
}
STEPS = ["one", "two", "three", "four"]


def _git(ws: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=ws, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def _workspace(tmp_path: Path, env: dict[str, str]) -> tuple[Path, Path]:
    ws = build_template(tmp_path / "ws", env)
    remote = tmp_path / "remote.git"
    _git(tmp_path, env, "init", "--quiet", "--bare", str(remote))
    _git(ws, env, "remote", "add", "origin", str(remote))
    (ws / ".agent").mkdir()
    (ws / ".agent" / "config.yml").write_text("handoff:\n  remote: origin\n", encoding="utf-8")
    return ws, remote


def _chain(ws: Path, env: dict[str, str], ref: str) -> list[tuple[str, str]]:
    """(commit, step) of the ref's chain, oldest first."""
    out = _git(
        ws,
        env,
        "log",
        "--first-parent",
        "--reverse",
        "--format=%H %(trailers:key=Acode-Step,valueonly,separator=)",
        ref,
    )
    return [(c, s) for c, _, s in (line.partition(" ") for line in out.splitlines()) if s]


def _tree_on_disk(ws: Path, env: dict[str, str]) -> str:
    scratch = {**env, "GIT_INDEX_FILE": str(ws.parent / "test-index")}
    _git(ws, scratch, "add", "--all", "--", ".", ":!.agent/state")
    tree = _git(ws, scratch, "write-tree").strip()
    os.unlink(scratch["GIT_INDEX_FILE"])
    return tree


@pytest.mark.parametrize(
    ("point", "left"),
    [
        # After the ref moved, before its event: the ref is one commit ahead.
        (EventPoint("ref moved", "acode.handoff.ref_moved", ""), "ahead"),
        # Before `git update-ref` moves the ref: its commit is made, the ref is behind.
        (EventPoint("ref update", "subprocess.Popen", "'acode hand-off'"), "behind"),
    ],
    ids=["ahead", "behind"],
)
def test_a_kill_between_the_ref_and_its_event_is_repaired_by_resume(
    crash_env: dict[str, str], token: str, tmp_path: Path, point: EventPoint, left: str
) -> None:
    ws, remote = _workspace(tmp_path, crash_env)
    plan_file = write_plan(PLAN, tmp_path / "plan.yaml")
    argv = [str(acode_bin()), "run", str(plan_file), "--json", "--workspace", str(ws)]
    # At the second record: step "two".
    kill = Kill("event", "kill", point=point, nth=2)

    killed = invoke(argv, crash_env, kill, token=token, logs=tmp_path)

    assert killed.killed, killed.describe()
    sid = json.loads(killed.stdout.splitlines()[0])["id"]
    ref = f"refs/acode/sessions/{sid}"
    cli = ACodeCli(ws, crash_env)
    history = json.loads(cli.run("session", "history", sid, "--json").stdout)
    named = [e["payload"]["commit"] for e in history if e["type"] == "worktree_recorded"]
    chain = _chain(ws, crash_env, ref)
    if left == "ahead":
        assert [c for c, _ in chain] == [*named, chain[-1][0]]
        assert len(chain) == 2
    else:
        assert [c for c, _ in chain] == named
        assert len(chain) == 1

    resumed = cli.run("resume", sid)

    assert resumed.returncode == 0, resumed.stderr
    history = json.loads(cli.run("session", "history", sid, "--json").stdout)
    named = [e["payload"]["commit"] for e in history if e["type"] == "worktree_recorded"]
    chain = _chain(ws, crash_env, ref)
    assert named == [c for c, _ in chain]
    assert [s for _, s in chain] == (STEPS if left == "ahead" else ["one", "three", "four"])
    assert _git(ws, crash_env, "rev-parse", f"{ref}^{{tree}}").strip() == _tree_on_disk(
        ws, crash_env
    )
    assert _git(remote, crash_env, "rev-parse", ref) == _git(ws, crash_env, "rev-parse", ref)
    # The history, repaired, still verifies under the key.
    assert cli.run("resume", sid).returncode == 15  # completed: terminal, nothing else


def test_kills_at_both_points_in_turn_end_in_one_consistent_chain(
    crash_env: dict[str, str], token: str, tmp_path: Path
) -> None:
    ws, remote = _workspace(tmp_path, crash_env)
    plan_file = write_plan(PLAN, tmp_path / "plan.yaml")
    moved = EventPoint("ref moved", "acode.handoff.ref_moved", "")
    update = EventPoint("ref update", "subprocess.Popen", "'acode hand-off'")
    run = [str(acode_bin()), "run", str(plan_file), "--json", "--workspace", str(ws)]

    first = invoke(
        run, crash_env, Kill("event", "kill", point=moved, nth=1), token=token, logs=tmp_path / "1"
    )
    assert first.killed, first.describe()
    sid = json.loads(first.stdout.splitlines()[0])["id"]
    resume = [str(acode_bin()), "resume", sid, "--workspace", str(ws)]
    for n, point in enumerate((moved, update, moved), start=2):
        again = invoke(
            resume,
            crash_env,
            Kill("event", "kill", point=point, nth=1),
            token=token,
            logs=tmp_path / str(n),
        )
        assert again.killed, again.describe()

    cli = ACodeCli(ws, crash_env)
    done = cli.run("resume", sid)

    assert done.returncode == 0, done.stderr
    ref = f"refs/acode/sessions/{sid}"
    history = json.loads(cli.run("session", "history", sid, "--json").stdout)
    named = [e["payload"]["commit"] for e in history if e["type"] == "worktree_recorded"]
    assert named == [c for c, _ in _chain(ws, crash_env, ref)]
    assert _git(ws, crash_env, "rev-parse", f"{ref}^{{tree}}").strip() == _tree_on_disk(
        ws, crash_env
    )
    assert _git(remote, crash_env, "rev-parse", ref) == _git(ws, crash_env, "rev-parse", ref)
