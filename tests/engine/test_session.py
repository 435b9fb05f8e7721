"""The Session engine through the public library API: once-only steps, replay,
non-determinism, failures, approvals, pauses and the kind-specific recovery."""

from __future__ import annotations

import dataclasses
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest

import acode
from acode.domain.events import EventType
from acode.domain.kinds import StepKind
from acode.domain.reducer import StepStatus
from acode.domain.states import SessionState
from acode.engine.observer import ApprovalRequest
from acode.engine.session import journal_of
from acode.errors import (
    ApprovalPending,
    NonDeterminismError,
    PauseRequested,
    SessionLockedError,
    StepFailedError,
    UsageError,
)
from acode.store.base import open_store
from acode.system.workspace import StatePaths


def _store(ws: Path):
    return open_store(StatePaths(ws).db)


def _state(ws: Path, session_id: str) -> str:
    store = _store(ws)
    try:
        return str(store.session(session_id).state)
    finally:
        store.close()


class Counter:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, ctx: acode.StepContext) -> dict[str, Any]:
        self.calls.append(ctx.step_id)
        return {"step": ctx.step_id, "key": ctx.idempotency_key, "pair": (1, 2)}


def test_completed_steps_return_their_recorded_results_without_running(workspace: Path) -> None:
    counter = Counter()
    s = acode.open_session("t", workspace=workspace)
    first = s.step("a", counter)
    s.step("b", counter)
    s.close()  # as if the process died here: state stays EXECUTING
    assert _state(workspace, s.id) == "EXECUTING"
    assert first == {"step": "a", "key": f"acode:v1:{s.id}:a:1", "pair": [1, 2]}

    again = Counter()
    with acode.resume_session(s.id, workspace=workspace) as r:
        assert r.step("a", again) == first
        r.step("b", again)
        r.step("c", again)
    assert counter.calls == ["a", "b"]
    assert again.calls == ["c"]
    assert _state(workspace, s.id) == "COMPLETED"


def test_a_different_step_at_a_recorded_position_is_non_determinism(workspace: Path) -> None:
    s = acode.open_session("t", workspace=workspace)
    s.step("a", lambda ctx: 1, input={"n": 1})
    s.close()
    for call in (
        lambda r: r.step("other", lambda ctx: 1, input={"n": 1}),  # id differs
        lambda r: r.read("a", "x.txt"),  # kind differs
        lambda r: r.step("a", lambda ctx: 1, input={"n": 2}),  # input differs
    ):
        r = acode.resume_session(s.id, workspace=workspace)
        with pytest.raises(NonDeterminismError, match="position 0"):
            call(r)
        r.close()
    assert _state(workspace, s.id) == "EXECUTING"  # still resumable


def test_a_step_id_used_twice_is_refused(workspace: Path) -> None:
    s = acode.open_session("t", workspace=workspace)
    s.step("a", lambda ctx: 1)
    with pytest.raises(NonDeterminismError, match="used twice"):
        s.step("a", lambda ctx: 2)
    s.close()


def test_a_recorded_id_reused_by_a_new_step_after_resume_is_refused(workspace: Path) -> None:
    s = acode.open_session("t", workspace=workspace)
    s.step("a", lambda ctx: 1)
    s.step("b", lambda ctx: 1)
    s.close()
    r = acode.resume_session(s.id, workspace=workspace)
    r.step("a", lambda ctx: 1)
    r.step("b", lambda ctx: 1)
    with pytest.raises(NonDeterminismError, match="used twice"):
        r.step("a", lambda ctx: 1)
    r.close()


