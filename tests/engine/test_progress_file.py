"""The progress file of real sessions: every section, redaction, rate limit, atomic writes."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import acode
from acode.domain.config import AcodeConfig, ModelSettings
from acode.domain.plan import Plan
from acode.engine.catalog import model_usage
from acode.engine.lifecycle import start_session
from acode.engine.progress_file import (
    CUT_AT,
    ProgressFile,
    iso_time,
    render_progress,
)
from acode.engine.session import journal_of
from acode.errors import StepFailedError
from acode.security.redaction import redact_json
from acode.store.sqlite.store import SqliteStore
from acode.system.files import TEMP_PREFIX
from acode.system.workspace import StatePaths
from tests.support.fake_openai import FakeOpenAI

TOKEN = "ghp_" + "A1b2C3d4E5" * 3 + "Zq9x8W"  # GitHub-token-shaped: ghp_ + 36 alnum
assert len(TOKEN) == 40

PLAN = Plan.from_dict(
    {
        "title": "Add input validation",
        "tasks": [
            {
                "id": "impl",
                "title": "Implement",
                "steps": [
                    {"id": "write-cfg", "write": "cfg.txt", "content": "x"},
                    {"id": "ask", "model": "Summarize"},
                    {"id": "tests", "run": "echo ok"},
                    {"id": "analyze", "python": "pkg.mod:check"},
                    {"id": "save", "commit": "Add validation"},
                ],
            }
        ],
    }
)


@pytest.fixture(autouse=True)
def signing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "progress-file-tests")


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def _config(fake: FakeOpenAI) -> AcodeConfig:
    return AcodeConfig(
        model=ModelSettings(base_url=fake.base_url, name="fake-model", temperature=0.7)
    )


def _render(session: acode.Session) -> str:
    journal = journal_of(session)
    assert journal.summary is not None
    return render_progress(
        journal.store, journal.row, journal.summary, now_us=1_751_294_122_000_000
    )


def _section(text: str, heading: str) -> str:
    """The body of one `## heading` section."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no section {heading!r} in\n{text}"
    return match.group(1)


def _run_three_steps(s: acode.Session, fake: FakeOpenAI) -> None:
    fake.script(["The change adds a validator."])
    s.write("write-cfg", "cfg.txt", "x")
    s.model("ask", "Summarize")
    s.run("tests", "for i in $(seq 1 30); do echo line $i; done")


def test_every_section_of_a_planned_session(workspace: Path, fake: FakeOpenAI) -> None:
    s = start_session("Add input validation", workspace, _config(fake), plan=PLAN)
    try:
        _run_three_steps(s, fake)
        text = _render(s)
    finally:
        s.close()

    assert text.startswith("# Session progress - Add input validation\n")
    assert [line[3:] for line in text.splitlines() if line.startswith("## ")] == [
        "Execution Metadata",
        "Configuration",
        "Conversation History",
        "Tool Results",
        "Execution State",
    ]
    meta = _section(text, "Execution Metadata")
    assert f"- **Session**: {s.id} (`{s.short_id}`)" in meta
    assert "- **Plan**: Add input validation" in meta
    assert re.search(r"- \*\*Started\*\*: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n", meta)
    assert re.search(r"- \*\*Last Checkpoint\*\*: \S+Z \(checkpoint \d+, event \d+\)", meta)
    assert "- **Status**: executing" in meta
    assert "- **Reason**: started" in meta
    assert f"- **Written**: {iso_time(1_751_294_122_000_000)}" in meta

    config = _section(text, "Configuration")
    assert config.strip() == "\n".join(
        [
            "```yaml",
            'model: "fake-model"',
            f'provider: "{fake.base_url}"',
            "temperature: 0.7",
            "max_tokens: 1024",
            'durability: "full"',
            "```",
        ]
    )

    history = _section(text, "Conversation History")
    assert "### Message 1 (User)\n\n```text\nSummarize\n```" in history
    assert "### Message 2 (Assistant)\n\n```text\nThe change adds a validator.\n```" in history

    results = _section(text, "Tool Results")
    assert results.count("```json\n") == 3
    assert '"step": "write-cfg"' in results
    assert '"kind": "model"' in results
    # A command shows its exit code and the last 20 lines of its output, no more.
    assert '"exit_code": 0' in results
    assert '"line 30"' in results
    assert '"line 11"' in results
    assert '"line 10"' not in results
    assert '"stdout_lines_not_shown": 10' in results
    assert re.search(r'"timestamp": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"', results)

    state = _section(text, "Execution State")
    assert "- Current step: 4 of 5 (`analyze`)" in state
    assert '- Completed: ["write-cfg", "ask", "tests"]' in state
    assert "- Failed: []" in state
    assert '- Pending: ["analyze", "save"]' in state
    assert "- Variables: {}" in state


