"""Tasks, settings, work sessions and breadcrumbs through the `acode` command, in
hands-off mode (acode records, no engine runs): the runbook of the specification, step
by step, with its gates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Background, Cli


@pytest.fixture
def work(workspace: Path, cli_env: dict[str, str], background: Background) -> Cli:
    acode = Cli(workspace, cli_env, background)
    acode("settings", "set", "ai_stacking_mode", "handsoff")
    return acode


def _doc(acode: Cli, relative: str) -> Any:
    return json.loads((acode.workspace / relative).read_text(encoding="utf-8"))


def _start(acode: Cli, task_id: str) -> str:
    started = acode("work", "task", task_id, "--json").json()
    assert started["turns"] == []  # hands-off: nothing ran
    assert started["cookie"] in started["prompt"]
    return str(started["cookie"])


def test_settings_are_kept_in_the_config_file_with_its_comments(work: Cli) -> None:
    out = work("settings", "set", "ai_stacking_mode", "managed").out
    assert "[SETTINGS] Updated: ai_stacking_mode = managed" in out
    assert "Managed mode enabled" in out
    assert work("settings", "get", "ai_stacking_mode", "--json").json()["value"] == "managed"
    text = (work.workspace / ".agent/config.yml").read_text()
    assert text.count("ai_stacking_mode:") == 1
    bad = work("settings", "set", "ai_stacking_mode", "yolo", expect=2).flat_err
    assert "ai_stacking_mode: expected one of 'managed', 'handsoff', got 'yolo'" in bad
    assert (work.workspace / ".agent/config.yml").read_text() == text  # nothing written
    assert "not a setting" in work("settings", "set", "model", "x", expect=2).flat_err
    listed = work("settings", "list", "--json").json()
    assert listed["ai_stacking_mode"] == "managed"


def test_tasks_are_json_files_mirrored_in_the_log(work: Cli) -> None:
    assert "Created task-001" in work("task", "add", "Implement feature X", "-d", "Add X").out
    work("task", "add", "Write docs")
    assert _doc(work, "docs/acode/tasks/task-001.json")["description"] == "Add X"
    listed = work("task", "list", "--json").json()
    assert [t["id"] for t in listed] == ["task-001", "task-002"]
    # Edited by hand in review: the file is the truth, the log follows.
    path = work.workspace / "docs/acode/tasks/task-002.json"
    data = json.loads(path.read_text())
    data["title"] = "Write the user docs"
    path.write_text(json.dumps(data))
    assert work("task", "show", "task-002", "--json").json()["title"] == "Write the user docs"
    # Lost (a kill between the log and the file): written again from the log.
    path.unlink()
    work("task", "list")
    assert json.loads(path.read_text())["title"] == "Write the user docs"
    history = work("session", "list", "--all", "--json").json()
    assert any(s["title"] == "acode tasks" for s in history)
    missing = work("task", "show", "task-404", expect=1).flat_err
    assert "no task 'task-404'" in missing
    path.write_text("{not json")
    assert "task-002.json: not a readable JSON task" in work("task", "list", expect=2).flat_err


def test_the_runbook_outcome_a_with_subtask_breadcrumbs_and_summary(work: Cli) -> None:
    work("task", "add", "Implement feature X")
    parent = _start(work, "task-001")
    assert _doc(work, f"docs/acode/work_sessions/{parent}.json")["status"] == "active"
    assert _doc(work, "docs/acode/tasks/task-001.json")["status"] == "in_progress"

    spawned = work(
        "work", "spawn", "--from-task", "task-001", "--title", "Investigate component Y", "--json"
    ).json()
    child = spawned["cookie"]
    assert spawned["parent_wsession_id"] == parent
    sub = _doc(work, "docs/acode/tasks/task-002.json")
    assert sub["parent_task"] == "task-001"
    assert (
        _doc(work, f"docs/acode/work_sessions/{parent}.json")["subtasks"][0]["task_id"]
        == "task-002"
    )

    finding = "Found 3 main functions in component Y: validate, sanitize, transform"
    added = work("wsession", "breadcrumb", "add", "--cookie", child, "--message", finding).out
    assert "[WSESSION] Breadcrumb ID: bc-001" in added
    structured = json.dumps({"message": "validate() is the entry point", "kind": "finding"})
    crumb = work(
        "wsession", "breadcrumb", "add", "--cookie", child, "--message", structured, "--json"
    ).json()
    assert crumb["id"] == "bc-002"
    assert crumb["kind"] == "finding"
    listed = work("wsession", "breadcrumb", "list", "--cookie", child, "--json").json()
    assert [b["id"] for b in listed] == ["bc-001", "bc-002"]

    closed = work("task", "done", "task-002", "--summary", "Y validates, sanitizes, transforms").out
    assert f"Summary breadcrumb sent to parent: {parent}" in closed
    assert _doc(work, "docs/acode/tasks/task-002.json")["status"] == "done"
    child_doc = _doc(work, f"docs/acode/work_sessions/{child}.json")
    assert child_doc["status"] == "closed"
    assert [b["id"] for b in child_doc["breadcrumbs"]] == ["bc-001", "bc-002"]
    parent_doc = _doc(work, f"docs/acode/work_sessions/{parent}.json")
    assert parent_doc["subtasks"][0]["status"] == "completed"
    assert parent_doc["subtasks"][0]["summary"] == "Y validates, sanitizes, transforms"
    assert parent_doc["breadcrumbs"][0]["kind"] == "summary"
    assert "Y validates" in parent_doc["breadcrumbs"][0]["message"]

    # Outcome B: the parent's engine uses the closed subtask's cookie by mistake.
    env = {**work.env, "ACODE_WORK_COOKIE": parent}
    wrong = work(
        "wsession", "breadcrumb", "add", "--cookie", child, "--message", "Implemented X",
        expect=2, env=env,
    )  # fmt: skip
    assert f"expected cookie {parent} (active session)" in wrong.flat_err
    assert f"received cookie {child} (closed session)" in wrong.flat_err
    assert "ACODE-WORK-001" in wrong.flat_err
    right = work(
        "wsession", "breadcrumb", "add", "--cookie", parent, "--message", "Implemented X", env=env
    )
    assert "bc-002" in right.out
    assert len(_doc(work, f"docs/acode/work_sessions/{child}.json")["breadcrumbs"]) == 2

    assert work("session", "list", "--resumable", "--json").json() == []  # ledgers, not runs
    not_here = work("resume", parent, expect=2).flat_err
    assert f"acode work resume {parent}" in not_here
    resumed = work("work", "resume", parent[:13], "--json").json()
    assert "Subtask task-002 completed" in resumed["prompt"]
    work("work", "close", parent)
    refused = work("work", "resume", parent, expect=15).flat_err
    assert "is closed" in refused
    assert _doc(work, "docs/acode/tasks/task-001.json")["status"] == "done"


@pytest.mark.parametrize(
    ("cookie", "message", "problem"),
    [
        (None, "text", "missing --cookie"),
        ("01a2c0de-0000-7000-8000-000000000000", "text", "(unknown)"),
        ("COOKIE", "", "the message is empty"),
        ("COOKIE", '{"message": 3}', '"message" must be a non-empty string'),
        ("COOKIE", '{"msg": "x"}', "unknown field(s) msg"),
        ("COOKIE", "{broken", "not valid JSON"),
        ("COOKIE", '["a"]', "must be an object, not a list"),
        ("COOKIE", "x" * 2001, "2001 characters, at most 2000"),
        ("COOKIE", "bell\x07", "contains the control character U+0007"),
        ("COOKIE", '{"message": "m", "kind": "gossip"}', '"kind" must be one of'),
    ],
)
def test_a_breadcrumb_that_breaks_the_contract_writes_nothing(
    work: Cli, cookie: str | None, message: str, problem: str
) -> None:
    work("task", "add", "T")
    active = _start(work, "task-001")
    args = ["wsession", "breadcrumb", "add", "--message", message]
    if cookie is not None:
        args += ["--cookie", active if cookie == "COOKIE" else cookie]
    refused = work(*args, expect=2)
    assert problem in refused.flat_err
    assert "nothing was written" in refused.flat_err
    assert _doc(work, f"docs/acode/work_sessions/{active}.json")["breadcrumbs"] == []


def test_spawn_needs_an_active_parent_and_work_needs_a_task(work: Cli) -> None:
    work("task", "add", "Parent")
    none = work("work", "spawn", "--from-task", "task-001", "--title", "Sub", expect=1)
    assert "task-001 has no active work session" in none.flat_err
    assert "acode work task task-001" in none.flat_err
    assert "no task 'task-009'" in work("work", "task", "task-009", expect=1).flat_err
    assert (
        "unknown engine" in work("work", "task", "task-001", "--engine", "gpt", expect=2).flat_err
    )
    assert "no work session" in work("work", "resume", "01a2c0de", expect=1).flat_err