def test_skip_completed_goes_on_after_the_recorded_steps_without_calling_them(
    workspace: Path,
) -> None:
    s = acode.open_session("t", workspace=workspace)
    for i in range(3):
        s.step(f"s{i}", lambda ctx: ctx.position)
    s.close()
    r = acode.resume_session(s.id, workspace=workspace)
    start = r.skip_completed()
    assert start == 3
    assert [r.step(f"s{i}", lambda ctx: ctx.position) for i in range(start, 5)] == [3, 4]
    with pytest.raises(NonDeterminismError, match="used twice"):
        r.step("s1", lambda ctx: 0)  # a recorded id, never called in this run
    r.close()
    again = acode.resume_session(s.id, workspace=workspace)  # a replay agrees
    replayed = [again.step(f"s{i}", lambda ctx: pytest.fail("ran")) for i in range(5)]
    assert replayed == [0, 1, 2, 3, 4]
    again.close()


@pytest.mark.parametrize("new_steps", [0, 5, 40])
def test_after_skip_completed_a_recorded_id_is_refused_while_looked_up_and_once_read(
    workspace: Path, new_steps: int
) -> None:
    """A new id is first looked up in the step id ledger a seek at a time, then (12
    seeks on, for 60 recorded steps) found among the ledger's ids read once: a recorded
    id is refused either way, and so is one of the new steps."""
    s = acode.open_session("t", workspace=workspace)
    for i in range(60):
        s.step(f"s{i}", lambda ctx: ctx.position)
    s.close()
    r = acode.resume_session(s.id, workspace=workspace)
    start = r.skip_completed()
    for i in range(start, start + new_steps):
        r.step(f"s{i}", lambda ctx: ctx.position)
    for reused in ("s0", "s59", f"s{start + new_steps - 1}" if new_steps else "s30"):
        with pytest.raises(NonDeterminismError, match="used twice"):
            r.step(reused, lambda ctx: 0)
    assert r.step("fresh-id", lambda ctx: ctx.position) == start + new_steps
    r.close()


