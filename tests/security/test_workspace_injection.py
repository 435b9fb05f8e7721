"""Threat 3: workspace file injection, and a person's own edits made while a session is
stopped.

- A file the session touched, changed between the interruption and the resume with its
  size kept and its modification time put back (``touch -r``), passed the environment
  check, which compared size and mtime only.
- A person who fixed a file by hand while the session was paused in a `run` step had
  the fix reverted without a word by the rollback to the step's ghost snapshot (kept
  only in a ref they did not know of); the dry run said nothing had changed.
- After a kill, the same rollback reverted and deleted files without listing them.
- The rollback deleted a file created after the interruption: even the shell's own
  ``acode resume > resume.out`` lost its output file to the resume it was capturing.

Each test ran against main first and failed there. Everything runs the real `acode` in
real git repositories, interrupted by real signals; the prompt runs on a real
pseudo-terminal (tests/cli/conftest.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import ACODE, Cli, OpenTerminal, Running, plan_yaml, wait_for_pid

__all__: list[str] = []

ORIGINAL = "def login(user):\n    return user\n"
EDITED = "def login(user: str):\n    return user\n"  # what the session's edit step wrote
FIXED = "def login(user: str):\n    return user.strip()\n"  # the person's fix, by hand

# The step changes a file of its own, then naps; only its first attempt naps (the pid
# file is ignored by git, so no rollback takes it away).
NAP = "echo partial >> out.txt; echo $$ >> nap.pids; [ $(wc -l < nap.pids) -gt 1 ] || exec sleep 30"
PLAN = plan_yaml(
    "Fix login",
    '{id: edit, edit: src/login.py, old: "def login(user):", new: "def login(user: str):"}',
    f'{{id: nap, run: "{NAP}"}}',
    '{id: after, write: done.txt, content: "done\\n"}',
)


def _git(ws: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True, text=True)
    return done.stdout


def _repo(acode: Cli) -> None:
    acode.write("plan.yml", PLAN)
    acode.write("src/login.py", ORIGINAL)
    acode.write(".gitignore", "nap.pids\n")
    _git(acode.workspace, "init", "-q")
    _git(acode.workspace, "add", "-A")
    _git(acode.workspace, "commit", "-q", "-m", "start")


def _interrupted(acode: Cli, signum: int, plan: str = "plan.yml") -> Running:
    """``acode run`` stopped by ``signum`` while the nap step's command runs."""
    pids = acode.watch_pids("nap.pids")
    run = acode.start("run", plan)
    wait_for_pid(pids, timeout=20)
    os.kill(run.pid, signum)
    acode.finish(run, expect=130 if signum != signal.SIGKILL else -signal.SIGKILL)
    return run


def _text(acode: Cli, name: str) -> str:
    return (acode.workspace / name).read_text()


# -- stat data a person cannot put back ---------------------------------------------------


