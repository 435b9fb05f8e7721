"""Hand-off: a session's work tree recorded on refs/acode/sessions/<id> after each step
that changed it and pushed to the workspace's git remote (a bare repository on disk),
with real git and the real `acode` (docs/fleet.md)."""

from __future__ import annotations

import itertools
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, plan_yaml

__all__: list[str] = []

PLAN = plan_yaml(
    "Hand-off",
    '{id: w, write: src/a.py, content: "print(1)\\n"}',
    '{id: e, edit: src/a.py, old: "print(1)", new: "print(2)"}',
    "{id: r, run: echo built > out.txt}",
    "{id: same, run: 'true'}",
    "{id: look, read: src/a.py}",
    "{id: c, commit: Add a}",
)
# The steps of PLAN that change the work tree or HEAD, in order.
CHANGING = ["w", "e", "r", "c"]


def git(ws: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=ws, capture_output=True, text=True, check=False, env=env
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def _repository(acode: Cli, remote: str | None) -> Path:
    """The workspace as a git repository with one commit, a stash entry and a staged
    change of the user's, ``origin`` pointing at ``remote``."""
    ws = acode.workspace
    git(ws, "init", "--quiet")
    acode.write("README.md", "hello\n")
    acode.write(".gitignore", "plan.yml\n")
    git(ws, "add", "--all")
    git(ws, "commit", "--quiet", "--message", "init")
    acode.write("README.md", "stashed\n")
    git(ws, "stash", "--quiet")
    if remote is not None:
        git(ws, "remote", "add", "origin", remote)
    acode.write(".agent/config.yml", "handoff:\n  remote: origin\n")
    acode.write("plan.yml", PLAN)
    return ws


def _user_state(ws: Path) -> dict[str, str]:
    """What of the repository is the user's: refs other than acode's, HEAD, the index."""
    refs = git(ws, "for-each-ref", "--format=%(refname) %(objectname)")
    return {
        "refs": "\n".join(r for r in refs.splitlines() if not r.startswith("refs/acode/")),
        "HEAD": git(ws, "symbolic-ref", "HEAD") + git(ws, "rev-parse", "HEAD"),
        "index": git(ws, "ls-files", "--stage", "--debug"),
        "stash": git(ws, "stash", "list", "--format=%H %s"),
    }


def _tree_on_disk(ws: Path) -> str:
    """The tree of the work tree's files git does not ignore, built in an index of the
    test's own."""
    env = {**os.environ, "GIT_INDEX_FILE": str(ws.parent / "test-index")}
    git(ws, "add", "--all", "--force", "--", ".", ":!.agent/state", env=env)
    git(ws, "rm", "-r", "--cached", "--quiet", "--ignore-unmatch", "plan.yml", env=env)
    tree = git(ws, "write-tree", env=env).strip()
    Path(env["GIT_INDEX_FILE"]).unlink()
    return tree


def _chain(ws: Path, ref: str) -> list[dict[str, str]]:
    """The ref's chain commits, oldest first: their trailers and first parent."""
    out = git(
        ws,
        "log",
        "--first-parent",
        "--reverse",
        "--format=%H %P%x00%(trailers:unfold,separator=%x01)%x02",
        ref,
    )
    chain = []
    for record in out.split("\x02"):
        head, _, trailers = record.strip().partition("\x00")
        if not trailers:
            continue  # the user's commit the chain starts from
        fields = dict(t.split(": ", 1) for t in trailers.split("\x01") if t)
        commit, *parents = head.split()
        chain.append({"commit": commit, "parents": " ".join(parents), **fields})
    return chain


def test_each_step_that_changes_files_adds_a_commit_and_the_remote_gets_the_ref(
    acode: Cli, tmp_path: Path
) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    ws = _repository(acode, str(remote))
    git(ws, "add", "plan.yml", "--force")  # a staged change of the user's
    git(ws, "rm", "--cached", "--quiet", "plan.yml")
    before = _user_state(ws)

    sid = acode("run", "plan.yml", "--json").json_lines()[0]["id"]

    ref = f"refs/acode/sessions/{sid}"
    local = git(ws, "rev-parse", ref).strip()
    assert git(remote, "rev-parse", ref).strip() == local
    assert git(ws, "rev-parse", f"{ref}^{{tree}}").strip() == _tree_on_disk(ws)
    chain = _chain(ws, ref)
    assert [c["Acode-Step"] for c in chain] == CHANGING
    assert {c["Acode-Session"] for c in chain} == {sid}
    assert all(c["Acode-Attempt"] == "1" for c in chain)
    # One chain: each commit's first parent is the one before; HEAD is the last parent.
    for before_it, commit in itertools.pairwise(chain):
        assert commit["parents"].split()[0] == before_it["commit"]
    assert chain[-1]["parents"].split()[-1] == git(ws, "rev-parse", "HEAD").strip()
    # The history names each commit after the completion of its step.
    history = acode("session", "history", sid, "--json").json()
    recorded = [e for e in history if e["type"] == "worktree_recorded"]
    assert [e["payload"]["commit"] for e in recorded] == [c["commit"] for c in chain]
    completed = {e["payload"]["step"]: e["seq"] for e in history if e["type"] == "step_completed"}
    for event, commit in zip(recorded, chain, strict=True):
        step = event["payload"]["step"]
        assert event["payload"]["after_seq"] == completed[step] == int(commit["Acode-After-Seq"])
        assert event["seq"] == completed[step] + 1
    # The commit step moved HEAD and the index, as it does without hand-off; nothing
    # else of the user's moved.
    after = _user_state(ws)
    assert after["stash"] == before["stash"]
    assert after["refs"].replace(after["HEAD"].split()[-1], "") == before["refs"].replace(
        before["HEAD"].split()[-1], ""
    )

    status = acode("status", sid, "--json").json()["handoff"]
    assert status["status"] == "pushed"
    assert status["recorded"] == status["pushed"] == local
    assert status["unpushed_steps"] == 0
    text = acode("status", sid).out
    assert "Hand-off: pushed ✓" in text
    assert f"Recorded: {local[:12]}" in text


def test_recording_never_writes_the_users_index_head_branches_or_stash(
    acode: Cli, tmp_path: Path
) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    ws = _repository(acode, str(remote))
    acode.write("staged.txt", "staged\n")
    git(ws, "add", "staged.txt")
    acode.write(
        "plan.yml",
        plan_yaml(
            "No commit",
            '{id: w, write: src/a.py, content: "x\\n"}',
            "{id: r, run: rm staged.txt && echo y > made.txt}",
        ),
    )
    before = _user_state(ws)
    index_bytes = (ws / ".git" / "index").read_bytes()

    sid = acode("run", "plan.yml", "--json").json_lines()[0]["id"]

    assert _user_state(ws) == before
    assert (ws / ".git" / "index").read_bytes() == index_bytes
    ref = f"refs/acode/sessions/{sid}"
    files = git(ws, "ls-tree", "-r", "--name-only", ref).split()
    assert "made.txt" in files
    assert "staged.txt" not in files
    assert git(remote, "rev-parse", ref).strip() == git(ws, "rev-parse", ref).strip()


def test_an_unreachable_remote_never_stops_the_session_and_acode_sync_pushes_later(
    acode: Cli, tmp_path: Path
) -> None:
    remote = tmp_path / "not-yet.git"
    ws = _repository(acode, str(remote))

    sid = acode("run", "plan.yml", "--json").json_lines()[0]["id"]

    assert acode("status", sid, "--json").json()["state"] == "COMPLETED"
    status = acode("status", sid, "--json").json()["handoff"]
    assert status["status"] == "failing"
    assert status["pushed"] is None
    assert status["unpushed_steps"] == len(CHANGING)
    assert "does not appear to be a git repository" in status["reason"]
    text = acode("status", sid).out
    assert f"Hand-off: {len(CHANGING)} steps not pushed yet (push failing)" in text
    assert "Push it now with: acode sync" in text
    failed = acode("sync", expect=1)
    assert "Hand-off: 1 session not pushed to origin" in failed.err

    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    pushed = acode("sync", "--json").json()["handoff"]

    assert pushed == {
        "remote": "origin",
        "status": "up_to_date",
        "pushed": [sid],
        "waiting": [],
        "reason": None,
    }
    ref = f"refs/acode/sessions/{sid}"
    assert git(remote, "rev-parse", ref).strip() == git(ws, "rev-parse", ref).strip()
    assert acode("status", sid, "--json").json()["handoff"]["status"] == "pushed"
    assert "Nothing to push" in acode("sync").out


def test_the_next_session_pushes_what_an_earlier_one_left(acode: Cli, tmp_path: Path) -> None:
    remote = tmp_path / "later.git"
    ws = _repository(acode, str(remote))
    first = acode("run", "plan.yml", "--json").json_lines()[0]["id"]
    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    acode.write("plan2.yml", plan_yaml("Second", '{id: w2, write: b.txt, content: "b\\n"}'))

    second = acode("run", "plan2.yml", "--json").json_lines()[0]["id"]

    for sid in (first, second):
        ref = f"refs/acode/sessions/{sid}"
        assert git(remote, "rev-parse", ref).strip() == git(ws, "rev-parse", ref).strip()


def test_a_remote_that_went_its_own_way_is_never_overwritten(acode: Cli, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    ws = _repository(acode, str(remote))
    sid = acode("run", "plan.yml", "--json").json_lines()[0]["id"]
    ref = f"refs/acode/sessions/{sid}"
    # Another machine took the session over and pushed commits this one does not have.
    other = git(ws, "commit-tree", "-m", "elsewhere", f"{ref}^{{tree}}").strip()
    git(ws, "push", "--quiet", "--force", str(remote), f"{other}:{ref}")
    (ws / ".agent/state/handoff" / f"{sid}.json").unlink()  # as if never pushed from here

    refused = acode("sync", "--json", expect=1).json()["handoff"]

    assert refused["status"] == "failing"
    assert "the remote refused the ref" in refused["reason"]
    assert git(remote, "rev-parse", ref).strip() == other
    status = acode("status", sid, "--json").json()["handoff"]
    assert status["status"] == "conflict"
    assert "push refused" in acode("status", sid).out


def test_hand_off_is_off_unless_configured(acode: Cli, tmp_path: Path) -> None:
    ws = _repository(acode, str(tmp_path / "remote.git"))
    (ws / ".agent/config.yml").unlink()

    sid = acode("run", "plan.yml", "--json").json_lines()[0]["id"]

    assert git(ws, "for-each-ref", "refs/acode/sessions") == ""
    assert acode("status", sid, "--json").json()["handoff"] is None
    assert "Hand-off:" not in acode("status", sid).out
    history = acode("session", "history", sid, "--json").json()
    assert "worktree_recorded" not in {e["type"] for e in history}
    assert not (ws / ".agent/state/handoff").exists()


@pytest.mark.parametrize(
    "value",
    [
        "--upload-pack=touch pwned",
        "-x",
        "https://bob:s3cretToken@example.com/r.git",
        "../elsewhere",
        "origin/../x",
        "a b",
        "origin.lock",
    ],
)
def test_a_remote_that_is_no_plain_remote_name_is_refused_at_once(acode: Cli, value: str) -> None:
    ws = _repository(acode, None)
    acode.write(".agent/config.yml", f"handoff:\n  remote: '{value}'\n")

    refused = acode("run", "plan.yml", expect=2)

    assert "ACODE-CONFIG" in refused.err
    assert "handoff.remote: expected the name of a git remote" in refused.flat_err
    assert "s3cretToken" not in refused.err + refused.out
    assert not (ws / "pwned").exists()
    assert git(ws, "for-each-ref", "refs/acode") == ""


def test_outside_a_git_repository_there_is_nothing_to_record_and_no_failure(
    acode: Cli,
) -> None:
    acode.write(".agent/config.yml", "handoff:\n  remote: origin\n")
    acode.write("plan.yml", plan_yaml("No git", '{id: w, write: a.txt, content: "a\\n"}'))

    sid = acode("run", "plan.yml", "--json").json_lines()[0]["id"]

    assert acode("status", sid, "--json").json()["handoff"]["status"] == "no_repository"
    assert "Hand-off: nothing to record: the workspace is not in a git repository" in (
        acode("status", sid).out
    )
