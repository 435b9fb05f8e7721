"""Invariants 1, 2 and 5 under SIGKILL: real `acode` processes killed at random moments
and resumed until done end exactly like a run that was never interrupted.

See docs/testing.md for how to scale the cases and replay a failure.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.crash.harness import Reference, Tally
from tests.crash.killing import (
    EventPoint,
    Invocation,
    Kill,
    KillDraw,
    aim,
    draw_kills,
    invoke,
    kill_token_processes,
    token_processes,
)
from tests.crash.workload import (
    EFFECT_STEPS,
    HOLD_PLAN,
    MAIN_PLAN,
    TEMP_PREFIX,
    WRITE_COMMIT_PLAN,
    ACodeCli,
    GitState,
    acode_bin,
    build_template,
    plan_step_ids,
    read_effects,
    workspace_files,
    write_plan,
)

pytestmark = pytest.mark.crash

EXIT_TERMINAL = 15
EXIT_LOCKED = 16


def _drive(
    ws: Path, reference: Reference, draws: list[KillDraw], token: str, logs: Path
) -> tuple[str | None, list[Invocation]]:
    """Run the plan, killing on schedule; resume (or run again, if no session was
    recorded yet) until a process ends by itself."""
    cli = ACodeCli(ws, reference.env)
    steps = plan_step_ids(MAIN_PLAN)
    done: set[str] = set()
    pending = list(draws)
    session_id: str | None = None
    invocations: list[Invocation] = []
    while True:
        remaining = [step for step in steps if step not in done]
        kill = aim(pending.pop(0), reference.pace, remaining, len(steps)) if pending else None
        if session_id is None and invocations:
            sessions = cli.json("session", "list")
            session_id = sessions[0]["id"] if sessions else None
        verb = ["run", str(reference.plan_file)] if session_id is None else ["resume", session_id]
        argv = [str(acode_bin()), *verb, "--json", "--workspace", str(ws)]
        ended = invoke(argv, reference.env, kill, token=token, logs=logs / str(len(invocations)))
        invocations.append(ended)
        session_id = session_id or _started_id(ended.stdout)
        done |= {r["step"] for r in _json_lines(ended.stdout) if r.get("phase") in _FINISHED}
        if not ended.killed:
            return session_id, invocations


_FINISHED = frozenset({"done", "recovered", "skipped"})


def _json_lines(stdout: str) -> list[dict[str, Any]]:
    """The JSON records a process printed; a killed one may have left half a line."""
    records = []
    for line in stdout.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def _started_id(stdout: str) -> str | None:
    return next((r["id"] for r in _json_lines(stdout) if r.get("event") == "started"), None)


def _files_diff(actual: dict[str, bytes], expected: dict[str, bytes]) -> str:
    lines = [f"missing: {sorted(expected.keys() - actual.keys())}"]
    lines.append(f"unexpected: {sorted(actual.keys() - expected.keys())}")
    for name in sorted(actual.keys() & expected.keys()):
        if actual[name] != expected[name]:
            lines.append(f"{name}: {actual[name][:300]!r}\n   expected {expected[name][:300]!r}")
    return "\n".join(lines)


def _completion_times(history: list[dict[str, Any]]) -> dict[str, list[int]]:
    completed: dict[str, list[int]] = {}
    for event in history:
        if event["type"] == "step_completed":
            completed.setdefault(event["payload"]["step"], []).append(event["ts_us"])
    return completed


def _check_run(ws: Path, session_id: str, reference: Reference, context: str) -> None:
    """Everything an interrupted run must share with the uninterrupted one."""
    cli = ACodeCli(ws, reference.env)
    files = workspace_files(ws)
    assert files == reference.files, f"{context}\n{_files_diff(files, reference.files)}"
    assert GitState.of(ws, reference.env) == reference.git, context

    shown = cli.json("session", "show", session_id)
    assert shown["state"] == "COMPLETED", context
    steps = sorted(shown["steps"], key=lambda s: s["position"])
    assert [s["step"] for s in steps] == plan_step_ids(MAIN_PLAN), context
    assert {s["status"] for s in steps} == {"completed"}, f"{context}\n{steps}"

    # Invariant 1: no execution of a step starts after its completion was recorded.
    completed = _completion_times(cli.json("session", "history", session_id))
    assert all(len(times) == 1 for times in completed.values()), f"{context}\n{completed}"
    effects = read_effects(ws)
    assert {e.step for e in effects} == EFFECT_STEPS, context
    for effect in effects:
        assert effect.key_prefix == f"acode:v1:{session_id}:{effect.step}", context
        assert effect.ts_us < completed[effect.step][0], (
            f"{context}\nstep {effect.step!r} ran again (attempt {effect.attempt}, pid "
            f"{effect.pid}) after its completion was recorded"
        )

    again = cli.run("resume", session_id)
    assert again.returncode == EXIT_TERMINAL, f"{context}\n{again.stderr}"


def test_killed_and_resumed_run_ends_like_an_uninterrupted_one(
    crash_case: int,
    crash_seed: int,
    reference: Reference,
    tally: Tally,
    token: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    rng = random.Random(f"{crash_seed}:{crash_case}")
    draws = draw_kills(rng, rng.randint(3, 4))
    ws = tmp_path / "ws"
    shutil.copytree(reference.template, ws, symlinks=True)

    session_id, invocations = _drive(ws, reference, draws, token, tmp_path / "logs")

    context = "\n".join(
        [
            f"crash case {crash_case}, seed {crash_seed}; replay with: ACODE_CRASH_SEED="
            f"{crash_seed} .venv/bin/pytest '{request.node.nodeid}'",
            f"workspace: {ws}",
            *(f"  {i + 1}. {inv.describe()}" for i, inv in enumerate(invocations)),
        ]
    )
    tally.record(invocations)

    final = invocations[-1]
    # 15: a killed process had already recorded COMPLETED; checked below like any other end.
    assert final.returncode in (0, EXIT_TERMINAL), context
    assert all(inv.leftovers == 0 for inv in invocations if not inv.killed), context
    for inv in invocations:
        assert "Traceback" not in inv.stderr, f"{context}\n{inv.stderr}"
        assert "internal error" not in inv.stderr, f"{context}\n{inv.stderr}"
    assert session_id is not None, context
    _check_run(ws, session_id, reference, context)


# -- the reference run --------------------------------------------------------------------


def test_the_uninterrupted_run_passes_every_check(reference: Reference) -> None:
    """The checks of the cases hold for the run they compare with."""
    _check_run(reference.workspace, reference.session_id, reference, "the reference run")
    effects = read_effects(reference.workspace)
    assert sorted(e.step for e in effects) == sorted(EFFECT_STEPS)


def test_event_counts_of_the_reference_run(reference: Reference) -> None:
    """The event kills aim at what the uninterrupted run meets: renames of written files,
    git commands, run steps' shells and python steps' logged effects. If one is never met, the
    audit hook stopped working (or acode changed how it writes) and those kills miss."""
    counts = reference.pace.event_counts
    assert all(n > 0 for n in counts.values()), counts


# -- a run step's child outliving the killed acode -----------------------------------------


@dataclass(frozen=True)
class Orphaned:
    """A run killed while its `hold` step's child waits, then resumed at once."""

    ws: Path
    env: dict[str, str]
    release: Path
    orphans: list[int]
    lock_after_kill: object
    resumed: subprocess.CompletedProcess[str]
    resume_seconds: float
    expected_files: dict[str, bytes]
    expected_git: GitState


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


