"""`acode work resume` with the `command` engine, driven through the real `acode` and a
small real program as the engine: what it prints (the subtasks, as the specification's
step 6 shows them), and outcome C when the program refuses to resume its session."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import Background, Cli

# A program that logs each call (its session id, its whole prompt), fails with exit 4 on a
# resume when its sessions are gone (FORGET), and with exit 3 on any call while its
# "server" is down (DOWN).
ENGINE = """\
import json, os, sys
session_id, prompt = sys.argv[1], sys.argv[2]
with open(os.environ["ENGINE_LOG"], "a") as log:
    log.write(json.dumps({"session_id": session_id, "prompt": prompt}) + "\\n")
if os.path.exists(os.environ["ENGINE_DOWN"]):
    print("cannot reach the model server at 127.0.0.1:9", file=sys.stderr)
    sys.exit(3)
if session_id and os.path.exists(os.environ["ENGINE_FORGET"]):
    print(f"error: no session {session_id}", file=sys.stderr)
    sys.exit(4)
print("done: " + prompt.splitlines()[0])
"""


@pytest.fixture
def work(workspace: Path, cli_env: dict[str, str], background: Background, tmp_path: Path) -> Cli:
    script = tmp_path / "engine.py"
    script.write_text(ENGINE, encoding="utf-8")
    env = {
        **cli_env,
        "ENGINE_LOG": str(tmp_path / "engine.log"),
        "ENGINE_DOWN": str(tmp_path / "down"),
        "ENGINE_FORGET": str(tmp_path / "forget"),
        "COLUMNS": "100",
    }
    acode = Cli(workspace, env, background)
    template = f"{sys.executable} {script} {{session_id}} {{prompt}}"
    acode.write(
        ".agent/config.yml",
        f"engines:\n  command: {{command: '{template}'}}\nwork_engine: command\n",
    )
    acode("task", "add", "Implement feature X")
    return acode


def _calls(acode: Cli) -> list[dict[str, str]]:
    log = Path(acode.env["ENGINE_LOG"])
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def _turns(data: Any) -> list[tuple[str, bool]]:
    return [(t["how"], t["ok"]) for t in data["turns"]]


def _shared_prefix(ids: list[str]) -> str:
    length = next(
        (n for n in range(min(map(len, ids))) if len({i[n] for i in ids}) > 1), min(map(len, ids))
    )
    return ids[0][:length]


def _parent_with_subtasks(acode: Cli) -> str:
    """A work session on task-001 with task-002 done (summary given) and task-003 open."""
    cookie = str(acode("work", "task", "task-001", "--json").json()["cookie"])
    acode("wsession", "breadcrumb", "add", "--cookie", cookie, "--message", "X needs Y first")
    acode("work", "spawn", "--from-task", "task-001", "--title", "Investigate component Y")
    acode("task", "done", "task-002", "--summary", "Y provides validate, sanitize, transform")
    acode("work", "spawn", "--from-task", "task-001", "--title", "Look at Z")
    return cookie


def test_resume_shows_the_subtasks_completed_and_in_progress(work: Cli) -> None:
    cookie = _parent_with_subtasks(work)
    first = work("work", "show", cookie, "--json").json()["ai_session_id"]

    text = work("work", "resume", cookie).out
    data = work("work", "resume", cookie[:13], "--json").json()

    assert text.splitlines()[:6] == [
        f"[WORK] Resuming work session: {cookie}",
        "[WORK] Task: task-001 (Implement feature X)",
        f"[WORK] Cookie: {cookie}",
        "[WORK] Subtasks completed: 1 (task-002)",
        "[WORK] Subtasks in progress: 1 (task-003)",
        f"[WORK] AI session: {first} (resumed)",
    ]
    assert [(s["task_id"], s["status"], s["summary"]) for s in data["subtasks"]] == [
        ("task-002", "completed", "Y provides validate, sanitize, transform"),
        ("task-003", "active", None),
    ]
    assert _turns(data) == [("resumed", True)]
    assert "task-002: Y provides validate" in _calls(work)[-1]["prompt"]


def test_resume_of_a_work_session_without_subtasks_says_none(work: Cli) -> None:
    cookie = work("work", "task", "task-001", "--json").json()["cookie"]

    text = work("work", "resume", cookie).out

    assert "[WORK] Subtasks: none" in text.splitlines()


def test_a_command_that_refuses_its_session_on_resume_gets_a_rebuilt_one(work: Cli) -> None:
    cookie = _parent_with_subtasks(work)
    first = work("work", "show", cookie, "--json").json()["ai_session_id"]
    Path(work.env["ENGINE_FORGET"]).touch()  # the program no longer has its sessions

    resumed = work("work", "resume", cookie)

    shown = work("work", "show", cookie, "--json").json()
    new = shown["ai_session_id"]
    assert new not in (None, first)
    assert shown["id"] == cookie  # the cookie is unchanged
    assert [e["how"] for e in shown["engine_sessions"]] == ["new", "rebuilt"]
    lines = resumed.out.splitlines()
    assert lines[5:12] == [
        f"[WORK] AI session: {first}",
        "[WORK] Attempting resume... FAILED",
        f"[WORK] Error: AI session {first} no longer available: command failed (exit 4): "
        f"error: no session {first}",
        "",
        "[WORK] Fallback: new AI session, context rebuilt from the record",
        f"[WORK] New AI session ID: {new}",
        f"[WORK] Cookie: {cookie} (unchanged)",
    ]
    resume_call, rebuilt_call = _calls(work)[-2:]
    assert resume_call["session_id"] == first
    assert rebuilt_call["session_id"] == ""  # a new session
    assert "no longer available" in rebuilt_call["prompt"]
    assert "X needs Y first" in rebuilt_call["prompt"]
    assert "Y provides validate, sanitize, transform" in rebuilt_call["prompt"]

    Path(work.env["ENGINE_FORGET"]).unlink()
    again = work("work", "resume", cookie, "--json").json()
    assert _turns(again) == [("resumed", True)]
    assert again["turns"][0]["session_id"] == new  # the rebuilt session is the one resumed


def test_a_command_that_fails_on_resume_and_again_keeps_its_recorded_session(
    work: Cli,
) -> None:
    """The fallback hides no failure: while the engine's server is down, the new session
    fails too, the command exits 1 with the engine's error, and the recorded session is
    the one the next resume asks for."""
    cookie = work("work", "task", "task-001", "--json").json()["cookie"]
    first = work("work", "show", cookie, "--json").json()["ai_session_id"]
    Path(work.env["ENGINE_DOWN"]).touch()

    failed = work("work", "resume", cookie, "--json", expect=1)

    assert _turns(failed.json()) == [("resume_failed", False), ("rebuilt", False)]
    assert failed.flat_err.startswith(
        "error ACODE-STEP-001: the engine failed: command failed (exit 3): "
        "cannot reach the model server"
    )
    assert f"acode work resume {cookie}" in failed.flat_err
    shown = work("work", "show", cookie, "--json").json()
    assert shown["ai_session_id"] == first
    assert [e["how"] for e in shown["engine_sessions"]] == ["new"]

    Path(work.env["ENGINE_DOWN"]).unlink()
    again = work("work", "resume", cookie, "--json").json()
    assert _turns(again) == [("resumed", True)]
    assert again["turns"][0]["session_id"] == first


# -- wrong input, as a new user types it -----------------------------------------------------


@pytest.mark.parametrize("given", ["nope", "", "task-001", "ffff"])
def test_a_work_session_id_that_names_none_points_at_the_work_sessions(
    work: Cli, given: str
) -> None:
    work("work", "task", "task-001")

    for command in ("resume", "show", "close"):
        refused = work("work", command, given, expect=1)
        assert refused.flat_err.startswith(f"error ACODE-WORK-003: no work session {given!r}")
        assert "`acode work list` shows the work sessions" in refused.flat_err


def test_a_prefix_is_matched_against_work_sessions_only(work: Cli) -> None:
    """The task list is a session of its own, with an id of the same form: a prefix that
    both share is the work session's."""
    cookie = work("work", "task", "task-001", "--json").json()["cookie"]
    every = [s["id"] for s in work("session", "list", "--all", "--json").json()]
    assert len(every) == 2  # the task list's and the work session's
    shared = _shared_prefix(every)
    assert shared

    assert work("work", "show", shared, "--json").json()["id"] == cookie


