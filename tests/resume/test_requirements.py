"""The functional requirements (FR-001..FR-065, docs/requirements.md), one test per group,
each naming the requirements it covers. They go through the public library API or the
real `acode` executable, with real processes, real SIGKILLs and real files.

Sync State Handling (FR-046..050) and Remote Reconnection (FR-051..055) need the remote
mirror, which is issue 4; they are not here.

Tampering tests edit the database directly, as an attacker or a damaged disk would, and
expect refusal. The last tests are tampering that acode does not refuse yet: they are
marked xfail(strict=True) and say what goes wrong.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, suppress
from pathlib import Path
from typing import Any

import pytest

import acode
from acode.domain.config import AcodeConfig, ModelSettings
from acode.domain.idempotency import generate
from acode.domain.reducer import decode_summary
from acode.errors import (
    ApprovalPending,
    CheckpointError,
    ErrorCode,
    NonDeterminismError,
    SessionLockedError,
    TerminalStateError,
)
from acode.store.base import open_store
from acode.system.workspace import StatePaths
from tests.cli.conftest import (
    Cli,
    Running,
    cli_sharing_the_key,
    plan_yaml,
    read_pids,
    step_started,
)
from tests.support.fake_openai import FakeOpenAI

__all__: list[str] = []

NAP = "echo $$ >> nap.pids; [ $(wc -l < nap.pids) -gt 1 ] || exec sleep 5"
NAP_STEP = f'{{id: nap, run: "{NAP}"}}'
TABLES = ("sessions", "events", "steps", "checkpoints", "messages", "files", "blobs")


@pytest.fixture
def cli(
    workspace: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cli]:
    yield from cli_sharing_the_key(workspace, tmp_path_factory, monkeypatch)


# -- helpers ---------------------------------------------------------------------------


def _db(ws: Path) -> Path:
    return ws / ".agent" / "state" / "acode.db"


def _query(ws: Path, sql: str, *args: object) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(f"file:{_db(ws)}?mode=ro", uri=True)) as db:
        return db.execute(sql, args).fetchall()


def _snapshot(ws: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table: equal snapshots mean nothing was written."""
    return {table: _query(ws, f"SELECT * FROM {table} ORDER BY 1, 2") for table in TABLES}


def _newest_summary(ws: Path, session_id: str) -> str:
    store = open_store(StatePaths(ws).db)
    try:
        newest = store.newest_checkpoint(store.session(session_id))
    finally:
        store.close()
    assert newest is not None
    return newest.summary


def _tamper(ws: Path, sql: str, *args: object) -> int:
    """Edit the database as an attacker would: the append-only triggers dropped first."""
    with closing(sqlite3.connect(_db(ws), isolation_level=None)) as db:
        db.execute("DROP TRIGGER IF EXISTS events_are_append_only_update")
        db.execute("DROP TRIGGER IF EXISTS events_are_append_only_delete")
        return db.execute(sql, args).rowcount


def _log(ws: Path) -> list[dict[str, Any]]:
    path = ws / ".agent" / "state" / "logs" / "acode.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _library_session(ws: Path, title: str, end: str) -> str:
    """A session of one step, left ``end``: paused, complete, fail, cancel, approval
    (waiting for one) or crash (the process 'died': the state stays EXECUTING)."""
    s = acode.open_session(title, workspace=ws)
    s.step("one", lambda ctx: {"title": title})
    match end:
        case "pause":
            s.pause("interrupted")
        case "complete":
            s.complete()
        case "fail":
            s.fail("broken")
        case "cancel":
            s.cancel("stopped")
        case "approval":
            with suppress(ApprovalPending):
                s.approve("ok", "Go on?")
    s.close()
    return s.id


def _pause_run(cli: Cli, *args: str) -> str:
    """`acode ARGS --json` stopped by SIGINT once its napping step runs; returns the id."""
    pids = cli.watch_pids("nap.pids")
    seen = len(read_pids(pids))
    running = cli.start(*args, "--json")
    step_started(cli, running, pids, seen + 1)
    os.kill(running.pid, signal.SIGINT)
    records = cli.finish(running, expect=130).json_lines()
    return str(records[-1]["id"])