def _wait_for(condition: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _require(condition: object, what: str) -> None:
    """A precondition of a test: its failure is never the expected failure of an xfail
    test (those expect an AssertionError only)."""
    if not condition:
        pytest.fail(f"precondition failed: {what}")


# Long enough for the command acode just started to be running (it notes itself first,
# see acode.system.orphans).
_NOTE_DELAY = 0.2


def _run_until(
    argv: list[str],
    env: dict[str, str],
    out: Path,
    ready: Any,
    what: str,
    *,
    everything: bool = False,
) -> None:
    """Start ``argv``, wait until ``ready()``, then SIGKILL it: alone (its children live
    on, orphaned), or with ``everything`` it started, as a power loss would."""
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT
        )
        try:
            _wait_for(ready, what)
            time.sleep(_NOTE_DELAY)
        finally:
            proc.kill()
            proc.wait()
            if everything:
                kill_token_processes(env["CRASHTEST_TOKEN"])


@pytest.fixture
def orphaned(crash_env: dict[str, str], token: str, tmp_path: Path) -> Orphaned:
    template = build_template(tmp_path / "template", crash_env)
    plan_file = write_plan(HOLD_PLAN, tmp_path / "hold.yaml")
    expected = tmp_path / "expected"
    shutil.copytree(template, expected, symlinks=True)
    assert ACodeCli(expected, crash_env).run("run", str(plan_file)).returncode == 0

    ws = tmp_path / "ws"
    shutil.copytree(template, ws, symlinks=True)
    release = tmp_path / "release"
    holding = {**crash_env, "CRASHTEST_TOKEN": token, "CRASHTEST_HOLD": str(release)}
    argv = [str(acode_bin()), "run", str(plan_file), "--json", "--workspace", str(ws)]
    entered = tmp_path / "release.entered"
    _run_until(argv, holding, tmp_path / "run.out", entered.exists, "the hold step's child")
    orphans = token_processes(token)
    _require(orphans, "the hold step's child died with acode: nothing left to test")
    session_id = _started_id((tmp_path / "run.out").read_text(encoding="utf-8"))
    _require(session_id, "the killed run printed no session id")
    assert session_id is not None

    cli = ACodeCli(ws, {**crash_env, "CRASHTEST_TOKEN": token})
    lock = cli.json("status", session_id)["lock"]
    started = time.monotonic()
    resumed = cli.run("resume", session_id)
    return Orphaned(
        ws,
        crash_env,
        release,
        orphans,
        lock,
        resumed,
        time.monotonic() - started,
        workspace_files(expected),
        GitState.of(expected, crash_env),
    )