def test_two_work_sessions_that_share_a_prefix_are_named(work: Cli) -> None:
    first = work("work", "task", "task-001", "--json").json()["cookie"]
    work("task", "add", "Write docs")
    second = work("work", "task", "task-002", "--json").json()["cookie"]
    shared = _shared_prefix([first, second])

    refused = work("work", "show", shared, expect=2)

    assert refused.flat_err.startswith(f"error ACODE-SESSION-002: {shared!r} matches 2 work")
    assert first[:13] in refused.flat_err
    assert second[:13] in refused.flat_err


def test_an_agent_engine_that_cannot_start_says_why_in_its_error(
    workspace: Path, cli_env: dict[str, str], background: Background
) -> None:
    # acode's own loop, with a model server that is not there (port 9: discard).
    acode = Cli(workspace, cli_env, background)
    acode.write(".agent/config.yml", "model: {base_url: 'http://127.0.0.1:9/v1'}\n")
    acode("task", "add", "Implement feature X")

    failed = acode("work", "task", "task-001", "--engine", "agent", expect=1)

    assert "None" not in failed.flat_err
    assert failed.flat_err.startswith("error ACODE-STEP-001: the engine failed: acode run failed")
    assert "cannot reach the model server" in failed.flat_err


def test_listing_breadcrumbs_with_a_wrong_cookie_says_what_was_refused(work: Cli) -> None:
    cookie = work("work", "task", "task-001", "--json").json()["cookie"]

    missing = work("wsession", "breadcrumb", "list", expect=2)
    wrong = work("wsession", "breadcrumb", "list", "--cookie", "01a2c0de", expect=2)

    for refused in (missing, wrong):
        assert f"expected cookie {cookie}" in refused.flat_err
        assert "breadcrumbs not listed" in refused.flat_err
        assert "rejected" not in refused.flat_err
        assert "nothing was written" not in refused.flat_err
    assert f"acode wsession breadcrumb list --cookie {cookie}" in missing.flat_err


