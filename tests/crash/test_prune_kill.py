"""`acode session prune` SIGKILLed at random instants: every session is whole or gone
(its rows in every table counted), the ones left verify and resume, and the next prune
finishes the removal of the files a killed one left.

A kill lands either at a drawn delay after the process started (anywhere: start-up, the
selection, the transaction, the removal of files, the vacuum), or, through the audit hook
of autokill.py, at the N-th of the operations that follow the commit: a file removed, a
folder removed, a git command. ACODE_PRUNE_CRASH_CASES (default 6) sets how many cases
run; ACODE_CRASH_SEED seeds them, as for the other crash tests.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from contextlib import closing
from pathlib import Path
from typing import NamedTuple

import pytest

from acode.engine.journal import verify_history
from acode.security.signing import load_signer
from acode.store.sqlite.store import SqliteStore
from acode.system.workspace import StatePaths
from tests.cli.conftest import ACODE, SECRET, make_env, plan_yaml
from tests.crash.harness import SEED, _int_setting
from tests.crash.workload import install_hook

pytestmark = pytest.mark.crash

CASES = _int_setting("ACODE_PRUNE_CRASH_CASES", 6)
TABLES = ("events", "steps", "messages", "checkpoints", "step_ids", "files", "sync_state")
PRUNE = ("session", "prune", "--state", "completed", "--state", "failed", "--yes")
# The operations after the commit, as autokill.py matches them.
POINTS = [("os.remove", ".lock"), ("shutil.rmtree", "sessions"), ("subprocess.Popen", "git")]


class Template(NamedTuple):
    workspace: Path
    env: dict[str, str]
    rows: dict[str, dict[str, int]]  # each session's rows, by table
    prunable: frozenset[str]
    counts: list[int]  # how often a whole prune meets each of POINTS
    seconds: float  # how long a whole prune takes


def _acode(ws: Path, env: dict[str, str], *args: str, expect: int | None = 0) -> str:
    done = subprocess.run(
        [ACODE, *args], cwd=ws, env=env, capture_output=True, text=True, check=False, timeout=60
    )
    if expect is not None:
        assert done.returncode == expect, (args, done.stdout, done.stderr)
    return done.stdout


def _rows(ws: Path) -> dict[str, dict[str, int]]:
    with closing(sqlite3.connect(StatePaths(ws).db)) as conn:
        sessions = conn.execute("SELECT id, sid FROM sessions").fetchall()
        return {
            session_id: {
                t: conn.execute(f"SELECT count(*) FROM {t} WHERE sid = ?", (sid,)).fetchone()[0]
                for t in TABLES
            }
            for session_id, sid in sessions
        }


def _pruned(ws: Path) -> dict[str, int]:
    with closing(sqlite3.connect(StatePaths(ws).db)) as conn:
        return dict(conn.execute("SELECT id, files_left FROM pruned_sessions").fetchall())


def _git(ws: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=ws, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    root = tmp_path_factory.mktemp("prune-crash")
    env = make_env(root / "config")
    env.update(PYTHONPATH=str(install_hook(root / "hook")), PYTHONDONTWRITEBYTECODE="1")
    ws = root / "ws"
    ws.mkdir()
    _git(ws, "init", "-q")
    _git(ws, "commit", "-q", "--allow-empty", "-m", "start")
    plans = [
        ("Shared one", "{id: w, write: shared.txt, content: same}", 0),
        ("Own", "{id: r, run: echo x >> log.txt, paths: [log.txt]}", 0),
        ("Shared two", "{id: w, write: shared.txt, content: same}", 0),
        ("Lint", '{id: lint, run: "false"}', 1),
        ("Waits", "{id: w, write: w.txt, content: mine}", None),
    ]
    for title, step, code in plans:
        steps = [step] if code is not None else [step, "{id: ok, approve: Go on?}"]
        (ws / "plan.yml").write_text(plan_yaml(title, *steps), encoding="utf-8")
        _acode(ws, env, "run", "plan.yml", expect=20 if code is None else code)
    listed = json.loads(_acode(ws, env, "session", "list", "--json"))
    prunable = frozenset(s["id"] for s in listed if s["state"] in ("COMPLETED", "FAILED"))
    assert len(prunable) == 4

    counted = root / "counted"
    shutil.copytree(ws, counted, symlinks=True)
    count_file = root / "counts.json"
    points = {"CRASHTEST_COUNT_POINTS": json.dumps(POINTS), "CRASHTEST_COUNT_FILE": str(count_file)}
    started = time.monotonic()
    _acode(counted, {**env, **points}, *PRUNE)
    seconds = time.monotonic() - started
    counts = json.loads(count_file.read_text())
    assert all(counts), counts
    return Template(ws, env, _rows(ws), prunable, counts, seconds)


def _kill(template: Template, ws: Path, rng: random.Random) -> str:
    """One prune killed as drawn; how, for the failure message."""
    env = dict(template.env)
    if rng.random() < 0.5:
        index = rng.randrange(len(POINTS))
        event, match = POINTS[index]
        nth = rng.randint(1, template.counts[index])
        env.update(
            CRASHTEST_KILL_EVENT=event, CRASHTEST_KILL_MATCH=match, CRASHTEST_KILL_NTH=str(nth)
        )
        proc = subprocess.Popen([ACODE, *PRUNE], cwd=ws, env=env, start_new_session=True)
        proc.wait(timeout=60)
        return f"at {event} {match!r} #{nth} (exit {proc.returncode})"
    delay = rng.uniform(0, template.seconds)
    proc = subprocess.Popen(
        [ACODE, *PRUNE],
        cwd=ws,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(delay)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    return f"after {delay:.3f} s (exit {proc.returncode})"


def _check_whole_or_gone(template: Template, ws: Path, how: str) -> set[str]:
    rows, pruned = _rows(ws), _pruned(ws)
    with closing(sqlite3.connect(StatePaths(ws).db)) as conn:
        assert conn.execute("SELECT count(*) FROM pruning").fetchone()[0] == 0, how
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok", how
    for session_id, before in template.rows.items():
        if session_id in rows:
            assert rows[session_id] == before, (how, session_id)
            assert session_id not in pruned, (how, session_id)
        else:
            assert session_id in template.prunable, (how, session_id)
            assert session_id in pruned, (how, session_id)
    return set(rows)


def _images(ws: Path, session_id: str) -> set[str]:
    """The stored file images a session's events name."""
    with closing(sqlite3.connect(StatePaths(ws).db)) as conn:
        stored = {r[0] for r in conn.execute("SELECT sha256 FROM blobs")}
        payloads = conn.execute(
            "SELECT e.payload FROM events e JOIN sessions s USING (sid) WHERE s.id = ?",
            (session_id,),
        )
        return {sha for (p,) in payloads for sha in re.findall("[0-9a-f]{64}", p)} & stored