def _free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _model_config(cli: Cli, base_url: str, temperature: float = 0.0) -> str:
    text = f"model:\n  base_url: {base_url}\n  name: fake-model\n  temperature: {temperature}\n"
    cli.write(".agent/config.yml", text)
    return text


def _lines_while_running(running: Running, count: int, timeout: float = 10.0) -> list[str]:
    """The first ``count`` lines acode prints, read while it still runs."""
    assert running.proc.stdout is not None
    fd = running.proc.stdout.fileno()
    data = b""
    deadline = time.monotonic() + timeout
    while data.count(b"\n") < count:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(left, 0))
        chunk = os.read(fd, 65536) if ready else b""
        if not chunk:
            raise AssertionError(f"acode printed only {data!r}")
        data += chunk
    return data.decode().splitlines()


# A process that dies by SIGKILL at the exact instant before a step's effect, found by an
# audit hook: the same death as a `kill -9` from outside that happened to land there.
KILLED_MID_STEP = """\
import os, signal, sys
import acode

workspace, kind, event = sys.argv[1:4]
s = acode.open_session("killed mid-step", workspace=workspace)
s.write("setup", "f.txt", "before\\n")


def die(name, args):
    if name == event and "f.txt" in repr(args[:2]):
        os.kill(os.getpid(), signal.SIGKILL)


sys.addaudithook(die)
if kind == "write":
    s.write("step", "f.txt", "after\\n")
else:
    s.read("step", "f.txt")
"""


def _killed_mid_step(ws: Path, kind: str, event: str) -> subprocess.Popen[bytes]:
    ws.mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-c", KILLED_MID_STEP, str(ws), kind, event])


def _events_of(ws: Path, session: str) -> list[tuple[str, dict[str, Any]]]:
    rows = _query(
        ws,
        "SELECT e.type, e.payload FROM events e JOIN sessions s USING (sid) WHERE s.id = ?"
        " ORDER BY e.seq",
        session,
    )
    return [(kind, json.loads(payload)) for kind, payload in rows]


def _only_session(ws: Path) -> str:
    (row,) = _query(ws, "SELECT id FROM sessions")
    return str(row[0])


# -- the requirement groups ------------------------------------------------------------


def test_resume_initiation(cli: Cli) -> None:
    """FR-001 most recent, FR-002 a specific one, FR-003 interruptible states resume,
    FR-004 terminal states refused, FR-005 the lock is taken, FR-006 refused when held,
    FR-007 the resumed id is logged. (CREATED and PLANNING never outlive `open_session`.)"""
    ws = cli.workspace
    terminal = {end: _library_session(ws, end, end) for end in ("complete", "fail", "cancel")}
    paused = _library_session(ws, "paused", "pause")
    waiting = _library_session(ws, "waiting", "approval")
    crashed = _library_session(ws, "crashed", "crash")
    before = _snapshot(ws)

    for end, session in terminal.items():
        with pytest.raises(TerminalStateError) as refused:
            acode.resume_session(session[:13], workspace=ws)
        state = {"complete": "COMPLETED", "fail": "FAILED", "cancel": "CANCELLED"}[end]
        assert refused.value.message.endswith(f": it is {state}")
        assert refused.value.exit_code == 15
    assert _snapshot(ws) == before

    most_recent = acode.resume_session(workspace=ws)
    assert (most_recent.id, most_recent.state.value) == (crashed, "EXECUTING")
    most_recent.close()
    specific = acode.resume_session(paused[:13], workspace=ws)
    assert (specific.id, specific.state.value) == (paused, "EXECUTING")  # PAUSED resumes
    lock = ws / ".agent" / "state" / "locks" / f"{paused}.lock"
    assert lock.stat().st_mode & 0o777 == 0o600
    with pytest.raises(SessionLockedError) as held:
        acode.resume_session(paused, workspace=ws)
    assert held.value.exit_code == 16
    other_process = cli("resume", paused, expect=16)
    assert f"is locked by pid {os.getpid()} on host" in other_process.flat_err
    specific.close()
    approval = acode.resume_session(waiting, workspace=ws)
    assert approval.state.value == "AWAITING_APPROVAL"
    approval.close()

    logged = _log(ws)
    resumed = [r["session_id"] for r in logged if r["event"] == "session_resume"]
    assert resumed == [crashed, paused, waiting]
    refused_codes = [(r["session"], r["code"]) for r in logged if r["event"] == "resume_refused"]
    assert refused_codes == [
        *((session[:13], "ACODE-RESUME-002") for session in terminal.values()),
        (paused, "ACODE-RESUME-003"),
        (paused, "ACODE-RESUME-003"),
    ]