@pytest.mark.parametrize(
    ("summary", "problem"),
    [
        ("Y is \x1b[31mred", "contains the control character U+001B"),
        ("Y \u202eis safe", "bidirectional control"),
        ("y" * 2001, "2001 characters, at most 2000"),
    ],
)
def test_a_summary_a_person_would_misread_closes_nothing(
    work: Cli, summary: str, problem: str
) -> None:
    """A summary becomes a breadcrumb of the parent: it is held to the breadcrumbs' rules."""
    work("settings", "set", "ai_stacking_mode", "handsoff")
    parent = work("work", "task", "task-001", "--json").json()["cookie"]
    child = work(
        "work", "spawn", "--from-task", "task-001", "--title", "Look at Y", "--json"
    ).json()["cookie"]

    for command in (["work", "close", child], ["task", "done", "task-002"]):
        refused = work(*command, "--summary", summary, expect=2)
        assert refused.flat_err.startswith("error ACODE-USAGE-001: --summary: ")
        assert problem in refused.flat_err
        assert "nothing was written" in refused.flat_err
    assert work("work", "show", child, "--json").json()["status"] == "active"
    assert work("work", "show", parent, "--json").json()["breadcrumbs"] == []
    assert work("task", "show", "task-002", "--json").json()["status"] == "in_progress"


def test_a_done_task_names_the_file_that_reopens_it(work: Cli) -> None:
    work("task", "done", "task-001")

    refused = work("work", "task", "task-001", expect=2)

    assert 'set "status" to "todo" in docs/acode/tasks/task-001.json' in refused.flat_err
    path = work.workspace / "docs/acode/tasks/task-001.json"
    path.write_text(path.read_text().replace('"done"', '"todo"'))
    assert work("work", "task", "task-001", "--json").json()["turns"][0]["ok"]


def test_an_empty_engine_name_is_refused_not_taken_for_the_default(work: Cli) -> None:
    """`--engine "$ENGINE"` with the variable unset: no silent choice of another engine."""
    work("settings", "set", "ai_stacking_mode", "handsoff")
    task = work("work", "task", "task-001", "--engine", "", expect=2)
    work("work", "task", "task-001")  # the parent a spawn needs
    spawn = work(
        "work", "spawn", "--from-task", "task-001", "--title", "Look at Y", "--engine", "",
        expect=2,
    )  # fmt: skip

    for refused in (task, spawn):
        assert refused.flat_err.startswith("error ACODE-USAGE-001: --engine '': unknown engine")
    assert [t["id"] for t in work("task", "list", "--json").json()] == ["task-001"]
