"""The hand-off pusher asks, before each push, whether the session's lease is still its
process's (acode.engine.leases): once it is not, nothing more is pushed. Real git, a bare
repository on disk as the remote."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from acode.system.handoff_push import Pushed
from acode.system.handoff_worker import HandoffPusher

SESSION = "01a21c7e-9ef8-7b33-95f8-3e104ebdd61b"
REF = f"refs/acode/sessions/{SESSION}"


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _workspace(tmp_path: Path) -> tuple[Path, Path]:
    remote, ws = tmp_path / "team.git", tmp_path / "ws"
    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    ws.mkdir()
    git(ws, "init", "--quiet")
    (ws / "a.txt").write_text("a\n")
    git(ws, "add", "a.txt")
    git(ws, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "a")
    git(ws, "remote", "add", "origin", str(remote))
    git(ws, "update-ref", REF, "HEAD")
    (ws / ".agent" / "state" / "handoff").mkdir(parents=True)  # as a session leaves it
    return ws, remote


def _push_once(ws: Path, may: bool) -> tuple[list[Pushed], int]:
    reports: list[Pushed] = []
    asked = threading.Event()
    count = [0]

    def may_push() -> bool:
        count[0] += 1
        asked.set()
        return may

    pusher = HandoffPusher(workspace=ws, remote="origin", report=reports.append, may_push=may_push)
    pusher.start()
    assert asked.wait(30)
    assert pusher.close(10)
    return reports, count[0]


def test_a_session_whose_lease_is_another_process_s_pushes_nothing(tmp_path: Path) -> None:
    ws, remote = _workspace(tmp_path)
    reports, asked = _push_once(ws, may=False)
    assert reports == []
    assert git(remote, "for-each-ref") == ""
    assert asked >= 1


def test_a_session_that_holds_its_lease_pushes_its_ref(tmp_path: Path) -> None:
    ws, remote = _workspace(tmp_path)
    reports, _ = _push_once(ws, may=True)
    assert [(r.session_ids, r.reason) for r in reports] == [((SESSION,), None)]
    assert git(remote, "rev-parse", REF) == git(ws, "rev-parse", REF)
