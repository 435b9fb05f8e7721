"""The approval prompt on a real terminal, and `acode approve`: what is shown, the answers
y / n / v / ?, the pager, the end of input, and the JSON a tool reads."""

from __future__ import annotations

import subprocess

from tests.cli.conftest import Cli, OpenTerminal, plan_yaml

__all__: list[str] = []

LONG = plan_yaml(
    "Long file",
    "{id: ok, approve: Write it?}",
    '{id: w, write: long.txt, content: "' + "".join(f"line {n}\\n" for n in range(1, 61)) + '"}',
)


def test_v_shows_all_of_it_in_the_pager(acode: Cli, terminal: OpenTerminal) -> None:
    acode.write("plan.yml", LONG)
    acode.env["PAGER"] = "cat"
    run = terminal("run", "plan.yml")

    first = run.expect("Approval needed (ok): Write it? [y/n/v/?]: ")
    assert "+line 37" in first  # 40 lines: three of headers, and 37 of the file
    assert "+line 38" not in first
    assert "... 23 more lines: answer v to see them all" in first
    run.answer("v")
    paged = run.expect("Approval needed (ok): Write it? [y/n/v/?]: ")
    assert paged.splitlines()[1] == "The write step 'w' that follows will create long.txt:"
    assert "+line 38" in paged
    assert "+line 60" in paged
    run.answer("y")

    assert run.finish(expect=0).rstrip().endswith("completed: 2 steps done.")


def test_with_an_empty_pager_it_is_printed(acode: Cli, terminal: OpenTerminal) -> None:
    acode.write("plan.yml", LONG)
    acode.env["PAGER"] = ""
    run = terminal("run", "plan.yml")
    run.expect("[y/n/v/?]: ")
    run.answer("v")
    assert "+line 60" in run.expect("[y/n/v/?]: ")
    run.answer("n")
    run.finish(expect=1)


def test_question_mark_explains_the_answers(acode: Cli, terminal: OpenTerminal) -> None:
    acode.write("plan.yml", LONG)
    run = terminal("run", "plan.yml")
    run.expect("[y/n/v/?]: ")

    run.answer("?")
    explained = run.expect("[y/n/v/?]: ")
    run.answer("maybe")
    unknown = run.expect("[y/n/v/?]: ")
    run.answer("n")

    assert "y  approve: the session goes on and runs the step shown" in explained
    assert "n  deny: the session stops, CANCELLED" in explained
    assert "v  view all of it in a pager ($PAGER, else less -R)" in explained
    assert "Ctrl+C  pause the session without deciding; acode resume asks again" in explained
    assert "Please answer y, n, v, ? (? explains them)" in unknown
    assert "Approval denied" in run.finish(expect=1)


def test_the_end_of_input_leaves_the_approval_waiting(acode: Cli, terminal: OpenTerminal) -> None:
    # It failed the session ("step 'ok' raised EOFError") before: nothing to resume.
    acode.write("plan.yml", LONG)
    run = terminal("run", "plan.yml")
    run.expect("[y/n/v/?]: ")
    run.type("\x04")  # Ctrl+D on an empty line

    assert "is waiting for approval of step 'ok'" in run.finish(expect=20)
    assert acode.only_session()["state"] == "AWAITING_APPROVAL"


def test_acode_approve_asks_on_a_terminal_after_showing_it(
    acode: Cli, terminal: OpenTerminal
) -> None:
    acode.write("plan.yml", LONG)
    acode("run", "plan.yml", expect=20)
    short = acode.only_session()["short_id"]

    leaving = terminal("approve", short)
    leaving.expect("[y/n/v/?]: ")
    leaving.type("\x03")  # Ctrl+C: nothing recorded
    assert "Nothing recorded." in leaving.finish(expect=130)
    assert acode("approve", short, "--dry-run", "--json").json()["recorded"] is False

    approving = terminal("approve", short)
    shown = approving.expect("Approval needed (ok): Write it? [y/n/v/?]: ")
    assert shown.splitlines()[:2] == [
        f"Session {short} waits for approval of step 'ok': Write it?",
        "The write step 'w' that follows will create long.txt:",
    ]
    approving.answer("?")
    assert "n  deny: the session is cancelled when it is resumed" in approving.expect("?]: ")
    approving.answer("y")
    assert f"Approved: Write it? (session {short}, step ok)." in approving.finish(expect=0)
    acode("resume", short)
    assert (acode.workspace / "long.txt").read_text().endswith("line 60\n")