def test_state_recovery(cli: Cli) -> None:
    """FR-008 the full session is loaded, FR-009 its last checkpoint, FR-010 the work
    left, FR-011 the conversation rebuilt, FR-012 the model configuration restored,
    FR-013 the approval state restored."""
    ws = cli.workspace
    with FakeOpenAI() as fake:
        config = _model_config(cli, fake.base_url, temperature=0.25)
        fake.script(["red", "blue"])
        cli.write(
            "plan.yml",
            plan_yaml(
                "Colours",
                '{id: notes, write: notes.txt, content: "colours\\n"}',
                "{id: first, model: Name one colour.}",
                "{id: ok, approve: Use it?}",
                NAP_STEP,
                "{id: second, model: And another one.}",
            ),
        )
        session = cli("run", "plan.yml", "--json", expect=20).json_lines()[0]["id"]
        cli("approve", session)
        _pause_run(cli, "resume", session)

        preview, status = cli.many(
            [["resume", session, "--dry-run", "--json"], ["status", session, "--json"]]
        )
        (last_checkpoint,) = _query(ws, "SELECT max(seq) FROM events WHERE signature NOTNULL")[0]
        data, row = preview.json(), status.json()
        assert (row["state"], row["steps_completed"], row["total_steps"]) == ("PAUSED", 3, 5)
        assert (row["title"], row["resumes"]) == ("Colours", 1)
        assert data["checkpoint_id"] == last_checkpoint
        assert data["continuation"]["skipped_steps"] == ["notes", "first", "ok"]
        assert (data["continuation"]["in_progress"], data["remaining_steps"]) == ("nap", 2)
        assert data["continuation"]["pending_steps"] == ["second"]

        _model_config(cli, fake.base_url, temperature=0.9)
        changed = cli("resume", session, expect=17)
        assert "model.temperature: 0.25 -> 0.9" in changed.flat_err
        cli.write(".agent/config.yml", config)
        # No terminal: an approval that had to be asked again would stop with 20.
        cli("resume", session)

        assert len(fake.chat_requests) == 2  # the recorded answer was not requested again
        second = fake.chat_requests[1]["body"]
    assert second["messages"] == [
        {"role": "user", "content": "Name one colour."},
        {"role": "assistant", "content": "red"},
        {"role": "user", "content": "And another one."},
    ]
    assert (second["model"], second["temperature"]) == ("fake-model", 0.25)
    decisions = _query(ws, "SELECT count(*) FROM events WHERE type = 'approval_decided'")
    assert decisions == [(1,)]


def test_checkpoint_identification(cli: Cli) -> None:
    """FR-014 a checkpoint after each completed step, FR-015 with the task and step state,
    FR-016 with the conversation, FR-017 written atomically with the step, FR-018 the
    most recent (valid) one is found; forged checkpoints are refused."""
    ws = cli.workspace
    with FakeOpenAI() as fake:
        config = AcodeConfig(model=ModelSettings(base_url=fake.base_url, name="fake-model"))
        s = acode.open_session("checkpoints", workspace=ws, config=config)
        for step_id in ("a", "b"):
            s.step(step_id, lambda ctx: ctx.step_id, task="work")
            # The checkpoint is in the row of the step's completion, signed.
            (cp_seq, signature), *_ = _query(
                ws, "SELECT seq, signature FROM events WHERE signature NOTNULL ORDER BY seq DESC"
            )
            (last_seq, last_type), *_ = _query(
                ws, "SELECT seq, type FROM events ORDER BY seq DESC LIMIT 1"
            )
            assert (cp_seq, last_type) == (last_seq, "step_completed")
            assert len(signature) == 16
            # O(1) in size: a fixed list of counters and names, never the history. Most
            # rows leave it out, and the store folds it back from the newest one written.
            summary = _newest_summary(ws, s.id)
            state = decode_summary(summary, title="checkpoints", seq=cp_seq)
            assert len(summary) < 120
            assert (state.current_task, state.current_step) == ("work", step_id)
            assert state.next_position == state.steps_completed == "ab".index(step_id) + 1
        fake.script(["noted"])
        s.model("ask", "Remember this.")
        s.close()
    (cp_seq,) = _query(ws, "SELECT max(seq) FROM events WHERE signature NOTNULL")[0]
    (step_seq,) = _query(
        ws, "SELECT seq FROM events WHERE type = 'step_completed' AND payload LIKE '%\"ask\"%'"
    )[0]
    messages = _query(ws, "SELECT role, seq FROM messages ORDER BY idx")
    # The result (its event is its step's record), the conversation and the checkpoint
    # (in the same row): one commit.
    assert messages == [("user", cp_seq), ("assistant", cp_seq)]
    assert step_seq == cp_seq

    preview = cli("resume", s.id, "--dry-run", "--json").json()
    assert preview["checkpoint_id"] == cp_seq  # the most recent
    # A forged one is tampering (threat 2), refused, never passed over for an older one.
    _tamper(ws, "UPDATE events SET signature = x'00' WHERE seq = ?", cp_seq)
    before = _snapshot(ws)
    for args in (("--dry-run",), ()):
        refused = cli("resume", s.id, *args, expect=1)
        assert refused.flat_err.startswith(
            f"error ACODE-CKPT-001: session {s.id[:13]} cannot be trusted: its newest "
            f"checkpoint (event {cp_seq}) is not signed by the key"
        )
    assert _snapshot(ws) == before