def _same_size_same_mtime(path: Path, text: str, *, replace: bool) -> None:
    """Change ``path`` to ``text`` (of the same size) and put its mtime back."""
    before = path.stat()
    assert len(text.encode()) == before.st_size
    if replace:
        fresh = path.with_name(path.name + ".new")
        fresh.write_text(text)
        os.replace(fresh, path)
    else:
        with path.open("r+") as handle:
            handle.write(text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # touch -r
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


@pytest.mark.parametrize("replace", [False, True], ids=["written-in-place", "replaced"])
def test_a_change_with_size_and_mtime_put_back_is_reported(acode: Cli, replace: bool) -> None:
    # No git here: no ghost snapshot, the files the session touched are all there is.
    acode.write(
        "plan.yml",
        plan_yaml(
            "Touched",
            '{id: w, write: f.txt, content: "aaaa\\n"}',
            f'{{id: nap, run: "{NAP}"}}',
        ),
    )
    _interrupted(acode, signal.SIGINT)
    _same_size_same_mtime(acode.workspace / "f.txt", "bbbb\n", replace=replace)

    preview = acode("resume", "--dry-run", "--json").json()
    refused = acode("resume", expect=17)

    changed = preview["environment"]["changed_files"]
    assert [(c["path"], c["change"]) for c in changed] == [("f.txt", "Modified")]
    assert preview["environment_valid"] is False
    assert "ACODE-RESUME-004" in refused.err
    assert "f.txt (Modified)" in refused.flat_err
    assert _text(acode, "f.txt") == "bbbb\n"


# -- a person's edits after a pause (Ctrl+C, SIGTERM) ---------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_fix_made_while_paused_is_reported_and_kept(acode: Cli, signum: int) -> None:
    _repo(acode)
    _interrupted(acode, signum)
    assert _text(acode, "src/login.py") == EDITED
    acode.write("src/login.py", FIXED)  # the person fixes it by hand
    acode.write("notes.txt", "to do\n")  # and starts a file of their own

    dry = acode("resume", "--dry-run")
    preview = acode("resume", "--dry-run", "--json").json()
    refused = acode("resume", expect=17)

    assert "src/login.py (modified" in dry.out, dry.describe()
    assert "notes.txt (created" in dry.out, dry.describe()
    changed = {c["path"]: c["change"] for c in preview["environment"]["changed_files"]}
    assert changed == {"src/login.py": "Modified", "notes.txt": "Created"}
    assert preview["environment_valid"] is False
    assert "ACODE-RESUME-004" in refused.err
    assert "src/login.py (Modified)" in refused.flat_err
    assert _text(acode, "src/login.py") == FIXED  # a refused resume changed nothing

    done = acode("resume", "--continue-on-changes")

    assert done.out.splitlines()[-1].endswith("completed: 3 steps done."), done.describe()
    assert _text(acode, "src/login.py") == FIXED  # the person's fix stays
    assert _text(acode, "notes.txt") == "to do\n"
    # The step's own change was still rolled back before it ran again: once, not twice.
    assert _text(acode, "out.txt") == "partial\n"
    assert _text(acode, "done.txt") == "done\n"


def test_the_prompt_shows_a_fix_made_while_paused_and_keeps_it(
    acode: Cli, terminal: OpenTerminal
) -> None:
    _repo(acode)
    _interrupted(acode, signal.SIGINT)
    acode.write("src/login.py", FIXED)

    term = terminal("resume")
    term.expect("[R]esume, [S]tart over from scratch, [V]iew details, [A]bort [r/s/v/a] (r):")
    term.answer("r")
    shown = term.expect("[C]ontinue anyway, [A]bort, [V]iew changes")
    term.answer("v")
    diff = term.expect("[C]ontinue anyway, [A]bort, [V]iew changes")
    term.answer("c")
    rest = term.finish(expect=0)

    assert "src/login.py (modified" in shown
    assert "-    return user\n" in diff.replace("\r\n", "\n")
    assert "+    return user.strip()" in diff
    assert "completed: 3 steps done." in rest
    assert _text(acode, "src/login.py") == FIXED
    assert _text(acode, "out.txt") == "partial\n"


# -- after a kill: the rollback is listed before it happens ------------------------------


def test_after_a_kill_the_files_the_rollback_reverts_are_listed_first(acode: Cli) -> None:
    _repo(acode)
    _interrupted(acode, signal.SIGKILL)
    acode.write("src/login.py", FIXED)  # after a kill, acode cannot tell who did this

    dry = acode("resume", "--dry-run")
    preview = acode("resume", "--dry-run", "--json").json()
    done = acode("resume")

    rollback = preview["environment"]["rollback"]
    assert rollback is not None, dry.describe()
    assert rollback["step"] == "nap"
    assert rollback["revert"] == ["src/login.py"]
    assert rollback["delete"] == ["out.txt"]
    backup = rollback["backup_ref"]
    assert backup.startswith("refs/acode/")
    assert backup.endswith("nap-1-before-rollback")
    for text in (dry.flat_out, done.flat_out):
        assert "src/login.py" in text
        assert backup in text
        assert f"git restore --source={backup} --" in text
    # Listed before the step ran again, not after.
    listed = done.out.index(f"git restore --source={backup}")
    assert listed < done.out.index("nap: run:"), done.describe()
    assert _text(acode, "src/login.py") == EDITED  # rolled back, as listed
    assert _git(acode.workspace, "show", f"{backup}:src/login.py") == FIXED  # kept there
    assert _text(acode, "out.txt") == "partial\n"


# -- a file created after the interruption ----------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["paused", "killed"])
def test_the_resumes_own_output_file_is_not_rolled_back(acode: Cli, signum: int) -> None:
    _repo(acode)
    _interrupted(acode, signum)

    done = subprocess.run(
        ["sh", "-c", f"exec {ACODE} resume > resume.out 2>&1"],
        cwd=acode.workspace,
        env=acode.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    output = acode.workspace / "resume.out"
    assert output.exists(), "the rollback deleted the file the resume's output goes to"
    assert done.returncode == 0, output.read_text()
    assert "completed: 3 steps done." in output.read_text()
    assert _text(acode, "out.txt") == "partial\n"


def test_the_paused_runs_own_output_file_is_neither_a_change_nor_rolled_back(
    acode: Cli,
) -> None:
    # `acode run plan.yml > run.out`: the pause's last lines land after its snapshot.
    _repo(acode)
    pids = acode.watch_pids("nap.pids")
    run = subprocess.Popen(
        ["sh", "-c", f"exec {ACODE} run plan.yml > run.out 2>&1"],
        cwd=acode.workspace,
        env=acode.env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for_pid(pids, timeout=20)
        os.kill(run.pid, signal.SIGINT)
        assert run.wait(30) == 130
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    paused = _text(acode, "run.out")
    assert "Paused session" in paused

    done = acode("resume")  # autopilot: nothing of a person's changed

    assert done.out.splitlines()[-1].endswith("completed: 3 steps done."), done.describe()
    assert _text(acode, "run.out") == paused
    assert _text(acode, "out.txt") == "partial\n"