def test_acode_approve_json_shows_what_is_gated(acode: Cli) -> None:
    acode.write("plan.yml", LONG)
    acode("run", "plan.yml", expect=20)
    session = acode.only_session()

    decided = acode("approve", session["short_id"], "--json").json()

    assert decided["session"] == session["id"]
    assert (decided["step"], decided["question"]) == ("ok", "Write it?")
    assert (decided["recorded"], decided["approved"]) == (True, True)
    assert len(decided["subject_hash"]) == 64
    gated = decided["gated"]
    assert gated["step"] == {
        "id": "w",
        "write": "long.txt",
        "content": "".join(f"line {n}\n" for n in range(1, 61)),
    }
    assert gated["heading"] == "The write step 'w' that follows will create long.txt:"
    assert gated["content"].splitlines()[:3] == [
        "--- /dev/null",
        "+++ b/long.txt",
        "@@ -0,0 +1,60 @@",
    ]
    assert gated["files"] == ["long.txt"]


def test_the_last_step_of_a_plan_has_nothing_to_show(acode: Cli) -> None:
    acode.write("plan.yml", plan_yaml("Last", "{id: ok, approve: Done?}"))
    acode("run", "plan.yml", expect=20)
    short = acode.only_session()["short_id"]

    shown = acode("approve", short, "--dry-run")
    data = acode("approve", short, "--json").json()

    assert "nothing more to show" in shown.out
    assert data["gated"] is None
    acode("resume", short)


def test_a_commit_view_leaves_the_index_as_the_person_staged_it(acode: Cli) -> None:
    acode.write(
        "plan.yml",
        plan_yaml("Commit", "{id: ok, approve: Commit?}", "{id: save, commit: Save}"),
    )
    subprocess.run(["git", "init", "-q"], cwd=acode.workspace, check=True)
    acode.write("staged.txt", "staged\n")
    subprocess.run(["git", "add", "staged.txt"], cwd=acode.workspace, check=True)
    acode("run", "plan.yml", expect=20)
    short = acode.only_session()["short_id"]

    acode("approve", short, "--dry-run")

    status = subprocess.run(
        ["git", "status", "--porcelain"],
        cwd=acode.workspace,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert sorted(status.splitlines()) == ["?? plan.yml", "A  staged.txt"]


def test_without_an_id_it_decides_the_one_session_waiting(acode: Cli) -> None:
    acode.write("done.yml", plan_yaml("Done", "{id: w, write: w.txt, content: x}"))
    acode("run", "done.yml")
    nothing = acode("approve", expect=1)
    assert "waits for an approval" in nothing.flat_err
    acode.write("plan.yml", plan_yaml("Ask", "{id: ok, approve: Go on?}"))
    first = acode("run", "plan.yml", "--json", expect=20).json_lines()[0]["id"][:13]

    decided = acode("approve", "--json").json()

    assert (decided["step"], decided["recorded"]) == ("ok", True)
    assert decided["session"].startswith(first)
    acode("resume", first)
    acode("run", "plan.yml", expect=20)
    acode("run", "plan.yml", expect=20)
    several = acode("approve", expect=2)
    assert several.flat_err.startswith("error ACODE-SESSION-002: 2 sessions wait for an approval: ")
    assert "name the one to decide: acode approve " in several.flat_err