def test_continuation_planning(cli: Cli) -> None:
    """FR-019 completed tasks skipped, FR-020 completed steps skipped, FR-021 the
    in-progress step evaluated, FR-022 pending steps queued, FR-023 the plan shown and
    logged before anything runs."""
    ws = cli.workspace
    cli.write(
        "plan.yml",
        "title: Two tasks\ntasks:\n"
        "  - id: t1\n    title: First\n    steps:\n"
        '      - {id: a, write: a.txt, content: "a\\n"}\n'
        "      - {id: b, read: a.txt}\n"
        "  - id: t2\n    title: Second\n    steps:\n"
        '      - {id: c, write: c.txt, content: "c\\n"}\n'
        f"      - {NAP_STEP}\n"
        '      - {id: d, write: d.txt, content: "d\\n"}\n',
    )
    session = _pause_run(cli, "run", "plan.yml")

    planned = cli("resume", "--dry-run", "--json").json()["continuation"]
    records = cli("resume", "--json").json_lines()

    assert planned == {
        "skipped_tasks": ["t1"],
        "skipped_steps": ["a", "b", "c"],
        "in_progress": "nap",
        "in_progress_action": "retry",
        "pending_steps": ["d"],
        "resume_task": "t2",
    }
    assert records[0]["event"] == "resuming"  # shown before the first step
    assert records[0]["continuation"] == planned
    phases = [(r["step"], r["phase"]) for r in records if r["event"] == "step"]
    assert phases == [
        ("a", "skipped"),
        ("b", "skipped"),
        ("c", "skipped"),
        ("nap", "started"),
        ("nap", "done"),
        ("d", "started"),
        ("d", "done"),
    ]
    logged = [r for r in _log(ws) if r["session_id"] == session]
    assert [r["event"] for r in logged] == [
        "autopilot_decision",
        "session_resume",
        "step_recovery",
    ]
    assert logged[1]["continuation"] == planned
    assert (logged[2]["step"], logged[2]["action"]) == ("nap", "retry")
    order = [
        kind
        for kind, p in _events_of(ws, session)
        if kind == "session_resumed" or p.get("step") == "nap"
    ]
    assert order == ["step_started", "session_resumed", "step_started", "step_completed"]