def test_run_step_child_does_not_hold_the_lock_of_a_killed_run(orphaned: Orphaned) -> None:
    assert orphaned.lock_after_kill is None
    assert orphaned.resumed.returncode != EXIT_LOCKED, orphaned.resumed.stderr
    assert orphaned.resumed.returncode == 0, orphaned.resumed.stderr
    assert orphaned.resume_seconds < 15
    assert workspace_files(orphaned.ws) == orphaned.expected_files
    assert GitState.of(orphaned.ws, orphaned.env) == orphaned.expected_git


def test_orphaned_child_of_a_killed_run_cannot_change_the_result_later(
    orphaned: Orphaned,
) -> None:
    assert orphaned.resumed.returncode == 0, orphaned.resumed.stderr
    # Were the orphan still waiting, this would let it append to out.txt.
    orphaned.release.touch()
    _wait_for(lambda: not any(_alive(pid) for pid in orphaned.orphans), "the orphan to end")
    time.sleep(0.05)  # what a shell that just woke needs to append a line
    files = workspace_files(orphaned.ws)
    assert files == orphaned.expected_files, _files_diff(files, orphaned.expected_files)
    assert GitState.of(orphaned.ws, orphaned.env) == orphaned.expected_git


def test_kill_while_spawning_a_command(
    crash_env: dict[str, str], token: str, tmp_path: Path
) -> None:
    ws = build_template(tmp_path / "ws", crash_env)
    plan_file = write_plan(HOLD_PLAN, tmp_path / "hold.yaml")
    release = tmp_path / "release"
    argv = [str(acode_bin()), "run", str(plan_file), "--json", "--workspace", str(ws)]
    # The command notes its own process group before it runs (acode.system.orphans), so
    # no instant exists between spawning it and resume being able to stop it.
    spawn = EventPoint("spawn of the step's shell", "subprocess.Popen", "['/bin/sh'")
    killed = invoke(
        argv,
        {**crash_env, "CRASHTEST_HOLD": str(release)},
        Kill("event", "live", point=spawn, nth=1),
        token=token,
        logs=tmp_path / "run",
    )
    _require(killed.killed, f"acode was not killed at the spawn: {killed.describe()}")
    session_id = _started_id(killed.stdout)
    _require(session_id, "the killed run printed no session id")
    assert session_id is not None

    resumed = ACodeCli(ws, crash_env).run("resume", session_id)
    _require(resumed.returncode == 0, f"resume failed: {resumed.stderr}")
    release.touch()
    _wait_for(lambda: not token_processes(token), "the orphaned command to end")
    time.sleep(0.05)  # what a shell that just woke needs to append a line
    assert (ws / "out.txt").read_text(encoding="utf-8") == "x\n"