def _check_verified(
    template: Template, ws: Path, left: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", SECRET)
    store = SqliteStore.open(StatePaths(ws).db)
    try:
        for session_id in left:
            verify_history(store, store.session(session_id), load_signer())
            for sha in _images(template.workspace, session_id):
                store.blob(sha)  # each image it relies on is still there, and whole
    finally:
        store.close()


@pytest.mark.parametrize("case", range(CASES), ids=[f"case-{i}" for i in range(CASES)])
def test_a_killed_prune_leaves_every_session_whole_or_gone(
    template: Template, tmp_path: Path, case: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(f"{SEED}-prune-{case}")
    ws = tmp_path / "ws"
    shutil.copytree(template.workspace, ws, symlinks=True)
    how = f"seed {SEED}, case {case}: killed {_kill(template, ws, rng)}"

    left = _check_whole_or_gone(template, ws, how)
    _check_verified(template, ws, left, monkeypatch)

    _acode(ws, template.env, *PRUNE)
    paths = StatePaths(ws)
    assert set(_rows(ws)) == set(template.rows) - template.prunable, how
    assert all(left_files == 0 for left_files in _pruned(ws).values()), how
    for session_id in template.prunable:
        assert not paths.session_dir(session_id).exists(), how
        assert not (paths.locks / f"{session_id}.lock").exists(), how
        assert _git(ws, "for-each-ref", f"refs/acode/{session_id}") == "", how
    (waiting,) = set(template.rows) - template.prunable
    _check_verified(template, ws, {waiting}, monkeypatch)
    preview = json.loads(
        _acode(ws, template.env, "resume", waiting, "--dry-run", "--verify", "--json")
    )
    assert preview["session_id"] == waiting, how