def test_in_progress_step_handling(tmp_path: Path, cli: Cli) -> None:
    """FR-024 an interrupted read is read again, FR-025 an interrupted write that landed
    is recognised, FR-026 a partial write is rolled back first, FR-027 the strategy is
    configurable, FR-028 by default: roll back, then retry."""
    cases = {
        "untouched": ("write", "os.rename"),
        "landed": ("write", "os.rename"),
        "partial": ("write", "os.rename"),
        "partial-retry": ("write", "os.rename"),
        "read": ("read", "open"),
    }
    children = {name: _killed_mid_step(tmp_path / name, *how) for name, how in cases.items()}
    for child in children.values():
        assert child.wait(30) == -signal.SIGKILL
    assert acode.AcodeConfig().resume.in_progress_strategy == "rollback"
    (tmp_path / "landed" / "f.txt").write_text("after\n")  # the rename happened after all
    (tmp_path / "partial" / "f.txt").write_text("aft")
    (tmp_path / "partial-retry" / "f.txt").write_text("aft")

    outcomes: dict[str, list[tuple[str, int, bool]]] = {}
    for name, (kind, _) in cases.items():
        ws = tmp_path / name
        session = _only_session(ws)
        retry = name == "partial-retry"
        with acode.resume_session(session, workspace=ws, strategy="retry" if retry else None) as r:
            r.write("setup", "f.txt", "before\n")
            if kind == "write":
                r.write("step", "f.txt", "after\n")
            else:
                assert r.read("step", "f.txt") == "before\n"
        assert (ws / "f.txt").read_text() == ("after\n" if kind == "write" else "before\n")
        outcomes[name] = [
            (t, p.get("attempt", 1), bool(p.get("recovered")))  # left out when 1
            for t, p in _events_of(ws, session)
            if p.get("step") == "step"
        ]

    assert outcomes["untouched"] == [
        ("step_started", 1, False),
        ("step_started", 2, False),
        ("step_completed", 2, False),
    ]
    assert outcomes["landed"] == [("step_started", 1, False), ("step_completed", 1, True)]
    assert outcomes["partial"] == [
        ("step_started", 1, False),
        ("step_rolled_back", 1, False),
        ("step_started", 2, False),
        ("step_completed", 2, False),
    ]
    assert outcomes["partial-retry"] == outcomes["untouched"]
    assert outcomes["read"] == [("step_completed", 1, False)]  # no record: simply read


STEP_KEYS = """\
from pathlib import Path


def record(ctx):
    with Path(ctx.workspace, "keys.log").open("a") as log:
        log.write(f"{ctx.step_id} {ctx.idempotency_key}\\n")
    return {"key": ctx.idempotency_key}
"""


def test_idempotency(cli: Cli) -> None:
    """FR-029 every step has an idempotency key, FR-030 completed steps are detected,
    FR-031 re-applying one is a no-op, FR-032 across restarts, FR-033 keys persisted."""
    ws = cli.workspace
    cli.write("keyed.py", STEP_KEYS)
    cli.write(
        "plan.yml",
        plan_yaml(
            "Keyed",
            '{id: p1, python: "keyed:record"}',
            '{id: w, write: w.txt, content: "w\\n"}',
            '{id: p2, python: "keyed:record"}',
            NAP_STEP,
            '{id: p3, python: "keyed:record"}',
        ),
    )
    pids = cli.watch_pids("nap.pids")
    running = cli.start("run", "plan.yml")
    step_started(cli, running, pids)
    os.kill(running.pid, signal.SIGKILL)  # a restart after a crash, not a pause
    cli.finish(running, expect=-signal.SIGKILL)
    session = _only_session(ws)
    written = (ws / "w.txt").stat()

    resumed = cli("resume", "--json").json_lines()
    again = cli("resume", session, expect=15)  # a completed session is never re-applied

    assert "it is COMPLETED" in again.flat_err
    keys = [line.split() for line in (ws / "keys.log").read_text().splitlines()]
    assert [step for step, _ in keys] == ["p1", "p2", "p3"]
    assert [key for _, key in keys] == [f"acode:v1:{session}:{s}:1" for s in ("p1", "p2", "p3")]
    assert (ws / "w.txt").stat().st_mtime_ns == written.st_mtime_ns
    skipped = [r["step"] for r in resumed if r.get("phase") == "skipped"]
    assert skipped == ["p1", "w", "p2"]
    shown = cli("session", "show", session, "--json").json()["steps"]
    assert {s["step"]: s["status"] for s in shown} == dict.fromkeys(
        ["p1", "w", "p2", "nap", "p3"], "completed"
    )
    completed = {p["step"]: p for t, p in _events_of(ws, session) if t == "step_completed"}
    # An event records the key's parts (session, step, attempt: left out when 1), not
    # the key itself.
    assert {
        step: generate(session, step, p.get("attempt", 1)) for step, p in completed.items()
    } == {
        step: f"acode:v1:{session}:{step}:{2 if step == 'nap' else 1}"
        for step in ("p1", "w", "p2", "nap", "p3")
    }
    assert completed["p2"]["result"] == {"key": f"acode:v1:{session}:p2:1"}


