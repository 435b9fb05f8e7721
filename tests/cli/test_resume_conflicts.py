"""Changed files by the step that touched them, blocking or informational (2.1 and 2.3 of
"Choosing what to resume", docs/requirements.md), and files another session of the
workspace wrote since: conflicts."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.cli.conftest import Cli, plan_yaml

WAITING = re.compile(r"Session (\S+) is waiting for approval")
# The session reads notes.txt and writes validators.py, then waits; what is left edits
# validators.py again and writes a file of its own.
PLAN = plan_yaml(
    "Add input validation",
    "{id: look, read: notes.txt}",
    '{id: validator, write: validators.py, content: "def is_email(s):\\n    return True\\n"}',
    "{id: ok, approve: Go on?}",
    "{id: use-it, edit: validators.py, old: 'return True', new: \"return '@' in s\"}",
    '{id: done, write: done.txt, content: "done\\n"}',
)


def _waiting(acode: Cli, plan: str = PLAN, name: str = "plan.yml") -> str:
    acode.write(name, plan)
    found = WAITING.search(acode("run", name, expect=20).flat_err)
    assert found
    acode("approve", found.group(1))
    return found.group(1)


def _changed(acode: Cli, short: str) -> dict[str, dict[str, Any]]:
    env = acode("resume", short, "--dry-run", "--json").json()["environment"]
    return {c["path"]: c for c in env["changed_files"]}


def _log(acode: Cli) -> list[dict[str, Any]]:
    path = acode.workspace / ".agent" / "state" / "logs" / "acode.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_change_only_done_steps_touched_informs_one_a_step_still_uses_blocks(
    acode: Cli,
) -> None:
    acode.write("notes.txt", "notes\n")
    short = _waiting(acode)
    acode.write("notes.txt", "notes, edited\n")
    acode.write("validators.py", "def is_email(s):\n    return True  # mine\n")

    dry = acode("resume", short, "--dry-run")
    changed = _changed(acode, short)
    refused = acode("resume", short, expect=17)  # no terminal to ask on: autopilot

    lines = dry.out.splitlines()
    files = lines.index("  ✗ Files the session touched: 2 checked, 2 changed")
    assert re.fullmatch(r"    - notes\.txt \(modified, \d+s ago\)", lines[files + 1])
    assert lines[files + 2] == (
        "      informational: read by Task 1, Step 1 (look); no step still to run reads or "
        "writes it"
    )
    assert re.fullmatch(r"    - validators\.py \(modified, \d+s ago\)", lines[files + 3])
    assert lines[files + 4] == (
        "      blocking: written by Task 1, Step 2 (validator); Task 1, Step 4 (use-it), still "
        "to run, edits it"
    )
    assert lines[-1] == (
        "Environment not ready: 1 blocking change (the resume asks, or stops without a "
        "terminal; --continue-on-changes goes on)."
    )
    assert changed["notes.txt"]["severity"] == "informational"
    assert changed["notes.txt"]["touched_by"] == {
        "step": "look",
        "kind": "read",
        "where": "Task 1, Step 1",
        "session": None,
    }
    assert changed["validators.py"]["severity"] == "blocking"
    assert changed["validators.py"]["reason"] == "Task 1, Step 4 (use-it), still to run, edits it"
    # Only what blocks is named in the refusal.
    assert refused.flat_err.startswith(
        f"error ACODE-RESUME-004: files of session {short} changed since it stopped: "
        "validators.py (Modified) hint: "
    )

    # With the blocking change undone, the informational one alone stops nothing.
    acode.write("validators.py", "def is_email(s):\n    return True\n")
    done = acode("resume", short)

    assert "  ⚠ Files the session touched: 2 checked, 1 changed" in done.out.splitlines()
    assert "Environment ready: 1 changed file kept as found. Resuming..." in done.out
    assert done.out.splitlines()[-1] == f"Session {short} completed: 5 steps done."
    assert (acode.workspace / "notes.txt").read_text() == "notes, edited\n"
    resumed = [r for r in _log(acode) if r["event"] == "session_resume"]
    assert [(c["path"], c["severity"]) for c in resumed[-1]["changed_files"]] == [
        ("notes.txt", "informational")
    ]
    # Autopilot (no terminal) judged it safe, and logged why.
    decided = [r for r in _log(acode) if r["event"] == "autopilot_decision"][-1]
    assert (decided["decision"], decided["conflicts"]) == ("resume", [])
    assert (
        "1 changed file(s) no step still to run touches: notes.txt (informational)"
        in decided["reasons"]
    )


def test_a_step_still_to_run_that_may_touch_any_file_makes_every_change_block(
    acode: Cli,
) -> None:
    """A `run` that declares no `paths` (or a commit, or a python step) may read or
    change anything: nothing changed is only informational while one is still to run.
    One that declares them blocks only what they cover."""
    acode.write("notes.txt", "notes\n")
    acode.write("src/a.py", "a\n")
    short = _waiting(
        acode,
        plan_yaml(
            "Build",
            "{id: look, read: notes.txt}",
            "{id: read-a, read: src/a.py}",
            "{id: ok, approve: Go on?}",
            "{id: lint, run: 'true', paths: ['src/**']}",
            "{id: build, run: 'true'}",
        ),
    )
    acode.write("notes.txt", "edited\n")
    acode.write("src/a.py", "edited\n")

    changed = _changed(acode, short)

    assert changed["src/a.py"]["reason"] == "Task 1, Step 4 (lint), still to run, may change it"
    assert changed["notes.txt"]["reason"] == (
        "Task 1, Step 5 (build), still to run, may read or change any file"
    )
    assert {c["severity"] for c in changed.values()} == {"blocking"}


def test_a_file_another_session_wrote_since_is_a_conflict(acode: Cli) -> None:
    first = _waiting(
        acode,
        plan_yaml(
            "First job",
            '{id: write-shared, write: shared.txt, content: "first\\n"}',
            "{id: ok, approve: Go on?}",
            '{id: finish, write: first.txt, content: "1\\n"}',
        ),
        "first.yml",
    )
    acode.write(
        "second.yml",
        plan_yaml("Second job", '{id: overwrite, write: shared.txt, content: "second\\n"}'),
    )
    second = acode("run", "second.yml", "--json").json_lines()[0]["id"][:13]

    dry = acode("resume", first, "--dry-run")
    changed = _changed(acode, first)
    refused = acode("resume", first, expect=17)

    # Only done steps touched shared.txt: without the other session it would inform.
    assert changed["shared.txt"]["severity"] == "conflict"
    assert changed["shared.txt"]["conflict"] == {
        "step": "overwrite",
        "kind": "write",
        "where": "step 1",
        "session": second,
    }
    assert (
        f"      conflict: written by Task 1, Step 1 (write-shared); session {second} (step 1: "
        "overwrite) wrote it after this session last saw it"
    ) in dry.out.splitlines()
    assert f"shared.txt (Modified; written by session {second}, step overwrite, after this " in (
        refused.flat_err
    )
    done = acode("resume", first, "--continue-on-changes")
    assert done.out.splitlines()[-1] == f"Session {first} completed: 3 steps done."
    assert (acode.workspace / "shared.txt").read_text() == "second\n"  # kept as found
