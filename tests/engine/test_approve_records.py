"""What an approve step records, event by event and row by row, and what it tells an
observer: held to the records the kind wrote before it ran through the step path of
the other kinds (``StepExecutor``), so that a history recorded by either replays."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import acode
from acode.engine.observer import ApprovalRequest, StepNotice
from acode.errors import ApprovalPending
from acode.operations.decide import decide_approval
from acode.system.workspace import StatePaths


class _Told:
    def __init__(self) -> None:
        self.notices: list[tuple[str, str, str | None, bool]] = []

    def on_step(self, notice: StepNotice) -> None:
        timed = notice.duration_ms is not None
        self.notices.append((notice.phase.value, notice.step_id, notice.detail, timed))


def _records(workspace: Path, session_id: str) -> tuple[list[Any], list[Any]]:
    """The session's events after the one that starts it (type and payload, the
    signature and the person left out) and its `steps` rows."""
    db = sqlite3.connect(StatePaths(workspace).db)
    try:
        (sid,) = db.execute("SELECT sid FROM sessions WHERE id = ?", (session_id,)).fetchone()
        events = []
        for seq, type_, payload in db.execute(
            "SELECT seq, type, payload FROM events WHERE sid = ? AND seq > 1 ORDER BY seq", (sid,)
        ):
            fields = json.loads(payload)
            # What differs from one run to the next: the key, the user, the session.
            for key in ("signature", "by", "session_id"):
                if key in fields:
                    fields[key] = "*"
            if "subject_hash" in fields:  # a line's worth of it
                fields["subject_hash"] = fields["subject_hash"][:16]
            if isinstance(fields.get("result"), dict) and "by" in fields["result"]:
                fields["result"]["by"] = "*"
            events.append([seq, type_, fields])
        steps = [
            list(row)
            for row in db.execute(
                "SELECT position, step_id, task_id, kind, status, attempt, input_hash, event_seq "
                "FROM steps WHERE sid = ? ORDER BY position",
                (sid,),
            )
        ]
    finally:
        db.close()
    return events, steps


def _yes(request: ApprovalRequest) -> bool:
    return True


def _no(request: ApprovalRequest) -> bool:
    return False


def _nobody(request: ApprovalRequest) -> None:
    return None


def _asked_at_once(ws: Path, told: _Told) -> str:
    with acode.open_session("t", workspace=ws, approver=_yes, observer=told) as s:
        s.step("before", lambda ctx: 1)
        assert s.approve("ok", "Ship it?", task="T", title="shipping") is True
        s.step("after", lambda ctx: 2)
    return s.id


def _denied(ws: Path, told: _Told) -> str:
    with acode.open_session("t", workspace=ws, approver=_no, observer=told) as s:
        assert s.approve("ok", "Ship it?", subject={"diff": "+x"}) is False
    return s.id


def _waited_then_asked(ws: Path, told: _Told) -> str:
    s = acode.open_session("t", workspace=ws, observer=told)
    with pytest.raises(ApprovalPending):
        s.approve("ok", "Ship it?")
    s.close()
    # No one can decide now either: the step goes on waiting, recorded once.
    with pytest.raises(ApprovalPending):
        with acode.resume_session(s.id, workspace=ws, approver=_nobody, observer=told) as r:
            r.approve("ok", "Ship it?")
    with acode.resume_session(s.id, workspace=ws, approver=_yes, observer=told) as r:
        assert r.approve("ok", "Ship it?") is True
    return s.id


def _decided_while_it_waited(ws: Path, told: _Told) -> str:
    s = acode.open_session("t", workspace=ws, observer=told)
    with pytest.raises(ApprovalPending):
        s.approve("ok", "Ship it?", subject="the diff")
    s.close()
    decide_approval(s.id, ws, approved=True)
    r = acode.resume_session(s.id, workspace=ws, observer=told)
    assert r.approve("ok", "Ship it?", subject="the diff") is True
    r.pause("test")
    r.close()
    # Replayed: the recorded result, nothing written.
    with acode.resume_session(s.id, workspace=ws, observer=told) as r:
        assert r.approve("ok", "Ship it?", subject="the diff") is True
    return s.id


def _asked_again_when_the_subject_changed(ws: Path, told: _Told) -> str:
    s = acode.open_session("t", workspace=ws, observer=told)
    with pytest.raises(ApprovalPending):
        s.approve("ok", "Ship it?", subject="old")
    s.close()
    decide_approval(s.id, ws, approved=True)
    with acode.resume_session(s.id, workspace=ws, approver=_no, observer=told) as r:
        assert r.approve("ok", "Ship it?", subject="new") is False
    return s.id


SCENARIOS = {
    "asked_at_once": _asked_at_once,
    "denied": _denied,
    "waited_then_asked": _waited_then_asked,
    "decided_while_it_waited": _decided_while_it_waited,
    "asked_again_when_the_subject_changed": _asked_again_when_the_subject_changed,
}


def recorded(name: str, ws: Path) -> dict[str, Any]:
    told = _Told()
    session_id = SCENARIOS[name](ws, told)
    events, steps = _records(ws, session_id)
    return {"events": events, "steps": steps, "notices": [list(n) for n in told.notices]}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_an_approve_step_records_what_it_always_did(name: str, workspace: Path) -> None:
    assert recorded(name, workspace) == EXPECTED[name]


# Recorded by the code before approve ran through StepExecutor (the branch `split`).
EXPECTED: dict[str, Any] = {
    "asked_at_once": {
        "events": [
            [2, "state_changed", {"from": "CREATED", "reason": "started", "to": "EXECUTING"}],
            [3, "step_completed", {"position": 0, "result": 1, "step": "before"}],
            [
                4,
                "approval_decided",
                {
                    "approved": True,
                    "by": "*",
                    "position": 1,
                    "signature": "*",
                    "step": "ok",
                    "subject_hash": "526529d7f4a1eee8",
                },
            ],
            [
                5,
                "step_completed",
                {
                    "input_hash": "0d7d3c450d9ff3fcb57037c7aa3d3e15",
                    "kind": "approve",
                    "position": 1,
                    "result": {"approved": True, "by": "*"},
                    "step": "ok",
                    "task": "T",
                },
            ],
            [6, "step_completed", {"position": 2, "result": 2, "step": "after"}],
            [
                7,
                "state_changed",
                {"from": "EXECUTING", "reason": "all steps done", "to": "COMPLETED"},
            ],
        ],
        "steps": [[1, "ok", "T", "approve", "completed", 1, "0d7d3c450d9ff3fcb57037c7aa3d3e15", 5]],
        "notices": [
            ["started", "before", None, False],
            ["done", "before", None, True],
            ["started", "ok", None, False],
            ["done", "ok", "approved", False],
            ["started", "after", None, False],
            ["done", "after", None, True],
        ],
    },
    "denied": {
        "events": [
            [2, "state_changed", {"from": "CREATED", "reason": "started", "to": "EXECUTING"}],
            [
                3,
                "approval_decided",
                {
                    "approved": False,
                    "by": "*",
                    "position": 0,
                    "signature": "*",
                    "step": "ok",
                    "subject_hash": "4502c644bbb277ed",
                },
            ],
            [
                4,
                "step_completed",
                {
                    "input_hash": "0d7d3c450d9ff3fcb57037c7aa3d3e15",
                    "kind": "approve",
                    "position": 0,
                    "result": {"approved": False, "by": "*"},
                    "step": "ok",
                },
            ],
            [
                5,
                "state_changed",
                {"from": "EXECUTING", "reason": "all steps done", "to": "COMPLETED"},
            ],
        ],
        "steps": [
            [0, "ok", None, "approve", "completed", 1, "0d7d3c450d9ff3fcb57037c7aa3d3e15", 4]
        ],
        "notices": [["started", "ok", None, False], ["failed", "ok", "denied", False]],
    },
    "waited_then_asked": {
        "events": [
            [2, "state_changed", {"from": "CREATED", "reason": "started", "to": "EXECUTING"}],
            [
                3,
                "approval_requested",
                {
                    "input_hash": "0d7d3c450d9ff3fcb57037c7aa3d3e15",
                    "kind": "approve",
                    "position": 0,
                    "question": "Ship it?",
                    "step": "ok",
                    "subject_hash": "526529d7f4a1eee8",
                },
            ],
            [
                4,
                "state_changed",
                {
                    "from": "EXECUTING",
                    "reason": "step ok awaits approval",
                    "to": "AWAITING_APPROVAL",
                },
            ],
            [
                5,
                "session_resumed",
                {
                    "checkpoint_id": 4,
                    "environment_valid": True,
                    "event": "session_resume",
                    "in_progress_action": None,
                    "interrupted_seconds": 0,
                    "mode": None,
                    "remaining_steps": None,
                    "replay_order": {"by": "timestamp, event_id", "positions": [], "steps": 0},
                    "session_id": "*",
                    "skipped_steps": 0,
                    "skipped_tasks": 0,
                    "sync_status": "local",
                },
            ],
            [
                6,
                "session_resumed",
                {
                    "checkpoint_id": 5,
                    "environment_valid": True,
                    "event": "session_resume",
                    "in_progress_action": None,
                    "interrupted_seconds": 0,
                    "mode": None,
                    "remaining_steps": None,
                    "replay_order": {"by": "timestamp, event_id", "positions": [], "steps": 0},
                    "session_id": "*",
                    "skipped_steps": 0,
                    "skipped_tasks": 0,
                    "sync_status": "local",
                },
            ],
            [
                7,
                "approval_decided",
                {
                    "approved": True,
                    "by": "*",
                    "position": 0,
                    "signature": "*",
                    "step": "ok",
                    "subject_hash": "526529d7f4a1eee8",
                },
            ],
            [
                8,
                "state_changed",
                {"from": "AWAITING_APPROVAL", "reason": "approval decided", "to": "EXECUTING"},
            ],
            [
                9,
                "step_completed",
                {
                    "input_hash": "0d7d3c450d9ff3fcb57037c7aa3d3e15",
                    "kind": "approve",
                    "position": 0,
                    "result": {"approved": True, "by": "*"},
                    "step": "ok",
                },
            ],
            [
                10,
                "state_changed",
                {"from": "EXECUTING", "reason": "all steps done", "to": "COMPLETED"},
            ],
        ],
        "steps": [
            [0, "ok", None, "approve", "completed", 1, "0d7d3c450d9ff3fcb57037c7aa3d3e15", 9]
        ],
        "notices": [
            ["started", "ok", None, False],
            ["started", "ok", None, False],
            ["done", "ok", "approved", False],
        ],
    },
    "decided_while_it_waited": {
        "events": [
            [2, "state_changed", {"from": "CREATED", "reason": "started", "to": "EXECUTING"}],
            [
                3,
                "approval_requested",
                {
                    "input_hash": "0d7d3c450d9ff3fcb57037c7aa3d3e15",
                    "kind": "approve",
                    "position": 0,
                    "question": "Ship it?",
                    "step": "ok",
                    "subject_hash": "80d85fb109a17290",
                },
            ],
            [
                4,
                "state_changed",
                {
                    "from": "EXECUTING",
                    "reason": "step ok awaits approval",
                    "to": "AWAITING_APPROVAL",
                },
            ],
            [
                5,
                "approval_decided",
                {
                    "approved": True,
                    "by": "*",
                    "position": 0,
                    "signature": "*",
                    "step": "ok",
                    "subject_hash": "80d85fb109a17290",
                },
            ],
            [
                6,
                "session_resumed",
                {
                    "checkpoint_id": 5,
                    "environment_valid": True,
                    "event": "session_resume",
                    "in_progress_action": None,
                    "interrupted_seconds": 0,
                    "mode": None,
                    "remaining_steps": None,
                    "replay_order": {"by": "timestamp, event_id", "positions": [], "steps": 0},
                    "session_id": "*",
                    "skipped_steps": 0,
                    "skipped_tasks": 0,
                    "sync_status": "local",
                },
            ],
            [
                7,
                "state_changed",
                {"from": "AWAITING_APPROVAL", "reason": "approval decided", "to": "EXECUTING"},
            ],
            [
                8,
                "step_completed",
                {
                    "input_hash": "0d7d3c450d9ff3fcb57037c7aa3d3e15",
                    "kind": "approve",
                    "position": 0,
                    "result": {"approved": True, "by": "*"},
                    "step": "ok",
                },
            ],
            [9, "state_changed", {"from": "EXECUTING", "reason": "test", "to": "PAUSED"}],
            [
                10,
                "session_resumed",
                {
                    "checkpoint_id": 9,
                    "environment_valid": True,
                    "event": "session_resume",
                    "in_progress_action": None,
                    "interrupted_seconds": 0,
                    "mode": None,
                    "remaining_steps": None,
                    "replay_order": {
                        "by": "timestamp, event_id",
                        "positions": [[1, 1]],
                        "steps": 1,
                    },
                    "session_id": "*",
                    "skipped_steps": 1,
                    "skipped_tasks": 0,
                    "sync_status": "local",
                },
            ],
            [11, "state_changed", {"from": "PAUSED", "reason": "resumed", "to": "EXECUTING"}],
            [
                12,
                "state_changed",
                {"from": "EXECUTING", "reason": "all steps done", "to": "COMPLETED"},
            ],
        ],
        "steps": [
            [0, "ok", None, "approve", "completed", 1, "0d7d3c450d9ff3fcb57037c7aa3d3e15", 8]
        ],
        "notices": [["done", "ok", "approved", False], ["skipped", "ok", None, False]],
    },
    "asked_again_when_the_subject_changed": {
        "events": [
            [2, "state_changed", {"from": "CREATED", "reason": "started", "to": "EXECUTING"}],
            [
                3,
                "approval_requested",
                {
                    "input_hash": "0d7d3c450d9ff3fcb57037c7aa3d3e15",
                    "kind": "approve",
                    "position": 0,
                    "question": "Ship it?",
                    "step": "ok",
                    "subject_hash": "55c27bf3704f3c46",
                },
            ],
            [
                4,
                "state_changed",
                {
                    "from": "EXECUTING",
                    "reason": "step ok awaits approval",
                    "to": "AWAITING_APPROVAL",
                },
            ],
            [
                5,
                "approval_decided",
                {
                    "approved": True,
                    "by": "*",
                    "position": 0,
                    "signature": "*",
                    "step": "ok",
                    "subject_hash": "55c27bf3704f3c46",
                },
            ],
            [
                6,
                "session_resumed",
                {
                    "checkpoint_id": 5,
                    "environment_valid": True,
                    "event": "session_resume",
                    "in_progress_action": None,
                    "interrupted_seconds": 0,
                    "mode": None,
                    "remaining_steps": None,
                    "replay_order": {"by": "timestamp, event_id", "positions": [], "steps": 0},
                    "session_id": "*",
                    "skipped_steps": 0,
                    "skipped_tasks": 0,
                    "sync_status": "local",
                },
            ],
            [
                7,
                "approval_decided",
                {
                    "approved": False,
                    "by": "*",
                    "position": 0,
                    "signature": "*",
                    "step": "ok",
                    "subject_hash": "7124c2feb48852be",
                },
            ],
            [
                8,
                "state_changed",
                {"from": "AWAITING_APPROVAL", "reason": "approval decided", "to": "EXECUTING"},
            ],
            [
                9,
                "step_completed",
                {
                    "input_hash": "0d7d3c450d9ff3fcb57037c7aa3d3e15",
                    "kind": "approve",
                    "position": 0,
                    "result": {"approved": False, "by": "*"},
                    "step": "ok",
                },
            ],
            [
                10,
                "state_changed",
                {"from": "EXECUTING", "reason": "all steps done", "to": "COMPLETED"},
            ],
        ],
        "steps": [
            [0, "ok", None, "approve", "completed", 1, "0d7d3c450d9ff3fcb57037c7aa3d3e15", 9]
        ],
        "notices": [["started", "ok", None, False], ["failed", "ok", "denied", False]],
    },
}