def test_deterministic_replay(cli: Cli) -> None:
    """FR-034 events ordered by timestamp, FR-035 event_id breaks ties, FR-036 replay
    gives the identical state, FR-037 the replay order is shown, FR-038 non-determinism
    is an error; edited and inserted events are refused."""
    ws = cli.workspace
    s = acode.open_session("replayed", workspace=ws)
    for i in range(3):
        s.step(f"s{i}", lambda ctx: {"position": ctx.position})
    s.pause("interrupted")
    s.close()
    history = cli("session", "history", s.id, "--json").json()
    verified = cli("resume", s.id, "--verify", "--dry-run", "--json").json()

    order = [(e["ts_us"], e["event_id"]) for e in history]
    assert order == sorted(order)
    assert len(set(order)) == len(order)
    assert [e["seq"] for e in history] == list(range(1, len(history) + 1))
    assert (verified["state"], verified["skipped_steps"]) == ("PAUSED", 3)

    with pytest.raises(NonDeterminismError) as changed:
        with acode.resume_session(s.id, workspace=ws) as r:
            r.step("s0", lambda ctx: {"position": 0})
            r.step("other", lambda ctx: {})
    assert changed.value.code is ErrorCode.IDEMPOTENCY_CONFLICT
    assert "position 1: recorded step 's1' (python), now called as 'other'" in str(changed.value)

    edited = _tamper(
        ws,
        "UPDATE events SET payload = replace(payload, '\"position\":1}', '\"position\":7}')"
        " WHERE type = 'step_completed' AND payload LIKE '%\"step\":\"s1\"%'",
    )
    assert edited == 1
    refused = cli("resume", s.id, "--verify", "--dry-run", expect=1)
    assert refused.flat_err.startswith(f"error ACODE-CKPT-002: session {s.id[:13]}: event ")
    assert "(step_completed) does not match its hash chain" in refused.flat_err
    (last,) = _query(ws, "SELECT max(seq) FROM events")[0]
    _tamper(
        ws,
        "INSERT INTO events (id, sid, seq, event_id, ts, type, payload, hash)"
        " SELECT id + 1, sid, seq + 1, event_id, ts + 1, type, payload, hash"
        " FROM events WHERE seq = ?",
        last,
    )
    before = _snapshot(ws)
    inserted = cli("resume", s.id, expect=1)
    assert f"event {last + 1} (" in inserted.flat_err
    assert "ACODE-CKPT-002" in inserted.flat_err
    assert _snapshot(ws) == before


def test_environment_validation(cli: Cli) -> None:
    """FR-039 the workspace exists, FR-040 the session's files are there, FR-041 the
    model is available, FR-042 the configuration is valid and unchanged, FR-043 failures
    are reported, FR-044 changed files warned about, FR-045 aborting is an option."""
    ws = cli.workspace
    port = _free_port()
    config = _model_config(cli, f"http://127.0.0.1:{port}/v1")
    cli.write("src.txt", "source\n")
    cli.write(
        "plan.yml",
        plan_yaml(
            "Checked",
            "{id: look, read: src.txt}",
            '{id: out, write: out.txt, content: "out\\n"}',
            NAP_STEP,
            "{id: ask, model: Say hi.}",
        ),
    )
    session = _pause_run(cli, "run", "plan.yml")
    before = _snapshot(ws)

    preview, no_model = cli.many([["resume", "--dry-run"], ["resume"]], expect=None)

    assert preview.code == 0
    report = preview.out[preview.out.index("Validating environment...") :].splitlines()
    assert report[:3] == [
        "Validating environment...",
        "  ✓ Working directory exists",
        "  ✓ Files the session touched: 2 checked, unchanged",
    ]
    assert report[3].startswith("  ✗ Model fake-model unavailable: model server: ")
    assert report[4] == "  ✓ Configuration unchanged"
    assert no_model.code == 17
    assert no_model.flat_err.startswith(
        f"error ACODE-RESUME-004: cannot resume session {session[:13]}"
    )
    assert (
        f"hint: fix what is listed, then run `acode resume {session[:13]}` again (--force does "
        "not go past this); nothing was changed"
    ) in no_model.flat_err

    with FakeOpenAI(port=port):
        (ws / "src.txt").unlink()
        (ws / "out.txt").write_text("mine\n")
        # One after the other: a resume holds the session's lock while it validates.
        for refused in (cli("resume", expect=17), cli("resume", "--abort-on-changes", expect=17)):
            assert "changed since it stopped: out.txt (Modified); src.txt (Deleted)" in (
                refused.flat_err
            )
        cli.write("src.txt", "source\n")
        cli.write(".agent/config.yml", "model:\n  temprature: 1\n")
        invalid = cli("resume", expect=2)
        assert "model.temprature: unknown key (did you mean 'temperature'?)" in invalid.flat_err
        cli.write(".agent/config.yml", config.replace("name: fake-model", "name: other"))
        other = cli("resume", expect=17)
        assert "the configuration changed since session" in other.flat_err
        assert "model.name: 'fake-model' -> 'other'" in other.flat_err
        assert _snapshot(ws) == before
        cli.write(".agent/config.yml", config)
        done = cli("resume", "--continue-on-changes")

    assert "  ✗ Files the session touched: 2 checked, 1 changed" in done.out
    assert done.out.splitlines()[-1].endswith("completed: 4 steps done.")
    assert (ws / "out.txt").read_text() == "mine\n"
    refusals = [r["code"] for r in _log(ws) if r["event"] == "resume_refused"]
    assert refusals == ["ACODE-RESUME-004"] * 4