def test_skip_completed_comes_first_and_refuses_an_unfinished_step(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = acode.open_session("t", workspace=workspace)
    s.step("a", lambda ctx: 1)
    with pytest.raises(UsageError, match="before the first step call"):
        s.skip_completed()
    s.close()
    sid = _interrupted_write(workspace, "two\n", monkeypatch)
    r = acode.resume_session(sid, workspace=workspace)
    with pytest.raises(UsageError, match=r"unfinished steps \(w2\)") as info:
        r.skip_completed()
    assert "call the steps from the first one" in (info.value.hint or "")
    r.close()


@pytest.mark.parametrize("bad", ["", "../x", "a b", "x" * 65, "-lead"])
def test_invalid_step_ids_are_usage_errors(workspace: Path, bad: str) -> None:
    with acode.open_session("t", workspace=workspace) as s, pytest.raises(UsageError):
        s.step(bad, lambda ctx: 1)


def test_results_must_be_json(workspace: Path) -> None:
    s = acode.open_session("t", workspace=workspace)
    with pytest.raises(StepFailedError, match="cannot be recorded as JSON"):
        s.step("a", lambda ctx: object())
    s.close()


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_a_result_with_a_number_json_cannot_hold_fails_its_step(
    workspace: Path, number: float
) -> None:
    """Python's json writes NaN and Infinity, which are not JSON: SQLite's JSON functions
    (the progress file's model usage) and PostgreSQL's jsonb (sync) refuse them."""
    s = acode.open_session("t", workspace=workspace)
    with pytest.raises(StepFailedError, match="cannot be recorded as JSON: Out of range float"):
        s.step("odd", lambda ctx: {"ratio": [1.5, number]})
    assert s.step("next", lambda ctx: {"ratio": 1.5}) == {"ratio": 1.5}
    s.close()


def test_a_live_call_returns_the_json_form_as_a_replay_does(workspace: Path) -> None:
    cycle: list[object] = []
    cycle.append(cycle)
    s = acode.open_session("t", workspace=workspace)
    as_given = {"a": [1, 2.5, None, True, "x"], "b": {"c": -0.0}}
    assert s.step("plain", lambda ctx: as_given) == as_given
    converted = {"t": [1, 2], "n": {"3": "int key"}}
    assert s.step("tuple", lambda ctx: {"t": (1, 2), "n": {3: "int key"}}) == converted
    with pytest.raises(StepFailedError, match="cannot be recorded as JSON"):
        s.step("cycle", lambda ctx: cycle)
    s.close()


def test_a_failing_step_fails_the_session_and_is_recorded(workspace: Path) -> None:
    def boom(ctx: acode.StepContext) -> None:
        raise ValueError("no good")

    with pytest.raises(StepFailedError, match="ValueError: no good"):
        with acode.open_session("t", workspace=workspace) as s:
            s.step("a", boom)
    assert _state(workspace, s.id) == "FAILED"
    store = _store(workspace)
    try:
        steps = store.steps(store.session(s.id).sid)
    finally:
        store.close()
    assert [(x.step_id, x.status) for x in steps] == [("a", StepStatus.FAILED)]


def test_an_exception_outside_steps_leaves_the_session_resumable(workspace: Path) -> None:
    with pytest.raises(RuntimeError), acode.open_session("t", workspace=workspace) as s:
        s.step("a", lambda ctx: 1)
        raise RuntimeError("bug in the agent")
    assert _state(workspace, s.id) == "EXECUTING"
    with acode.resume_session(s.id, workspace=workspace) as r:
        r.step("a", lambda ctx: 1)
    assert _state(workspace, s.id) == "COMPLETED"


def test_a_pause_records_paused_and_resume_returns_to_executing(workspace: Path) -> None:
    with pytest.raises(PauseRequested), acode.open_session("t", workspace=workspace) as s:
        s.step("a", lambda ctx: 1)
        raise PauseRequested
    assert _state(workspace, s.id) == "PAUSED"
    with acode.resume_session(workspace=workspace) as r:
        assert r.id == s.id
        assert r.state is SessionState.EXECUTING


def test_the_lock_is_held_while_open_and_released_on_close(workspace: Path) -> None:
    s = acode.open_session("t", workspace=workspace)
    with pytest.raises(SessionLockedError) as info:
        acode.resume_session(s.id, workspace=workspace)
    assert info.value.exit_code == 16
    assert "pid" in info.value.message
    s.close()
    acode.resume_session(s.id, workspace=workspace).close()


def test_terminal_sessions_are_refused(workspace: Path) -> None:
    with acode.open_session("t", workspace=workspace) as s:
        s.step("a", lambda ctx: 1)
    with pytest.raises(acode.AcodeError) as info:
        acode.resume_session(s.id, workspace=workspace)
    assert info.value.exit_code == 15


# -- files -------------------------------------------------------------------------


def test_read_write_edit(workspace: Path) -> None:
    with acode.open_session("t", workspace=workspace) as s:
        s.write("w", "src/a.py", "def f(x):\n    return x\n")
        assert s.read("r", "src/a.py") == "def f(x):\n    return x\n"
        s.edit("e", "src/a.py", "def f(x):", "def f(x: int):")
    assert (workspace / "src/a.py").read_text() == "def f(x: int):\n    return x\n"


@pytest.mark.parametrize(
    "content", [b"", b"plain\n", "caf\u00e9\n".encode(), b"\xff\xfe bad \xc3\n"]
)
def test_a_read_returns_what_its_replay_returns(workspace: Path, content: bytes) -> None:
    """A read just run hands back the text it read, not the stored blob decoded again:
    the same text a replay decodes from the record, undecodable bytes replaced alike."""
    (workspace / "f.bin").write_bytes(content)
    with acode.open_session("t", workspace=workspace) as s:
        fresh = s.read("r", "f.bin")
        s.pause("test")
    (workspace / "f.bin").write_bytes(b"changed since")
    with acode.resume_session(s.id, workspace=workspace, force=True) as again:
        assert again.read("r", "f.bin") == fresh == content.decode("utf-8", errors="replace")


@pytest.mark.parametrize(
    ("old", "message"), [("missing", "was not found"), ("x", "appears 3 times")]
)
def test_edit_needs_exactly_one_match(workspace: Path, old: str, message: str) -> None:
    (workspace / "a.txt").write_text("x x x\n")
    s = acode.open_session("t", workspace=workspace)
    with pytest.raises(StepFailedError, match=message):
        s.edit("e", "a.txt", old, "y")
    s.close()
    assert (workspace / "a.txt").read_text() == "x x x\n"


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside.txt", ".agent/state/acode.db"])
def test_paths_outside_the_workspace_are_refused(workspace: Path, path: str) -> None:
    s = acode.open_session("t", workspace=workspace)
    with pytest.raises(acode.AcodeError):
        s.write("w", path, "x")
    s.close()
    assert not (workspace.parent / "outside.txt").exists()


def _interrupted_write(workspace: Path, content: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A session whose second write was recorded as started, then the process 'died'
    before the file was written."""
    from acode.engine.steps import file_steps

    s = acode.open_session("t", workspace=workspace)
    s.write("w1", "f.txt", "one\n")

    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(file_steps, "write_file", killed)
        with pytest.raises(KeyboardInterrupt):
            s.write("w2", "f.txt", content)
    s.close()
    return s.id


def test_an_interrupted_write_already_applied_is_marked_complete(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = _interrupted_write(workspace, "two\n", monkeypatch)
    (workspace / "f.txt").write_text("two\n")  # the write landed before the kill
    with acode.resume_session(sid, workspace=workspace) as r:
        r.write("w1", "f.txt", "one\n")
        r.write("w2", "f.txt", "two\n")
    store = _store(workspace)
    try:
        row = store.session(sid)
        events = [e.type.value for e in store.events(row)]
    finally:
        store.close()
    assert events.count("step_completed") == 2
    assert "step_rolled_back" not in events


def test_an_interrupted_write_on_a_changed_file_is_rolled_back_then_redone(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = _interrupted_write(workspace, "two\n", monkeypatch)
    (workspace / "f.txt").write_text("half-written garbage")
    with acode.resume_session(sid, workspace=workspace) as r:
        r.write("w1", "f.txt", "one\n")
        r.write("w2", "f.txt", "two\n")
    assert (workspace / "f.txt").read_text() == "two\n"
    store = _store(workspace)
    try:
        row = store.session(sid)
        rolled = [e for e in store.events(row) if e.type.value == "step_rolled_back"]
        steps = store.steps(row.sid)
    finally:
        store.close()
    assert len(rolled) == 1
    assert rolled[0].payload["restored"] == ["f.txt"]
    assert steps[1].attempt == 2


# -- run ---------------------------------------------------------------------------


def test_run_captures_output_and_fails_on_nonzero_exit(workspace: Path) -> None:
    s = acode.open_session("t", workspace=workspace)
    result = s.run("ok", "echo out; echo err >&2", idempotent=True)
    assert isinstance(result, acode.CommandResult)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "out\n", "err\n")
    with pytest.raises(StepFailedError, match="exited with status 3"):
        s.run("bad", "exit 3")
    s.close()


def test_run_sees_its_idempotency_key(workspace: Path) -> None:
    with acode.open_session("t", workspace=workspace) as s:
        result = s.run("k", 'echo "$ACODE_IDEMPOTENCY_KEY"', idempotent=True)
        assert isinstance(result, acode.CommandResult)
        assert result.stdout.strip() == f"acode:v1:{s.id}:k:1"


def test_run_times_out(workspace: Path) -> None:
    s = acode.open_session("t", workspace=workspace)
    with pytest.raises(StepFailedError, match="timed out"):
        s.run("slow", "sleep 5", timeout=0.3)
    s.close()


# -- commit ------------------------------------------------------------------------


def _git(ws: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True, text=True).stdout


def test_commit_carries_the_trailer_and_is_never_made_twice(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acode.engine.steps import commit_step

    _git(workspace, "init", "-q")
    (workspace / "a.txt").write_text("a\n")
    real_commit = commit_step.commit_all  # type: ignore[attr-defined]

    def commit_then_die(*args: Any, **kwargs: Any) -> str:
        real_commit(*args, **kwargs)
        raise KeyboardInterrupt  # killed after git committed, before acode recorded it

    monkeypatch.setattr(commit_step, "commit_all", commit_then_die)
    s = acode.open_session("t", workspace=workspace)
    with pytest.raises(KeyboardInterrupt):
        s.commit("c1", "Add a")
    s.close()
    monkeypatch.setattr(commit_step, "commit_all", real_commit)
    assert f"Acode-Step: acode:v1:{s.id}:c1:1" in _git(workspace, "log", "-1", "--format=%B")

    with acode.resume_session(s.id, workspace=workspace) as r:
        sha = r.commit("c1", "Add a")
    assert _git(workspace, "rev-list", "--count", "HEAD").strip() == "1"
    assert sha == _git(workspace, "rev-parse", "HEAD").strip()
    assert ".agent" not in _git(workspace, "show", "--name-only", "--format=", sha)


def test_commit_outside_git_fails_clearly(workspace: Path) -> None:
    s = acode.open_session("t", workspace=workspace)
    with pytest.raises(StepFailedError, match="not a git work tree"):
        s.commit("c", "msg")
    s.close()


def test_commit_where_git_cannot_run_fails_clearly(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _git(workspace, "init", "-q")
    s = acode.open_session("t", workspace=workspace)
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))  # git is asked for first
    with pytest.raises(StepFailedError, match="not a git work tree"):
        s.commit("c", "msg")
    s.close()


def test_a_failing_commit_in_a_work_tree_says_what_git_said(workspace: Path) -> None:
    _git(workspace, "init", "-q")
    hook = workspace / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho refused by the hook >&2\nexit 1\n")
    hook.chmod(0o755)
    s = acode.open_session("t", workspace=workspace)
    with pytest.raises(StepFailedError, match="refused by the hook"):
        s.commit("c", "msg")
    s.close()


# -- approvals ---------------------------------------------------------------------


def test_an_approval_with_no_one_to_ask_waits_and_is_recorded(workspace: Path) -> None:
    s = acode.open_session("t", workspace=workspace)
    with pytest.raises(ApprovalPending):
        s.approve("ok", "Ship it?")
    s.close()
    assert _state(workspace, s.id) == "AWAITING_APPROVAL"

    asked: list[ApprovalRequest] = []

    def yes(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    with acode.resume_session(s.id, workspace=workspace, approver=yes) as r:
        assert r.approve("ok", "Ship it?") is True
    assert [a.question for a in asked] == ["Ship it?"]
    # A recorded decision stands: replaying never asks again.
    s2 = acode.open_session("again", workspace=workspace, approver=yes)
    s2.approve("ok", "Ship it?")
    s2.close()
    with acode.resume_session(s2.id, workspace=workspace, approver=None) as r:
        assert r.approve("ok", "Ship it?") is True
    assert len(asked) == 2


def test_a_forged_approval_is_refused(workspace: Path) -> None:
    from acode.operations.decide import decide_approval

    s = acode.open_session("t", workspace=workspace)
    with pytest.raises(ApprovalPending):
        s.approve("ok", "Deploy?")
    s.close()
    # Someone edits the database: decide with a different key than the user's.
    import os

    os.environ["ACODE_CHECKPOINT_SECRET"] = "attacker-key-0123456789"
    try:
        with pytest.raises(acode.AcodeError):
            decide_approval(s.id, workspace, approved=True)
    finally:
        del os.environ["ACODE_CHECKPOINT_SECRET"]
    assert _state(workspace, s.id) == "AWAITING_APPROVAL"


def test_an_approval_of_something_else_does_not_count(workspace: Path) -> None:
    from acode.operations.decide import decide_approval

    s = acode.open_session("t", workspace=workspace)
    with pytest.raises(ApprovalPending):
        s.approve("ok", "Run this?", subject={"command": "make deploy"})
    s.close()
    decide_approval(s.id, workspace, approved=True)
    r = acode.resume_session(s.id, workspace=workspace)
    with pytest.raises(ApprovalPending):  # the gated command changed: ask again
        r.approve("ok", "Run this?", subject={"command": "rm -rf /"})
    r.close()
    with acode.resume_session(s.id, workspace=workspace) as r:
        assert r.approve("ok", "Run this?", subject={"command": "make deploy"}) is True


@pytest.mark.parametrize(("answer", "rolled_back"), [("rollback", True), ("retry", False)])
def test_strategy_prompt_lets_the_person_choose(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, answer: str, rolled_back: bool
) -> None:
    sid = _interrupted_write(workspace, "two\n", monkeypatch)
    (workspace / "f.txt").write_text("garbage")
    asked: list[tuple[str, str]] = []

    def choose(step: str, kind: str) -> Any:
        asked.append((step, kind))
        return answer

    with acode.resume_session(
        sid, workspace=workspace, strategy="prompt", strategy_prompt=choose
    ) as r:
        r.write("w1", "f.txt", "one\n")
        r.write("w2", "f.txt", "two\n")
    assert asked == [("w2", "write")]
    store = _store(workspace)
    try:
        types = [e.type.value for e in store.events(store.session(sid))]
    finally:
        store.close()
    assert ("step_rolled_back" in types) is rolled_back
    assert (workspace / "f.txt").read_text() == "two\n"


def test_strategy_prompt_stop_pauses_the_session(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = _interrupted_write(workspace, "two\n", monkeypatch)
    (workspace / "f.txt").write_text("garbage")
    with pytest.raises(PauseRequested):
        with acode.resume_session(
            sid, workspace=workspace, strategy="prompt", strategy_prompt=lambda s, k: None
        ) as r:
            r.write("w1", "f.txt", "one\n")
            r.write("w2", "f.txt", "two\n")
    assert _state(workspace, sid) == "PAUSED"
    assert (workspace / "f.txt").read_text() == "garbage"


def _edit_first_result(ws: Path, payload_sql: str) -> None:
    """Rewrite the first completed step's stored payload (the triggers that refuse it
    dropped, as someone editing the database would)."""
    import sqlite3

    with sqlite3.connect(StatePaths(ws).db, isolation_level=None) as conn:
        conn.execute("DROP TRIGGER IF EXISTS events_are_append_only_update")
        seq = conn.execute("SELECT min(seq) FROM events WHERE type = 'step_completed'").fetchone()
        conn.execute(f"UPDATE events SET payload = {payload_sql} WHERE seq = ?", seq)


def _interrupted(ws: Path) -> str:
    s = acode.open_session("t", workspace=ws)
    for i in range(3):
        s.step(f"s{i}", lambda ctx: {"i": ctx.position, "ok": [True, None]})
    s.pause("test")
    s.close()
    return s.id


def test_a_payload_is_decoded_as_json_loads_would_decode_it() -> None:
    from acode.engine.replay import _object

    assert _object('{"i":0,"ok":[true,null]}') == {"i": 0, "ok": [True, None]}
    assert _object(' {"i": 0} ') == {"i": 0}  # not acode's canonical form: json.loads reads it


@pytest.mark.parametrize("payload", ["[1, 2]", '{"step": 1} {}', '{"step": '])
def test_a_payload_that_is_not_one_object_is_refused(payload: str) -> None:
    from acode.engine.replay import _object

    with pytest.raises(ValueError):  # noqa: PT011 (json's and acode's own messages alike)
        _object(payload)


@pytest.mark.parametrize("payload", ["' ' || payload || ' '", "'[1, 2]'", "payload || ' {}'"])
def test_an_edited_payload_never_reaches_the_replay(workspace: Path, payload: str) -> None:
    sid = _interrupted(workspace)
    _edit_first_result(workspace, payload)
    s = acode.resume_session(sid, workspace=workspace)  # it reads the newest events
    try:
        # The replay checks each event it reads: the edited one never reaches the caller,
        # and the session takes nothing more, even from a caller that goes on.
        for call in (
            lambda: s.step("s0", lambda ctx: None),
            lambda: s.step("other", lambda ctx: None),
            s.complete,
        ):
            with pytest.raises(acode.AcodeError, match=r"event 3 .* does not match its hash"):
                call()
        assert s.state.value == "EXECUTING"
    finally:
        s.close()


def test_a_replay_across_read_windows_returns_every_result(workspace: Path) -> None:
    from acode.engine import replay

    steps = replay.REPLAY_WINDOW * 2 + 3  # the history is read a window at a time
    config = workspace / ".agent" / "config.yml"
    config.parent.mkdir(parents=True)
    config.write_text("durability: normal\n", encoding="utf-8")  # quick to record
    s = acode.open_session("long", workspace=workspace)
    for i in range(steps):
        s.step(f"s{i}", lambda ctx: {"at": ctx.position})
    s.pause("test")
    s.close()

    ran: list[int] = []
    with acode.resume_session(s.id, workspace=workspace) as again:
        for i in range(steps):
            assert again.step(f"s{i}", lambda ctx: ran.append(ctx.position)) == {"at": i}
        again.step("new", lambda ctx: ran.append(ctx.position))
    assert ran == [steps]


def test_an_edit_in_a_later_window_stops_the_replay_there(workspace: Path) -> None:
    """The replay checks every window it reads, not just the first: the steps of the
    windows before the edited event are returned, the call that reaches the window
    holding it is refused (a window is checked whole when it is read), nothing runs."""
    import sqlite3

    from acode.engine import replay

    steps = replay.REPLAY_WINDOW + 20
    config = workspace / ".agent" / "config.yml"
    config.parent.mkdir(parents=True)
    config.write_text("durability: normal\n", encoding="utf-8")  # quick to record
    s = acode.open_session("long", workspace=workspace)
    for i in range(steps):
        s.step(f"s{i}", lambda ctx: {"at": ctx.position})
    s.pause("test")
    s.close()
    edited = steps - 10
    with sqlite3.connect(StatePaths(workspace).db, isolation_level=None) as conn:
        conn.execute("DROP TRIGGER IF EXISTS events_are_append_only_update")
        found = conn.execute(
            "SELECT seq FROM events WHERE payload LIKE ?", (f'%"step":"s{edited}"%',)
        ).fetchone()
        conn.execute(
            "UPDATE events SET payload = replace(payload, ?, ?) WHERE seq = ?",
            (f'"at":{edited}', '"at":0', found[0]),
        )

    ran: list[int] = []
    again = acode.resume_session(s.id, workspace=workspace)
    returned = 0
    try:
        with pytest.raises(acode.AcodeError, match=rf"event {found[0]} .* does not match"):
            for i in range(steps):
                assert again.step(f"s{i}", lambda ctx: ran.append(ctx.position)) == {"at": i}
                returned += 1
        assert replay.REPLAY_WINDOW - 10 < returned <= edited
        assert ran == []
    finally:
        again.close()


def _made_again(value: Any) -> Any:
    """``value`` made again by its constructor from the fields it holds: one left out when
    it was made (acode.domain.frozen), which would read as its class default, is a KeyError."""
    return type(value)(**{f.name: vars(value)[f.name] for f in dataclasses.fields(value)})


def test_the_values_a_step_makes_name_every_field(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[acode.StepContext] = []
    actions: list[Any] = []
    with acode.open_session("t", workspace=workspace) as s:
        steps = s._steps
        perform = steps.perform

        def keep(action: Any, *rest: Any) -> Any:
            actions.append(action)
            return perform(action, *rest)

        monkeypatch.setattr(steps, "perform", keep)
        s.step("a", seen.append, input={"n": 1})
        env = steps._env("b", StepKind.PYTHON, "task", 1, 2)
        events, _ = journal_of(s).build([(EventType.STEP_COMPLETED, {"step": "b", "position": 1})])
        summary = journal_of(s).summary
    for value in (*seen, *actions, env.ctx, *events, summary):
        assert _made_again(value) == value
