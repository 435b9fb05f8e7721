"""What an approval gates, as shown and as bound into the decision: real files, real git.

The diff a commit step is shown is what the commit records (compared with the commit
itself), it changes whenever any content does (binary files included), and it never
touches the user's index.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acode.domain.plan import StepSpec
from acode.engine.approval_view import (
    approval_subject,
    changed_since_shown,
    gated_view,
    view_of,
)
from acode.engine.approvals import subject_hash
from acode.system.git import commit_all, commit_preview

__all__: list[str] = []


def _git(ws: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True, text=True)
    return done.stdout


def _step(**data: object) -> StepSpec:
    return StepSpec.from_dict({"id": "next", **data}, task_id="main")


@pytest.fixture
def repo(workspace: Path) -> Path:
    _git(workspace, "init", "-q")
    (workspace / "kept.txt").write_text("kept\n")
    (workspace / "gone.txt").write_text("to be deleted\n")
    (workspace / "a.txt").write_text("one\ntwo\n")
    _git(workspace, "add", "-A")
    _git(workspace, "commit", "-q", "-m", "start")
    return workspace


def test_a_commit_is_shown_exactly_what_it_records(repo: Path) -> None:
    (repo / "a.txt").write_text("one\nTWO\n")
    (repo / "gone.txt").unlink()
    (repo / "new.txt").write_text("untracked, not ignored\n")
    (repo / "staged.txt").write_text("staged by the user\n")
    _git(repo, "add", "staged.txt")
    index_before = (repo / ".git" / "index").read_bytes()

    diff, files = commit_preview(repo)

    assert (repo / ".git" / "index").read_bytes() == index_before  # the user's index
    assert files == ("a.txt", "gone.txt", "new.txt", "staged.txt")
    commit_all(repo, "the change", {})
    recorded = _git(
        repo,
        "diff",
        "--no-color",
        "--full-index",
        "--find-renames",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        "HEAD~1",
        "HEAD",
    )
    assert diff == recorded


def test_an_unborn_head_shows_every_file_as_new(workspace: Path) -> None:
    _git(workspace, "init", "-q")
    (workspace / "first.txt").write_text("first\n")

    diff, files = commit_preview(workspace)

    assert files == ("first.txt",)
    assert "new file mode 100644" in diff
    assert "+first" in diff


def test_a_workspace_in_a_subdirectory_is_shown_what_the_commit_takes(repo: Path) -> None:
    sub = repo / "sub"
    sub.mkdir()
    (sub / "inside.txt").write_text("in the workspace\n")
    (repo / "outside.txt").write_text("not staged: the commit leaves it\n")

    _, files = commit_preview(sub)

    assert files == ("sub/inside.txt",)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    first=st.binary(min_size=0, max_size=12),
    second=st.binary(min_size=0, max_size=12),
)
def test_the_text_changes_whenever_the_content_does(
    repo: Path, first: bytes, second: bytes
) -> None:
    # Binary content too: "Binary files differ" alone would read the same for both.
    shown = []
    for content in (first, second):
        (repo / "data.bin").write_bytes(content)
        shown.append(commit_preview(repo)[0])
    assert (shown[0] == shown[1]) == (first == second)


def test_a_run_step_is_shown_its_command(workspace: Path) -> None:
    view = gated_view(workspace, _step(run="make deploy", paths=["out.txt"]))

    assert view.heading == "The run step 'next' that follows will run this command:"
    assert view.text == "make deploy"
    assert view.step == {"id": "next", "run": "make deploy", "paths": ["out.txt"]}


def test_a_write_is_shown_the_file_it_creates_or_the_change_it_makes(workspace: Path) -> None:
    created = gated_view(workspace, _step(write="b.txt", content="new\n"))
    assert created.heading == "The write step 'next' that follows will create b.txt:"
    assert created.text.splitlines() == ["--- /dev/null", "+++ b/b.txt", "@@ -0,0 +1 @@", "+new"]
    assert created.files == ("b.txt",)

    (workspace / "b.txt").write_text("old\nkept")
    changed = gated_view(workspace, _step(write="b.txt", content="new\nkept"))
    assert changed.heading == "The write step 'next' that follows will change b.txt:"
    assert changed.text.splitlines()[2:] == [
        "@@ -1,2 +1,2 @@",
        "-old",
        "+new",
        " kept",
        "\\ No newline at end of file",
    ]

    (workspace / "b.txt").write_text("same\n")
    same = gated_view(workspace, _step(write="b.txt", content="same\n"))
    assert same.heading == (
        "The write step 'next' that follows leaves b.txt as it is (the same content)."
    )


def test_an_edit_is_shown_its_diff_or_why_it_cannot_run(workspace: Path) -> None:
    (workspace / "a.py").write_text("def login(user):\n    pass\n")
    edit = _step(edit="a.py", old="def login(user):", new="def login(user: str):")

    view = gated_view(workspace, edit)

    assert view.heading == "The edit step 'next' that follows will change a.py:"
    assert "-def login(user):\n+def login(user: str):\n" in view.text
    (workspace / "a.py").write_text("something else\n")
    failing = gated_view(workspace, edit)
    assert failing.heading == (
        "The edit step 'next' that follows cannot run as things stand: cannot edit a.py: the "
        "text to replace was not found"
    )
    assert failing.text.splitlines() == [
        "id: next",
        "edit: a.py",
        "old: def login(user):",
        "new: def login(user: str):",
    ]


def test_bytes_that_are_not_text_stay_distinct_in_the_text(workspace: Path) -> None:
    (workspace / "latin1.txt").write_bytes(b"caf\xe9\n")
    text = gated_view(workspace, _step(write="latin1.txt", content="café\n")).text
    assert "-caf\\xe9" in text
    (workspace / "blob").write_bytes(b"\0\1")
    binary = gated_view(workspace, _step(write="blob", content="text\n")).text
    assert binary.startswith("Binary file blob: 2 bytes, sha256 ")


def test_other_kinds_are_shown_the_step(workspace: Path) -> None:
    view = gated_view(workspace, _step(model="Summarize\nthe change."))
    assert view.heading == "The model step 'next' that follows:"
    assert view.text == "id: next\nmodel: |\n  Summarize\n  the change.\n"


def test_a_commit_outside_git_cannot_run(workspace: Path) -> None:
    view = gated_view(workspace, _step(commit="Save"))
    assert view.heading.startswith("The commit step 'next' that follows cannot run as things")
    assert "is not a git work tree" in view.heading


def test_the_subject_is_what_was_shown(repo: Path) -> None:
    commit = _step(commit="Save")
    (repo / "a.txt").write_text("changed\n")
    subject = approval_subject(repo, commit)

    view = view_of(subject)

    assert view == gated_view(repo, commit)
    assert view is not None
    assert subject == view.subject()
    assert changed_since_shown(repo, subject) is None
    (repo / "extra.txt").write_text("slipped in\n")
    now = changed_since_shown(repo, subject)
    assert now is not None
    assert "+++ b/extra.txt" in now.text
    assert subject_hash("Ok?", now.subject()) != subject_hash("Ok?", subject)


def test_an_approval_that_gates_nothing_keeps_its_old_subject(workspace: Path) -> None:
    # The last step of a plan: None, as before views, so decisions recorded then apply.
    assert approval_subject(workspace, None) is None
    assert view_of(None) is None
    assert view_of({"command": "a library's own subject"}) is None
    assert changed_since_shown(workspace, {"tasks": []}) is None
