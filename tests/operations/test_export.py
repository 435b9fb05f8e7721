"""`acode session export` of real sessions: the markdown view and the complete JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import acode
from acode.domain.config import AcodeConfig, ModelSettings
from acode.domain.plan import Plan
from acode.engine.lifecycle import start_session
from acode.errors import UsageError
from acode.operations.export import export_session
from acode.store.base import open_store
from acode.system.workspace import StatePaths
from tests.support.fake_openai import FakeOpenAI

TOKEN = "ghp_" + "k7Lm9Np2Qr" * 3 + "St4Uv5"  # GitHub-token-shaped: ghp_ + 36 alnum
assert len(TOKEN) == 40


@pytest.fixture(autouse=True)
def signing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "export-tests")


def _session_with_secrets(workspace: Path) -> str:
    with FakeOpenAI() as fake:
        fake.script([f"The token is {TOKEN}."])
        config = AcodeConfig(model=ModelSettings(base_url=fake.base_url, name="fake-model"))
        with acode.open_session("export me", workspace, config) as s:
            s.write("notes", "notes.txt", f"token={TOKEN}\n")
            s.step("lookup", lambda ctx: {"found": TOKEN, "password": "hunter2222"})
            s.model("ask", f"Check {TOKEN}")
            s.run("show", f"echo {TOKEN}", paths=["notes.txt"])
        return s.id


def test_json_export_is_complete_and_round_trips(workspace: Path) -> None:
    session_id = _session_with_secrets(workspace)
    store = open_store(StatePaths(workspace.resolve()).db)
    try:
        row = store.session(session_id)
        data = json.loads(export_session(store, row, "json"))
        events = store.events(row)
        checkpoints = store.checkpoints(row)
    finally:
        store.close()

    assert data["format"] == "acode-export"
    assert data["v"] == 1
    assert data["session"]["id"] == session_id
    assert data["session"]["state"] == "COMPLETED"
    assert data["summary"]["state"] == "COMPLETED"
    assert data["summary"]["steps_completed"] == 4
    assert data["plan"] is None
    assert [e["seq"] for e in data["events"]] == [e.seq for e in events]
    assert [e["event_id"] for e in data["events"]] == [e.event_id for e in events]
    assert [e["type"] for e in data["events"]] == [e.type.value for e in events]
    assert data["events"][0]["ts"].endswith("Z")
    assert [s["step_id"] for s in data["steps"]] == ["notes", "lookup", "ask", "show"]
    assert [m["role"] for m in data["messages"]] == ["user", "assistant"]
    assert data["messages"][1]["content"]["role"] == "assistant"
    assert [f["path"] for f in data["files"]] == ["notes.txt"]
    assert [c["id"] for c in data["checkpoints"]] == [c.id for c in checkpoints]
    assert data["checkpoints"][0]["head"] == checkpoints[0].head.hex()
    assert all("signature" not in c for c in data["checkpoints"])


def test_secrets_are_redacted_in_both_formats(workspace: Path) -> None:
    session_id = _session_with_secrets(workspace)
    store = open_store(StatePaths(workspace.resolve()).db)
    try:
        row = store.session(session_id)
        exports = {fmt: export_session(store, row, fmt) for fmt in ("md", "json")}
    finally:
        store.close()
    for fmt, text in exports.items():
        assert TOKEN not in text, fmt
        assert "hunter2222" not in text, fmt
        assert f"***{TOKEN[-4:]}" in text, fmt
    assert exports["md"].startswith("# Session progress - export me\n")
    assert "- **Status**: completed" in exports["md"]
    # The JSON still parses after redaction, and the masked values sit where the secrets were.
    data = json.loads(exports["json"])
    completed = [e for e in data["events"] if e["type"] == "step_completed"]
    assert completed[1]["payload"]["result"] == {"found": f"***{TOKEN[-4:]}", "password": "***2222"}


def test_an_unknown_format_is_a_usage_error(workspace: Path) -> None:
    with acode.open_session("t", workspace) as s:
        pass
    store = open_store(StatePaths(workspace.resolve()).db)
    try:
        with pytest.raises(UsageError, match="unknown export format 'xml'"):
            export_session(store, store.session(s.id), "xml")  # type: ignore[arg-type]
    finally:
        store.close()


def test_the_recorded_plan_is_exported(workspace: Path) -> None:
    plan = Plan.from_dict(
        {
            "title": "Planned",
            "tasks": [{"id": "t", "title": "T", "steps": [{"id": "r", "run": "true"}]}],
        }
    )
    with start_session("Planned", workspace, plan=plan) as s:
        s.run("r", "true")
    store = open_store(StatePaths(workspace.resolve()).db)
    try:
        data = json.loads(export_session(store, store.session(s.id), "json"))
    finally:
        store.close()
    assert data["plan"] == plan.to_dict()
    assert data["summary"]["total_steps"] == 1
