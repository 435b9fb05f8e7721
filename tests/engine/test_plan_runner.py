"""The plan runner: every kind through the Session, and approvals bound to what they gate."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import acode
from acode.domain.plan import Plan
from acode.engine.lifecycle import start_session
from acode.engine.plan_runner import run_plan
from acode.errors import ApprovalPending
from acode.operations.decide import decide_approval

PLAN = {
    "title": "Ship a change",
    "tasks": [
        {
            "id": "work",
            "title": "Work",
            "steps": [
                {"id": "w", "write": "a.txt", "content": "new\n"},
                {"id": "ok", "approve": "Commit these changes?"},
                {"id": "save", "commit": "Change a.txt"},
            ],
        }
    ],
}


def _git(ws: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True, text=True).stdout


def _waiting_session(ws: Path) -> tuple[str, Plan]:
    _git(ws, "init", "-q")
    plan = Plan.from_dict(PLAN)
    s = start_session(plan.title, workspace=ws, plan=plan)
    with pytest.raises(ApprovalPending):
        run_plan(s, plan)
    s.close()
    decide_approval(s.id, ws, approved=True)
    return s.id, plan


def test_an_approved_commit_goes_ahead(workspace: Path) -> None:
    sid, plan = _waiting_session(workspace)
    with acode.resume_session(sid, workspace=workspace) as r:
        assert run_plan(r, plan) is acode.SessionState.COMPLETED
    assert _git(workspace, "log", "--format=%s").splitlines() == ["Change a.txt"]


def test_an_approval_is_void_when_the_changes_to_commit_changed(workspace: Path) -> None:
    sid, plan = _waiting_session(workspace)
    (workspace / "extra.txt").write_text("slipped in after the approval\n")
    r = acode.resume_session(sid, workspace=workspace)
    with pytest.raises(ApprovalPending):  # asked again: it approved other changes
        run_plan(r, plan)
    r.close()
    assert _git(workspace, "rev-list", "--all", "--count").strip() == "0"
