"""What a person sees when something is wrong: refused resumes, bad plans, bad config,
a database from the future, a missing workspace and hostile input. Every refusal has
its documented exit status, names what is wrong, and leaves no traceback."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import ACODE, Background, Cli, make_env, plan_yaml, session_count

__all__: list[str] = []

TINY = plan_yaml("Tiny", '{id: only, write: only.txt, content: "x\\n"}')
PLAN_HINT = "Fix the plan and run again; docs/plans.md lists every step kind and its keys."


def test_resume_refuses_a_terminal_session_and_finds_nothing_else(acode: Cli) -> None:
    acode.write("plan.yml", TINY)
    short = acode("run", "plan.yml", "--json").json_lines()[0]["id"][:13]

    terminal, nothing = acode.many([["resume", short], ["resume"]], expect=None)

    assert (terminal.code, nothing.code) == (15, 14)

    assert terminal.flat_err == (
        f"error ACODE-RESUME-002: cannot resume session {short}: it is COMPLETED "
        "hint: terminal sessions never run again; start a new one from its plan file: "
        "acode run plan.yml"
    )
    assert terminal.out == ""
    assert nothing.flat_err.startswith(
        "error ACODE-RESUME-001: no resumable session in this workspace hint: "
    )


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Cli:
    """A workspace holding one completed session."""
    ws = tmp_path_factory.mktemp("seeded")
    acode = Cli(ws, make_env(tmp_path_factory.mktemp("cli-config")), Background())
    acode.write("plan.yml", TINY)
    acode("run", "plan.yml")
    return acode


BAD_PLANS = {
    "unknown-kind": (
        plan_yaml("Bad", "{id: a, frobnicate: x}"),
        [
            "unknown-kind.yml:6: step 'a' has no kind key",
            "unknown-kind.yml:6: unknown key 'frobnicate' in step 'a'",
        ],
    ),
    "duplicate-id": (
        plan_yaml("Bad", "{id: a, read: x.txt}", "{id: b, read: y.txt}", "{id: a, read: z.txt}"),
        ["duplicate-id.yml:8: duplicate step id 'a'; it is already used on line 6"],
    ),
    "no-content": (
        plan_yaml("Bad", "{id: a, read: x.txt}", "{id: w, write: y.txt}"),
        ["no-content.yml:7: write step 'w' has no 'content'"],
    ),
    "yaml-syntax": (
        "title: Bad\ntasks:\n  - id: t1\n    title: [unclosed\n    steps: []\n",
        ["yaml-syntax.yml:5: invalid YAML"],
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_PLANS))
def test_a_bad_plan_is_refused_before_anything_runs(seeded: Cli, name: str) -> None:
    text, problems = BAD_PLANS[name]
    seeded.write(f"{name}.yml", text)

    result = seeded("run", f"{name}.yml", expect=2)

    assert result.flat_err.startswith("error ACODE-PLAN-001: ")
    for problem in problems:
        assert problem in result.flat_err
    assert result.flat_err.endswith(f"hint: {PLAN_HINT}")
    assert result.out == ""
    assert session_count(seeded.workspace) == 1


def test_a_missing_plan_file_is_named(seeded: Cli) -> None:
    result = seeded("run", "missing.yml", expect=2)

    assert result.flat_err.startswith("error ACODE-PLAN-001: plan file not found: missing.yml")
    assert session_count(seeded.workspace) == 1


def test_a_bad_plan_creates_no_state_in_a_new_workspace(acode: Cli) -> None:
    acode.write("plan.yml", plan_yaml("Bad", "{id: w, write: y.txt}"))

    acode("run", "plan.yml", expect=2)

    assert sorted(p.name for p in acode.workspace.iterdir()) == ["plan.yml"]


def test_each_plan_problem_is_one_line_at_the_default_width(acode: Cli) -> None:
    acode.write("bad.yml", plan_yaml("Bad", "{id: a, frobnicate: x}"))
    narrow = {k: v for k, v in acode.env.items() if k != "COLUMNS"}

    result = acode("run", "bad.yml", env=narrow, expect=2)

    for line in result.err.splitlines():
        assert line.startswith(("error ACODE-PLAN-001: ", "bad.yml:", "  hint: ")), line


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ("model:\n  temprature: 0.5\n", "model.temprature: unknown key"),
        ("durability: 5\n", "durability: expected one of 'full', 'normal', got 5"),
        ("model:\n  max_tokens: lots\n", "model.max_tokens: expected a positive whole number"),
    ],
    ids=["unknown-key", "wrong-type", "wrong-number"],
)
def test_a_bad_config_names_the_key(acode: Cli, config: str, named: str) -> None:
    acode.write(".agent/config.yml", config)
    acode.write("plan.yml", TINY)

    result = acode("run", "plan.yml", expect=2)

    assert "error ACODE-CONFIG-001" in result.flat_err
    assert f".agent/config.yml: {named}" in result.flat_err
    assert "docs/configuration.md" in result.flat_err
    assert session_count(acode.workspace) == 0
    assert not (acode.workspace / "only.txt").exists()


def _fingerprint(db: Path) -> str:
    return hashlib.sha256(db.read_bytes()).hexdigest()


def test_a_database_from_a_newer_acode_is_refused_untouched(acode: Cli) -> None:
    acode.write("plan.yml", TINY)
    acode("run", "plan.yml")
    db = acode.workspace / ".agent" / "state" / "acode.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 999")
    conn.close()
    before = _fingerprint(db)

    commands = [["session", "list"], ["resume"], ["run", "plan.yml"]]

    for result in acode.many(commands, expect=1):
        assert result.flat_err.startswith(
            f"error ACODE-DB-002: {db} has schema version 999, but this acode knows versions"
        ), result.describe()
        assert "upgrade acode" in result.flat_err
    assert _fingerprint(db) == before


def test_a_missing_workspace_is_a_usage_error(acode: Cli) -> None:
    acode.write("plan.yml", TINY)
    missing = acode.workspace / "nope"
    commands = [["run", "plan.yml"], ["session", "list"], ["resume"]]

    results = acode.many([[*c, "--workspace", str(missing)] for c in commands], expect=2)

    for result in results:
        assert result.flat_err.startswith(
            f"error ACODE-USAGE-001: --workspace {missing}: no such directory"
        ), result.describe()
    assert not missing.exists()
    assert not (acode.workspace / ".agent").exists()


def test_a_command_line_mistake_is_a_usage_error(acode: Cli) -> None:
    mistakes = {
        ("frobnicate",): "No such command 'frobnicate'",
        # The work commands join a command line that names none of the others: a typo
        # of one is still matched against them.
        ("wrk",): "Did you mean 'work'?",
        ("task", "frobnicate"): "No such command 'frobnicate'",
        ("run",): "Missing argument",
        ("session", "show"): "Missing argument",
        ("run", "plan.yml", "--bogus"): "No such option: --bogus",
        ("resume", "--strategy", "yolo"): "--strategy 'yolo' is not one of rollback, retry",
    }

    results = acode.many(list(mistakes), expect=2)

    for result in results:
        assert mistakes[result.argv] in result.flat_err, result.describe()


def test_hostile_paths_and_ids_in_a_plan_are_refused(acode: Cli, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    acode.write(
        "hostile.yml",
        plan_yaml(
            "Hostile",
            "{id: ../escape, read: a.txt}",
            f'{{id: abs, write: {outside / "abs.txt"}, content: "x"}}',
            '{id: up, write: sub/../../outside/up.txt, content: "x"}',
            # Never matches: were the path accepted, the edit would still change nothing.
            "{id: pw, edit: /etc/passwd, old: acode-never-present, new: x}",
            "{id: snap, run: 'true', paths: [../outside/*]}",
        ),
    )

    result = acode("run", "hostile.yml", expect=2)

    err = result.flat_err
    assert "hostile.yml: 5 problems in the plan" in err
    assert "hostile.yml:6: step id '../escape' is not valid" in err
    assert f"hostile.yml:7: step 'abs': path '{outside / 'abs.txt'}' is absolute" in err
    assert "hostile.yml:8: step 'up': path 'sub/../../outside/up.txt' leads outside" in err
    assert "hostile.yml:9: step 'pw': path '/etc/passwd' is absolute" in err
    assert "hostile.yml:10: step 'snap': path '../outside/*' leads outside" in err
    assert list(outside.iterdir()) == []
    assert not (acode.workspace / ".agent").exists()


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("dir-link/evil.txt", "outside the workspace"),
        ("file-link", "outside the workspace"),
        (".agent/state/acode.db", "is inside .agent/state, acode's own state"),
    ],
    ids=["through-dir-symlink", "file-symlink", "acode-state"],
)
def test_a_write_that_resolves_outside_is_refused(
    acode: Cli, tmp_path: Path, target: str, message: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (acode.workspace / "dir-link").symlink_to(outside)
    (acode.workspace / "file-link").symlink_to(outside / "target.txt")
    acode.write("plan.yml", plan_yaml("Sneaky", f'{{id: w, write: {target}, content: "pwned"}}'))

    # The plan is valid; the workspace is what refuses the step: it fails, recorded.
    result = acode("run", "plan.yml", expect=1)

    assert f"path '{target}'" in result.flat_err
    assert message in result.flat_err
    assert list(outside.iterdir()) == []
    assert session_count(acode.workspace) == 1  # the database is intact
    listed = json.loads(acode("session", "list", "--all", "--json").out)
    shown = json.loads(acode("session", "show", listed[0]["id"], "--json").out)
    assert shown["state"] == "FAILED"
    assert [s["status"] for s in shown["steps"]] == ["failed"]


@pytest.mark.parametrize(
    ("command", "status"),
    [
        pytest.param(["status"], 14, id="status"),
        pytest.param(["resume"], 14, id="resume"),
        pytest.param(["resume", "--dry-run"], 14, id="resume-dry-run"),
        pytest.param(["session", "unlock", "abcd1234"], 14, id="unlock"),
        pytest.param(["resume", "abcd1234"], 14, id="resume-id"),
        pytest.param(["resume", "abcd1234", "--dry-run"], 14, id="resume-id-dry-run"),
        pytest.param(["approve", "abcd1234"], 1, id="approve"),
        pytest.param(["session", "discard", "abcd1234"], 1, id="discard"),
    ],
)
def test_a_command_that_finds_nothing_creates_no_state(
    acode: Cli, command: list[str], status: int
) -> None:
    acode(*command, expect=status)

    assert list(acode.workspace.iterdir()) == []


@pytest.mark.parametrize("closed", [(1,), (1, 2)], ids=["stdout", "stdout-and-stderr"])
def test_a_command_started_with_its_output_closed_still_does_its_work(
    acode: Cli, closed: tuple[int, ...]
) -> None:
    # As `acode run plan.yml >&-` does: Python then leaves sys.stdout None, and the first
    # print failed with an internal error after the session had been created.
    acode.write("plan.yml", TINY)

    def close_output() -> None:
        for fd in closed:
            os.close(fd)

    done = subprocess.run(
        [ACODE, "run", "plan.yml"],
        cwd=acode.workspace,
        env=acode.env,
        stdin=subprocess.DEVNULL,
        preexec_fn=close_output,
        check=False,
        timeout=60,
    )

    assert done.returncode == 0
    assert (acode.workspace / "only.txt").read_text() == "x\n"
    listed = acode("session", "list", "--all", "--json").json()
    assert [row["state"] for row in listed] == ["COMPLETED"]
