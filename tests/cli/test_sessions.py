"""Looking at sessions: `session list/show/history/unlock` and `status`, on a workspace
holding one completed session and one waiting for an approval, and on a live lock."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest

from tests.cli.conftest import Background, Cli, make_env, plan_yaml, wait_for

__all__: list[str] = []

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


@dataclass(frozen=True)
class Two:
    """A workspace with an older COMPLETED session and a newer AWAITING_APPROVAL one."""

    acode: Cli
    done: dict[str, Any]
    waiting: dict[str, Any]


def _started(records: list[dict[str, Any]]) -> dict[str, Any]:
    assert records[0]["event"] == "started"
    return records[0]


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Two:
    ws = tmp_path_factory.mktemp("two-sessions")
    acode = Cli(ws, make_env(tmp_path_factory.mktemp("cli-config")), Background())
    acode.write(
        "done.yml",
        plan_yaml(
            "Finished work",
            '{id: greet, write: out.txt, content: "hi\\n"}',
            "{id: look, read: out.txt}",
            task="first",
        ),
    )
    acode.write(
        "wait.yml",
        plan_yaml("Waiting work", "{id: look, read: out.txt}", "{id: ok, approve: Go on?}"),
    )
    done = _started(acode("run", "done.yml", "--json").json_lines())
    waiting = _started(acode("run", "wait.yml", "--json", expect=20).json_lines())
    rows = {row["id"]: row for row in acode.sessions()}
    return Two(acode, rows[done["id"]], rows[waiting["id"]])


def test_session_list_is_a_table_most_recent_first(two: Two) -> None:
    lines = [line.rstrip() for line in two.acode("session", "list").out.splitlines()]

    assert lines[0].split() == ["ID", "STATE", "UPDATED", "AT", "STEP", "TITLE"]
    assert lines[1].split()[:2] == [two.waiting["short_id"], "AWAITING_APPROVAL"]
    assert lines[1].endswith("Waiting work")
    assert lines[2].split()[:2] == [two.done["short_id"], "COMPLETED"]
    assert lines[2].endswith("Finished work")
    assert len(lines) == 3


def test_session_list_json_is_an_array_of_sessions(two: Two) -> None:
    rows = two.acode("session", "list", "--json").json()

    assert [r["id"] for r in rows] == [two.waiting["id"], two.done["id"]]
    for row in rows:
        assert {"id", "short_id", "state", "title", "created_at", "updated_at"} <= row.keys()
        assert ISO.fullmatch(row["created_at"])
        assert ISO.fullmatch(row["updated_at"])
        assert row["id"].startswith(row["short_id"])
        assert len(row["short_id"]) >= 8
    assert rows[0]["short_id"] != rows[1]["short_id"]
    updated = [datetime.fromisoformat(r["updated_at"]) for r in rows]
    assert updated == sorted(updated, reverse=True)
    assert [r["state"] for r in rows] == ["AWAITING_APPROVAL", "COMPLETED"]
    assert [r["title"] for r in rows] == ["Waiting work", "Finished work"]


def test_session_list_resumable_leaves_out_terminal_sessions(two: Two) -> None:
    rows = two.acode("session", "list", "--resumable", "--json").json()

    assert [r["id"] for r in rows] == [two.waiting["id"]]


def test_session_show_prints_the_session_and_its_steps(two: Two) -> None:
    short = two.done["short_id"]

    lines = two.acode("session", "show", short).out.splitlines()

    assert lines[0] == f"Session: {short}  ({two.done['id']})"
    assert "Title:   Finished work" in lines
    assert "State:   COMPLETED (all steps done)" in lines
    assert "Steps:   2/2 completed" in lines
    assert "Lock:    free" in lines
    table = lines[lines.index("") + 1 :]
    assert table[0].split() == ["#", "STEP", "TASK", "KIND", "STATUS", "ATTEMPT"]
    assert table[1].split() == ["1", "greet", "first", "write", "completed", "1"]
    assert table[2].split() == ["2", "look", "first", "read", "completed", "1"]


def test_session_show_json_lists_the_steps(two: Two) -> None:
    data = two.acode("session", "show", two.waiting["id"], "--json").json()

    assert data["id"] == two.waiting["id"]
    assert data["state"] == "AWAITING_APPROVAL"
    assert data["lock"] is None
    assert [(s["position"], s["step"], s["kind"], s["status"]) for s in data["steps"]] == [
        (0, "look", "read", "completed"),
        (1, "ok", "approve", "in_progress"),
    ]


def test_session_history_lists_events_in_replay_order(two: Two) -> None:
    short = two.done["short_id"]

    events = two.acode("session", "history", short, "--json").json()
    table = two.acode("session", "history", short).out.splitlines()

    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [(e["ts_us"], e["event_id"]) for e in events] == sorted(
        (e["ts_us"], e["event_id"]) for e in events
    )
    assert [e["type"] for e in events] == [
        "session_created",
        "plan_recorded",
        "state_changed",
        "step_started",
        "step_completed",
        "step_completed",
        "state_changed",
    ]
    assert events[0]["payload"]["title"] == "Finished work"
    assert events[-1]["payload"]["to"] == "COMPLETED"
    assert table[0].split() == ["SEQ", "TIME", "(UTC)", "EVENT", "STEP", "DETAIL"]
    assert [line.split()[2] for line in table[1:]] == [e["type"] for e in events]
    assert "EXECUTING -> COMPLETED (all steps done)" in table[-1]


def test_status_shows_the_most_recent_session_by_default(two: Two) -> None:
    lines = two.acode("status").out.splitlines()

    assert lines[0] == f"Session: {two.waiting['short_id']}  ({two.waiting['id']})"
    assert "State:   AWAITING_APPROVAL (step ok awaits approval)" in lines
    waiting = two.waiting["short_id"]
    assert f"Waiting: approval of ok: acode approve {waiting} (add --deny to refuse)" in lines
    assert "Lock:    free" in lines


def test_session_history_shows_the_most_recent_session_by_default(two: Two) -> None:
    """Like `acode status`: on main the id was required (exit 2, "Missing argument")."""
    latest, named = two.acode.many(
        [
            ["session", "history", "--json"],
            ["session", "history", two.waiting["short_id"], "--json"],
        ]
    )

    assert latest.json() == named.json()
    assert latest.json()[0]["payload"]["title"] == "Waiting work"


def test_status_json_of_a_named_session(two: Two) -> None:
    data = two.acode("status", two.done["short_id"], "--json").json()

    assert data["id"] == two.done["id"]
    assert data["state"] == "COMPLETED"
    assert data["steps_completed"] == 2
    assert data["total_steps"] == 2
    assert data["lock"] is None
    assert data["sync"] == {"status": "local", "remote": None}


def _common_prefix(a: str, b: str) -> str:
    length = 0
    while length < min(len(a), len(b)) and a[length] == b[length]:
        length += 1
    return a[:length]


def test_an_ambiguous_prefix_is_a_usage_error(two: Two) -> None:
    prefix = _common_prefix(two.done["id"], two.waiting["id"])
    assert prefix, "UUIDv7 ids made a second apart share their leading digits"

    results = two.acode.many([["session", "show", prefix], ["resume", prefix]], expect=2)

    for result in results:
        assert "ACODE-SESSION-002" in result.flat_err, result.describe()
        assert f"{prefix!r} matches 2 sessions" in result.flat_err, result.describe()
        assert "give more characters of the id" in result.flat_err, result.describe()


def test_an_unknown_id_is_reported(two: Two) -> None:
    shown, resumed = two.acode.many(
        [["session", "show", "ffffffff"], ["resume", "ffffffff"]], expect=None
    )

    assert (shown.code, resumed.code) == (1, 14)  # resume: nothing to resume
    for result in (shown, resumed):
        assert "no session with id 'ffffffff'" in result.flat_err, result.describe()
        assert "acode session list" in result.flat_err, result.describe()


def test_a_malformed_id_is_a_usage_error(two: Two) -> None:
    commands = [["session", "history"], ["session", "unlock"], ["resume"], ["approve"]]

    results = two.acode.many([[*command, "../../etc"] for command in commands], expect=2)

    for result in results:
        assert "'../../etc' is not a session id" in result.flat_err, result.describe()
    assert not (two.acode.workspace / ".agent" / "etc").exists()


def test_an_empty_workspace_has_no_sessions(acode: Cli) -> None:
    table, as_json, status, history = acode.many(
        [["session", "list"], ["session", "list", "--json"], ["status"], ["session", "history"]],
        expect=None,
    )

    assert table.out == "No sessions here yet. Start one with: acode run PLAN.yaml\n"
    assert as_json.json() == []
    assert (table.code, as_json.code, status.code, history.code) == (0, 0, 14, 14)
    assert status.flat_err.startswith("error ACODE-RESUME-001: no sessions in ")
    assert history.flat_err == status.flat_err
    assert not (acode.workspace / ".agent").exists()  # looking creates nothing


def test_a_running_session_is_locked_until_forced(acode: Cli) -> None:
    acode.write(
        "plan.yml",
        plan_yaml(
            "Long job",
            '{id: first, write: a.txt, content: "a"}',
            # Outlasts the commands below on any machine; the fixture stops it after.
            "{id: nap, run: echo $$ >> nap.pids; exec sleep 120}",
        ),
    )
    acode.watch_pids("nap.pids")
    holder = acode.start("run", "plan.yml")
    rows: list[dict[str, Any]] = []

    def listed() -> bool:
        rows[:] = acode.sessions()
        return bool(rows)

    wait_for("the session to be listed", listed)
    short = rows[0]["short_id"]
    held_by = f"pid {holder.pid} on host"

    refused = acode("resume", short, expect=16)
    assert "ACODE-RESUME-003" in refused.flat_err
    assert f"is locked by {held_by}" in refused.flat_err
    assert "acode session unlock" in refused.flat_err
    assert held_by in acode.status(short)["lock"]
    kept = acode("session", "unlock", short, expect=16)
    assert f"session {short} is locked by {held_by}" in kept.flat_err
    assert "which is still running" in kept.flat_err
    assert kept.flat_err.endswith(f": acode session unlock {short} --force")  # pasted below

    forced = acode("session", "unlock", short, "--force")

    assert forced.out.startswith(f"Removed the lock of {held_by}")
    assert acode.status(short)["lock"] is None
    assert holder.proc.poll() is None  # breaking the lock does not stop its holder


def test_a_discarded_session_leaves_the_lists_but_keeps_its_history(acode: Cli) -> None:
    acode.write("plan.yml", plan_yaml("Given up", "{id: ok, approve: Really?}"))
    started = acode("run", "plan.yml", "--json", expect=20).json_lines()[0]
    short = started["id"][:13]

    discarded = acode("session", "discard", short)

    assert discarded.out.startswith(f"Discarded session {short} (Given up)")
    listed, everything, resumed, again, history = acode.many(
        [
            ["session", "list", "--json"],
            ["session", "list", "--all", "--json"],
            ["resume", short],
            ["session", "discard", short],
            ["session", "history", short, "--json"],
        ],
        expect=None,
    )
    assert listed.json() == []
    assert [(r["id"], r["archived"]) for r in everything.json()] == [(started["id"], True)]
    assert resumed.code == 14
    assert f"session {short} was discarded" in resumed.flat_err
    assert again.code == 2
    assert "discarded already" in again.flat_err
    assert history.code == 0
    assert history.json()[-1]["type"] == "session_discarded"


def test_unlocking_a_session_nobody_holds_says_so(two: Two) -> None:
    result = two.acode("session", "unlock", two.done["short_id"])

    assert result.out == "The session was not locked.\n"