def test_progress_reporting(cli: Cli) -> None:
    """FR-056 the resume is announced, FR-057 the skip count shown, FR-058 the work left
    shown, FR-059 progress reported while it runs, FR-060 the end announced."""
    ws = cli.workspace
    cli.write(
        "plan.yml",
        "title: Progress\ntasks:\n"
        "  - id: t1\n    title: First\n    steps:\n"
        '      - {id: a, write: a.txt, content: "a\\n"}\n'
        '      - {id: b, write: b.txt, content: "b\\n"}\n'
        "  - id: t2\n    title: Second\n    steps:\n"
        '      - {id: c, write: c.txt, content: "c\\n"}\n'
        f"      - {NAP_STEP}\n"
        "      - {id: gate, run: 'until [ -e go ]; do sleep 0.02; done'}\n"
        '      - {id: d, write: d.txt, content: "d\\n"}\n',
    )
    session = _pause_run(cli, "run", "plan.yml")
    short = session[:13]
    preview = cli("resume", "--dry-run")
    assert (
        "  Skipping: 3 steps (complete)\n  Remaining: 3 steps, from Task 2/2, Step 2/4 (t2 > nap)\n"
    ) in preview.out

    running = cli.start("resume")
    shown = _lines_while_running(running, 13)
    assert running.proc.poll() is None  # still waiting at the gate
    (ws / "go").touch()
    rest = cli.finish(running, expect=0).out.splitlines()

    assert shown[:6] == [
        f"Resuming session {short}: Progress",
        "  Loaded state: PAUSED at Task 2/2, Step 2/4 (t2 > nap)",
        "  Skipping: Task 1: First (complete)",
        "  Skipping: Task 2, Step 1 (complete)",
        "  In progress: nap -> retry",
        "  Starting from: Task 2/2, Step 2/4 (t2 > nap); 3 steps remaining",
    ]
    assert shown[6].startswith("  Time: 3 completed steps took ")
    assert shown[7:12] == [
        "Validating environment...",
        "  ✓ Working directory exists",
        "  ✓ Files the session touched: 3 checked, unchanged",
        "  ✓ Configuration unchanged",
        "Environment ready. Resuming...",
    ]
    assert shown[12].startswith("  ✓ [4/6] t2 > nap: run: ")
    assert rest[0].startswith("  ✓ [5/6] t2 > gate: run: until [ -e go ]")
    assert rest[1].startswith("  ✓ [6/6] t2 > d: write: d.txt (")
    assert rest[2:] == [f"Session {short} completed: 6 steps done."]


