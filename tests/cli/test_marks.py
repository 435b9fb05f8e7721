"""`acode session checkpoint ID --label TEXT`: a named, signed checkpoint of a stopped
session, shown by `session history` and the progress file, and what it refuses."""

from __future__ import annotations

import re

from tests.cli.conftest import Cli, plan_yaml, wait_for

__all__: list[str] = []

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def _waiting(acode: Cli) -> str:
    acode.write(
        "plan.yml",
        plan_yaml(
            "Marked work",
            '{id: greet, write: out.txt, content: "hi\\n"}',
            "{id: ok, approve: Go on?}",
            "{id: look, read: out.txt}",
        ),
    )
    started = acode("run", "plan.yml", "--json", expect=20).json_lines()[0]
    return str(started["id"])


def test_a_stopped_session_is_marked_once_and_resumes_past_its_mark(acode: Cli) -> None:
    sid = _waiting(acode)
    short = sid[:13]

    marked = acode("session", "checkpoint", short, "--label", "greeted")
    again = acode("session", "checkpoint", short, "--label", " greeted ", "--json")

    assert re.fullmatch(
        rf"Marked session {short} at event (\d+), {ISO}: 'greeted'\. "
        rf"See it with: acode session history {short}\n",
        marked.out,
    ), marked.out
    seq = int(marked.out.split("at event ")[1].split(",")[0])
    record = again.json()
    assert record["new"] is False
    assert (record["id"], record["label"], record["event"]) == (sid, "greeted", seq)
    assert re.fullmatch(ISO, record["at"])
    progress = acode.workspace / ".agent/state/sessions" / sid / "progress.md"
    assert re.search(
        rf'^- \*\*Marked Checkpoints\*\*: "greeted" \(event {seq}, {ISO}\)$',
        progress.read_text(),
        re.M,
    )

    acode("approve", short)
    acode("resume", short)
    events = acode("session", "history", short, "--json").json()
    table = acode("session", "history", short).out.splitlines()

    assert [e["type"] for e in events].count("checkpoint_marked") == 1
    (mark,) = [e for e in events if e["type"] == "checkpoint_marked"]
    assert mark["seq"] == seq
    assert mark["payload"]["label"] == "greeted"
    assert events[-1]["payload"]["to"] == "COMPLETED"
    (row,) = [line for line in table if "checkpoint_marked" in line]
    assert "'greeted' by " in row


def test_a_finished_session_can_be_marked(acode: Cli) -> None:
    acode.write("done.yml", plan_yaml("Done work", "{id: look, read: done.yml}"))
    sid = acode("run", "done.yml", "--json").json_lines()[0]["id"]

    marked = acode("session", "checkpoint", sid[:8], "--label", "shipped in 1.2", "--json")

    assert marked.json()["new"] is True
    assert acode.status(sid)["state"] == "COMPLETED"
    assert acode("session", "history", sid[:8], "--json").json()[-1]["type"] == (
        "checkpoint_marked"
    )


def test_a_running_session_is_marked_by_its_own_program_not_by_the_cli(acode: Cli) -> None:
    acode.write(
        "plan.yml",
        plan_yaml("Busy", "{id: nap, run: echo $$ >> nap.pids; exec sleep 30}"),
    )
    acode.watch_pids("nap.pids")
    holder = acode.start("run", "plan.yml")
    wait_for("the step to start", (acode.workspace / "nap.pids").exists)
    sid = acode.sessions()[0]["id"]

    refused = acode("session", "checkpoint", sid[:8], "--label", "now", expect=16)

    assert f"pid {holder.pid}" in refused.flat_err
    assert "checkpoint_marked" not in {
        e["type"] for e in acode("session", "history", sid[:8], "--json").json()
    }


def test_bad_labels_and_ids_are_refused_before_anything_is_written(acode: Cli) -> None:
    sid = _waiting(acode)
    before = acode("session", "history", sid[:8], "--json").json()

    empty, multiline, long, unknown, malformed, missing = acode.many(
        [
            ["session", "checkpoint", sid[:8], "--label", "  "],
            ["session", "checkpoint", sid[:8], "--label", "one\ntwo"],
            ["session", "checkpoint", sid[:8], "--label", "x" * 201],
            ["session", "checkpoint", "abcdef12", "--label", "x"],
            ["session", "checkpoint", "../../etc", "--label", "x"],
            ["session", "checkpoint", sid[:8]],
        ],
        expect=None,
    )

    assert (empty.code, multiline.code, long.code) == (2, 2, 2)
    assert "ACODE-USAGE-001: a checkpoint label cannot be empty" in empty.flat_err
    assert "one line of printable text" in multiline.flat_err
    assert "at most 200 characters; this one has 201" in long.flat_err
    assert unknown.code == 1
    assert "no session with id 'abcdef12'" in unknown.flat_err
    assert malformed.code == 2
    assert "is not a session id" in malformed.flat_err
    assert missing.code == 2
    assert "Missing option '--label'" in missing.err
    assert acode("session", "history", sid[:8], "--json").json() == before


def test_brackets_in_a_label_or_a_title_are_shown_as_written(acode: Cli) -> None:
    acode.write("plan.yml", plan_yaml('"[bold red]Danger[/] plan"', "{id: look, read: plan.yml}"))
    sid = acode("run", "plan.yml", "--json").json_lines()[0]["id"]

    acode("session", "checkpoint", sid[:8], "--label", "[red]x[/] [link=http://e.x]y[/link]")
    history = acode("session", "history", sid[:8]).out
    listed = acode("session", "list").out

    assert "'[red]x[/] [link=http://e.x]y[/link]' by " in history
    assert "[bold red]Danger[/] plan" in history
    assert "[bold red]Danger[/] plan" in listed