# -- a kill between writing a file's temporary copy and renaming it -------------------------


def test_kill_before_rename_leaves_no_temp_file(
    crash_env: dict[str, str], token: str, tmp_path: Path
) -> None:
    ws = build_template(tmp_path / "ws", crash_env)
    plan_file = write_plan(WRITE_COMMIT_PLAN, tmp_path / "plan.yaml")
    argv = [str(acode_bin()), "run", str(plan_file), "--json", "--workspace", str(ws)]
    point = EventPoint("rename to settings.ini", "os.rename", "settings.ini")
    killed = invoke(
        argv, crash_env, Kill("event", "kill", point=point, nth=1), token=token, logs=tmp_path
    )
    assert killed.killed, killed.describe()
    session_id = _started_id(killed.stdout)
    assert session_id is not None

    resumed = ACodeCli(ws, crash_env).run("resume", session_id)
    assert resumed.returncode == 0, resumed.stderr
    assert workspace_files(ws) == {
        ".gitignore": (ws / ".gitignore").read_bytes(),
        "README.md": (ws / "README.md").read_bytes(),
        "settings.ini": b"[app]\nlevel = 3\n",
        "src/app.py": (ws / "src" / "app.py").read_bytes(),
        "steps.py": (ws / "steps.py").read_bytes(),
    }
    committed = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", "HEAD"],
        cwd=ws,
        env=crash_env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert not [name for name in committed if TEMP_PREFIX in name]
    # Nothing of the killed write is left anywhere, acode's own state included.
    assert not [p for p in ws.rglob(f"{TEMP_PREFIX}*")]


# -- a kill while git holds the index lock --------------------------------------------------

# A clean filter (git-lfs is one) runs while `git add` holds .git/index.lock; this one
# waits, while $CRASHTEST_HOLD names a missing file, before passing the content through.
_HOLD_FILTER = """#!/bin/sh
if [ -n "$CRASHTEST_HOLD" ]; then
    touch "$CRASHTEST_HOLD.entered"
    while [ ! -e "$CRASHTEST_HOLD" ]; do sleep 0.01; done
fi
exec cat
"""


@pytest.mark.parametrize(
    "power_loss",
    [
        pytest.param(True, id="power-loss"),
        pytest.param(
            False,
            id="acode-alone",
        ),
    ],
)
def test_kill_during_commit_is_resumable(
    power_loss: bool, crash_env: dict[str, str], token: str, tmp_path: Path
) -> None:
    """Killed while `git add` holds .git/index.lock: with git (the lock is stale) or
    alone (its git lives on, holding the lock, when the resume starts)."""
    ws = build_template(tmp_path / "ws", crash_env)
    hold_filter = tmp_path / "hold-filter.sh"
    hold_filter.write_text(_HOLD_FILTER, encoding="utf-8")
    hold_filter.chmod(0o755)
    (ws / ".git" / "info" / "attributes").write_text("settings.ini filter=hold\n")
    subprocess.run(
        ["git", "config", "filter.hold.clean", str(hold_filter)], cwd=ws, env=crash_env, check=True
    )
    plan_file = write_plan(WRITE_COMMIT_PLAN, tmp_path / "plan.yaml")
    holding = {**crash_env, "CRASHTEST_TOKEN": token, "CRASHTEST_HOLD": str(tmp_path / "go")}
    argv = [str(acode_bin()), "run", str(plan_file), "--json", "--workspace", str(ws)]
    entered = tmp_path / "go.entered"
    _run_until(
        argv, holding, tmp_path / "run.out", entered.exists, "the filter", everything=power_loss
    )
    _require((ws / ".git" / "index.lock").exists(), "git left no lock: nothing to test")
    session_id = _started_id((tmp_path / "run.out").read_text(encoding="utf-8"))
    _require(session_id, "the killed run printed no session id")
    assert session_id is not None

    resumed = ACodeCli(ws, crash_env).run("resume", session_id)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert GitState.of(ws, crash_env).log.startswith("Add settings\n")