def test_a_library_session_without_a_plan(workspace: Path) -> None:
    s = acode.open_session("ad hoc", workspace)
    try:
        s.step("one", lambda ctx: 1)
        text = _render(s)
    finally:
        s.close()
    assert "- **Plan**: none (steps are recorded as they run)" in text
    assert "_No messages yet._" in text
    assert "- Current step: 1 of unknown (`one`)" in text
    assert "- Pending: [] (no recorded plan: steps become known as they run)" in text


def test_a_failed_step_shows_its_error_and_the_failed_status(workspace: Path) -> None:
    s = start_session("t", workspace, plan=PLAN)
    try:
        s.write("write-cfg", "cfg.txt", "x")
        with pytest.raises(StepFailedError) as info:
            s.run("boom", "echo nope >&2; exit 3")
        s.fail(str(info.value))
        text = _render(s)
    finally:
        s.close()
    assert "- **Status**: failed" in text
    assert "- **Reason**: `echo nope >&2; exit 3` exited with status 3: nope" in text
    assert '"status": "failed"' in text
    assert '- Failed: ["boom"]' in text
    assert "- Current step: 2 of 5 (`boom`)" in text


def test_a_long_session_shows_its_newest_steps_and_every_unfinished_one(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rendering reads the newest steps backwards from the end, and the steps that did
    not complete from the `steps` table: what it shows does not grow with the history."""
    monkeypatch.setattr("acode.engine.progress_file.SHOWN_STEPS", 3)
    monkeypatch.setattr("acode.engine.progress_file.SHOWN_RESULTS", 3)
    s = acode.open_session("long", workspace)
    try:
        with pytest.raises(StepFailedError):
            s.step("early", lambda ctx: 1 / 0)
        for i in range(10):
            s.step(f"s{i}", lambda ctx: ctx.position)
        text = _render(s)
    finally:
        s.close()
    state = _section(text, "Execution State")
    assert '- Completed: 10 steps; the newest 3: ["s7", "s8", "s9"]' in state
    assert '- Failed: ["early"]' in state
    assert "- Current step: 11 of unknown (`s9`)" in state
    results = _section(text, "Tool Results")
    assert "_The results of the first 8 finished steps are not shown here;" in results
    assert re.findall(r'"step": "(\w+)"', results) == ["s7", "s8", "s9"]


def test_secrets_are_redacted_everywhere(workspace: Path, fake: FakeOpenAI) -> None:
    fake.script([f"Use {TOKEN} to push."])
    s = acode.open_session(f"push with {TOKEN}", workspace, _config(fake))
    try:
        s.step("lookup", lambda ctx: {"token": TOKEN, "password": "hunter2222", "n": 1})
        s.model("ask", f"Is {TOKEN} valid?")
        s.run("show", f"echo {TOKEN}; echo {TOKEN} >&2")
        with pytest.raises(StepFailedError):
            s.run("fail", f"echo {TOKEN} >&2; exit 1")
        s.fail(f"failed with {TOKEN}")
        text = _render(s)
    finally:
        s.close()
    assert TOKEN not in text
    assert TOKEN[:12] not in text
    assert "hunter2222" not in text
    # Masked, keeping the last four characters so two secrets can be told apart.
    assert text.count(f"***{TOKEN[-4:]}") >= 6


def test_long_text_is_cut_after_redaction(workspace: Path, fake: FakeOpenAI) -> None:
    # The token straddles the cut: cut first, and half a token would escape the redactor.
    prompt = "x" * (CUT_AT - 10) + " " + TOKEN + " " + "y" * 3000
    fake.script(["short"])
    s = acode.open_session("t", workspace, _config(fake))
    try:
        s.model("ask", prompt)
        s.step("big", lambda ctx: {"blob": "z" * 10_000})
        text = _render(s)
    finally:
        s.close()
    assert "ghp_" not in text
    assert "more characters not shown]" in text
    assert "z" * CUT_AT in text
    assert "z" * (CUT_AT + 1) not in text
    assert len(text) < 12_000


def test_backticks_in_a_message_cannot_close_its_block(workspace: Path, fake: FakeOpenAI) -> None:
    fake.script(["```\n## Not a heading\n```"])
    s = acode.open_session("t", workspace, _config(fake))
    try:
        s.model("ask", "Show code")
        text = _render(s)
    finally:
        s.close()
    assert "````text\n```\n## Not a heading\n```\n````" in text


def test_redact_json_masks_values_by_their_key() -> None:
    record = {"password": "hunter2222", "api_key": "abcd1234efgh", "n": 3, "note": "plain"}
    assert redact_json([record, TOKEN]) == [
        {"password": "***2222", "api_key": "***efgh", "n": 3, "note": "plain"},
        f"***{TOKEN[-4:]}",
    ]


def _progress(workspace: Path, **kwargs: float) -> ProgressFile:
    return ProgressFile(StatePaths(workspace.resolve()), **kwargs)


def test_updates_within_the_interval_write_once_unless_final(workspace: Path) -> None:
    progress = _progress(workspace)
    s = acode.open_session("t", workspace)
    try:
        target = progress.update(journal_of(s))
        assert target == progress.path(s.id)
        assert target == StatePaths(workspace.resolve()).session_dir(s.id) / "progress.md"
        s.step("one", lambda ctx: 1)
        # Within a second of its first write, this instance writes nothing (the session's
        # own ProgressFile, which also wrote after the step, is another instance).
        assert progress.update(journal_of(s)) is None
        assert progress.update(journal_of(s), final=True) == target
        assert '- Completed: ["one"]' in target.read_text()
    finally:
        s.close()


def test_an_update_after_the_interval_writes_again(workspace: Path) -> None:
    progress = _progress(workspace, min_interval_s=0.05, max_share=1.0)
    s = acode.open_session("t", workspace)
    try:
        assert progress.update(journal_of(s)) is not None
        s.step("one", lambda ctx: 1)
        time.sleep(0.06)
        target = progress.update(journal_of(s))
        assert target is not None
        progress.flush()
        assert '- Completed: ["one"]' in target.read_text()
    finally:
        s.close()


def test_writes_are_atomic_and_leave_no_temporary_files(workspace: Path) -> None:
    progress = _progress(workspace, min_interval_s=0, max_share=1.0)
    s = acode.open_session("t", workspace)
    try:
        for i in range(5):
            s.step(f"s{i}", lambda ctx: ctx.step_id)
            assert progress.update(journal_of(s)) is not None
            progress.flush()
        s.pause("interrupted")
        target = progress.update(journal_of(s), final=True)
    finally:
        s.close()
    assert target is not None
    assert sorted(os.listdir(target.parent)) == ["progress.md"]
    assert not any(name.startswith(TEMP_PREFIX) for name in os.listdir(target.parent))
    text = target.read_text()
    assert "- **Status**: paused" in text
    assert "- **Reason**: interrupted" in text


def test_one_write_is_in_flight_at_most_and_a_final_update_waits_for_it(
    workspace: Path,
) -> None:
    progress = _progress(workspace, min_interval_s=0, max_share=1.0)
    s = acode.open_session("t", workspace)
    try:
        s.step("one", lambda ctx: 1)
        target = progress.update(journal_of(s))
        assert target is not None
        # Unless its write ended at once, the next update is skipped rather than queued.
        skipped = progress.update(journal_of(s)) is None
        s.step("two", lambda ctx: 2)
        # The session's own writer of the same file, whose write of step one's state
        # could otherwise land after this instance's final one (seen once under load).
        s._progress.flush()
        assert progress.update(journal_of(s), final=True) == target
        assert '- Completed: ["one", "two"]' in target.read_text()
        assert skipped or not progress._writing()
    finally:
        s.close()


def test_a_closed_session_leaves_its_newest_progress_on_disk(workspace: Path) -> None:
    s = acode.open_session("t", workspace)
    s.step("one", lambda ctx: 1)
    s.close()
    path = StatePaths(workspace.resolve()).session_dir(s.id) / "progress.md"
    assert sorted(os.listdir(path.parent)) == ["progress.md"]
    assert '- Completed: ["one"]' in path.read_text()


def test_a_defect_in_the_background_write_is_raised_on_the_callers_side(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acode.engine import progress_file

    progress = _progress(workspace)
    s = acode.open_session("t", workspace)
    try:

        def broken(path: Path, data: bytes, **kwargs: object) -> None:
            raise RuntimeError("a bug in the writer")

        monkeypatch.setattr(progress_file, "atomic_write", broken)
        assert progress.update(journal_of(s)) is not None
        with pytest.raises(RuntimeError, match="a bug in the writer"):
            progress.flush()
        progress.flush()  # reported once
    finally:
        monkeypatch.undo()
        s.close()


def test_a_failing_write_returns_none_and_the_session_runs_on(workspace: Path) -> None:
    progress = _progress(workspace)
    s = acode.open_session("t", workspace)
    try:
        # A file where the sessions directory should be: every write fails with an OSError.
        (StatePaths(workspace.resolve()).state_dir / "sessions").write_text("in the way")
        assert progress.update(journal_of(s), final=True) is None
        assert s.step("after", lambda ctx: 2) == 2
    finally:
        s.close()


def test_a_payload_an_older_acode_wrote_with_nan_does_not_stop_the_rendering(
    workspace: Path,
) -> None:
    """An earlier acode recorded a python step's NaN as Python's json writes it,
    which SQLite's JSON functions refuse: the model usage must read past it."""
    s = acode.open_session("t", workspace=workspace)
    s.step("a", lambda ctx: {"n": 1})
    store = journal_of(s).store
    assert isinstance(store, SqliteStore)
    store.conn.execute(
        "INSERT INTO events SELECT id + 1, sid, seq + 1, event_id, ts + 1, type,"
        " replace(payload, '\"n\":1', '\"n\":NaN'), hash, NULL, NULL"
        " FROM events WHERE id = (SELECT max(id) FROM events)"
    )
    assert "## Execution State" in _render(s)
    s.close()


def test_the_model_usage_line_adds_up_every_call_across_updates(
    workspace: Path, fake: FakeOpenAI
) -> None:
    """Each update adds the calls since the one before to a running total."""
    progress = _progress(workspace, min_interval_s=0, max_share=1.0)
    s = acode.open_session("t", workspace, _config(fake))
    try:
        for i in range(3):
            s.model(f"ask{i}", f"question {i}")
            s.step(f"py{i}", lambda ctx: 1)
            target = progress.update(journal_of(s))
            assert target is not None
            progress.flush()
            whole = model_usage(journal_of(s).store, journal_of(s).row)
            assert whole.calls == i + 1
            assert (
                f"- **Model Usage**: {whole.calls} calls, {whole.prompt_tokens} prompt + "
                f"{whole.completion_tokens} completion tokens"
            ) in target.read_text()
    finally:
        s.close()