def test_error_handling(cli: Cli) -> None:
    """FR-061 a failed resume changes nothing, FR-062 errors are logged with context,
    FR-063 the exit status says which failure, FR-064 each error says what to do,
    FR-065 resuming again after the fix works."""
    ws = cli.workspace
    cli.write("done.yml", plan_yaml("Done", '{id: a, write: a.txt, content: "a\\n"}'))
    cli.write("plan.yml", plan_yaml("Paused", '{id: b, write: b.txt, content: "b\\n"}', NAP_STEP))
    done = cli("run", "done.yml", "--json").json_lines()[0]["id"]
    paused = _pause_run(cli, "run", "plan.yml")
    holder = acode.resume_session(paused, workspace=ws)  # another process, as far as acode knows
    before = _snapshot(ws)
    locked = cli("resume", paused, expect=16)
    holder.close()
    (ws / "b.txt").write_text("changed\n")
    results = cli.many(
        [
            ["resume", done],
            ["resume", paused],
            ["resume", "0123abcd"],
            ["resume", paused, "--strategy", "sometimes"],
        ],
        expect=None,
    )

    expected = {
        16: "ACODE-RESUME-003",
        15: "ACODE-RESUME-002",
        17: "ACODE-RESUME-004",
        14: "ACODE-RESUME-001",
        2: "ACODE-USAGE-001",
    }
    for result, (code, error) in zip([locked, *results], expected.items(), strict=True):
        assert result.code == code, result.describe()
        first, hint = result.err.splitlines()
        assert first.startswith(f"error {error}: "), result.describe()
        assert hint.startswith("  hint: "), result.describe()
    assert _snapshot(ws) == before
    refused = [(r["session"], r["code"]) for r in _log(ws) if r["event"] == "resume_refused"]
    assert sorted(refused) == sorted(
        [
            (paused, "ACODE-RESUME-003"),
            (done, "ACODE-RESUME-002"),
            (paused, "ACODE-RESUME-004"),
            ("0123abcd", "ACODE-RESUME-001"),
        ]
    )

    (ws / "b.txt").write_text("b\n")
    assert cli("resume", paused).out.splitlines()[-1].endswith("completed: 2 steps done.")


# -- tampering acode does not refuse yet -------------------------------------------------


def test_an_edited_plan_is_refused(cli: Cli) -> None:
    cli.write(
        "plan.yml",
        plan_yaml(
            "Edited",
            "{id: ok, approve: Go on?}",
            "{id: a, write: a.txt, content: x}",
            "{id: later, run: echo fine > later.txt}",
        ),
    )
    session = cli("run", "plan.yml", "--json", expect=20).json_lines()[0]["id"]
    cli("approve", session)
    _tamper(
        cli.workspace,
        "UPDATE events SET payload = replace(payload, 'echo fine', 'echo EVIL') WHERE seq = 2",
    )

    refused = cli("resume", session, expect=None)

    assert not (cli.workspace / "later.txt").exists()
    assert refused.code == 1
    assert "ACODE-CKPT-002" in refused.flat_err


def test_a_terminal_session_edited_to_look_resumable_is_refused(workspace: Path) -> None:
    session = _library_session(workspace, "done", "complete")
    _tamper(workspace, "UPDATE sessions SET state = 'PAUSED'")
    events = _query(workspace, "SELECT count(*) FROM events")

    with pytest.raises((TerminalStateError, CheckpointError)):
        acode.resume_session(session, workspace=workspace).close()
    assert _query(workspace, "SELECT count(*) FROM events") == events


def test_a_deleted_step_row_does_not_run_the_step_again(workspace: Path) -> None:
    calls: list[str] = []
    s = acode.open_session("t", workspace=workspace)
    s.step("a", lambda ctx: calls.append("a"))
    s.pause("interrupted")
    s.close()
    _tamper(workspace, "DELETE FROM steps WHERE step_id = 'a'")

    with suppress(CheckpointError), acode.resume_session(s.id, workspace=workspace) as r:
        r.step("a", lambda ctx: calls.append("a"))

    assert calls == ["a"]


def test_an_approval_edited_to_completed_is_refused(workspace: Path) -> None:
    s = acode.open_session("t", workspace=workspace)
    with suppress(ApprovalPending):
        s.approve("ok", "Go on?")
    s.close()
    _tamper(workspace, "UPDATE steps SET status = 'completed' WHERE step_id = 'ok'")

    with pytest.raises(CheckpointError), acode.resume_session(s.id, workspace=workspace) as r:
        r.approve("ok", "Go on?")
