"""Environment validation before resume: changed files, configuration, the model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import acode
from acode.domain.config import AcodeConfig, ModelSettings
from acode.errors import EnvironmentValidationError
from acode.resume.environment import Change
from acode.resume.service import ResumePreview, preview_resume
from tests.support.fake_openai import FakeOpenAI


def _session_with_files(ws: Path) -> str:
    (ws / "kept.txt").write_text("kept\n")
    s = acode.open_session("t", workspace=ws)
    s.write("w", "written.txt", "mine\n")
    s.read("r", "kept.txt")
    s.write("w2", "doomed.txt", "bye\n")
    s.pause("test")
    s.close()
    return s.id


def test_an_untouched_workspace_is_valid(workspace: Path) -> None:
    sid = _session_with_files(workspace)
    preview = preview_resume(sid, workspace)
    assert preview.environment is not None
    assert preview.environment.valid
    assert preview.environment.files_checked == 3
    acode.resume_session(sid, workspace=workspace).close()


def test_modified_deleted_and_recreated_files_are_reported(workspace: Path) -> None:
    sid = _session_with_files(workspace)
    (workspace / "written.txt").write_text("someone else\n")
    (workspace / "doomed.txt").unlink()
    preview = preview_resume(sid, workspace)
    assert preview.environment is not None
    changes = {c.path: c.change for c in preview.environment.changed}
    assert changes == {"written.txt": Change.MODIFIED, "doomed.txt": Change.DELETED}
    assert preview.log_record()["environment_valid"] is False


def test_a_touched_but_identical_file_is_not_a_change(workspace: Path) -> None:
    sid = _session_with_files(workspace)
    os.utime(workspace / "written.txt", (1, 1))  # new mtime, same content: hashed, equal
    preview = preview_resume(sid, workspace)
    assert preview.environment is not None
    assert preview.environment.changed == ()


def test_changed_files_abort_by_default_without_anyone_to_ask(workspace: Path) -> None:
    sid = _session_with_files(workspace)
    (workspace / "written.txt").write_text("someone else\n")
    with pytest.raises(EnvironmentValidationError, match=r"written\.txt \(Modified\)") as info:
        acode.resume_session(sid, workspace=workspace)
    assert info.value.exit_code == 17
    # Nothing was written: the session is exactly as it was.
    assert preview_resume(sid, workspace).summary.resumes == 0


def test_the_person_may_continue_or_abort(workspace: Path) -> None:
    sid = _session_with_files(workspace)
    (workspace / "written.txt").write_text("someone else\n")
    seen: list[ResumePreview] = []

    def no(preview: ResumePreview) -> bool:
        seen.append(preview)
        return False

    with pytest.raises(EnvironmentValidationError):
        acode.resume_session(sid, workspace=workspace, ask_about_changes=no)
    assert len(seen) == 1
    acode.resume_session(sid, workspace=workspace, ask_about_changes=lambda p: True).close()


def test_continue_action_proceeds(workspace: Path) -> None:
    sid = _session_with_files(workspace)
    (workspace / "written.txt").write_text("someone else\n")
    acode.resume_session(sid, workspace=workspace, changed_files_action="continue").close()


def test_a_changed_configuration_is_refused_unless_forced(workspace: Path) -> None:
    sid = _session_with_files(workspace)
    (workspace / ".agent" / "config.yml").write_text("run:\n  default_timeout_seconds: 5\n")
    with pytest.raises(EnvironmentValidationError, match=r"run\.default_timeout_seconds"):
        acode.resume_session(sid, workspace=workspace)
    with acode.resume_session(sid, workspace=workspace, force=True) as r:
        assert r.config.run.default_timeout_seconds == 5


def test_an_unavailable_model_is_reported_before_anything_runs(workspace: Path) -> None:
    with FakeOpenAI(models=["other-model"]) as fake:
        config = AcodeConfig(model=ModelSettings(base_url=fake.base_url, name="fake-model"))
        s = acode.open_session("t", workspace=workspace, config=config)
        fake.script(["hi"])
        s.model("m", "hello")  # the session talks to a model
        s.pause("test")
        s.close()
        with pytest.raises(EnvironmentValidationError, match="ollama pull fake-model"):
            acode.resume_session(s.id, workspace=workspace)


def test_ten_thousand_unchanged_files_are_checked_by_stat_alone(workspace: Path) -> None:
    from acode.resume.environment import changed_files
    from acode.store.records import FileRow

    rows = []
    for i in range(2000):
        path = workspace / f"f{i}.txt"
        path.write_text("x")
        st = path.stat()
        # A wrong hash proves no file was read: unchanged stat data is trusted.
        rows.append(
            FileRow(path.name, "0" * 64, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        )
    checked, changed = changed_files(workspace, rows)
    assert (len(checked), changed) == (2000, [])


def test_a_row_without_change_time_and_inode_is_hashed(workspace: Path) -> None:
    """Rows recorded before schema 7 hold size and mtime only: not enough to trust."""
    from acode.resume.environment import Change, changed_files
    from acode.store.records import FileRow
    from acode.system.files import sha256_bytes

    (workspace / "same.txt").write_text("same\n")
    (workspace / "other.txt").write_text("bbbb\n")
    rows = []
    for name, recorded in (("same.txt", b"same\n"), ("other.txt", b"aaaa\n")):
        st = (workspace / name).stat()
        rows.append(FileRow(name, sha256_bytes(recorded), st.st_size, st.st_mtime_ns))
    _, changed = changed_files(workspace, rows)
    assert [(c.path, c.change) for c in changed] == [("other.txt", Change.MODIFIED)]


def test_every_resume_attempt_is_logged_redacted(workspace: Path) -> None:
    import json

    sid = _session_with_files(workspace)
    (workspace / "written.txt").write_text("token: ghp_" + "a" * 36 + "\n")
    with pytest.raises(EnvironmentValidationError):
        acode.resume_session(sid, workspace=workspace)
    acode.resume_session(sid, workspace=workspace, changed_files_action="continue").close()
    log = workspace / ".agent" / "state" / "logs" / "acode.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["event"] for r in records] == ["resume_refused", "session_resume"]
    assert records[0]["code"] == "ACODE-RESUME-004"
    resumed = records[1]
    for key in (
        "session_id",
        "checkpoint_id",
        "skipped_tasks",
        "skipped_steps",
        "remaining_steps",
        "in_progress_action",
        "sync_status",
        "environment_valid",
    ):
        assert key in resumed
    assert resumed["environment_valid"] is False
    assert "ghp_" + "a" * 36 not in log.read_text()


def test_the_steps_that_touched_files_are_found_for_any_number_of_paths(
    workspace: Path,
) -> None:
    """Which step last recorded each file, this session's or another's since a moment:
    asked for more changed paths than SQLite takes parameters in one statement."""
    import sqlite3

    from acode.store.sqlite.store import SqliteStore
    from acode.system.workspace import StatePaths

    first = _session_with_files(workspace)
    other = acode.open_session("other", workspace=workspace)
    other.write("again", "written.txt", "theirs\n")
    other.close()
    store = SqliteStore.open(StatePaths(workspace).db)
    try:
        limit = store.conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        paths = [f"missing/{n}.txt" for n in range(limit)] + ["written.txt", "kept.txt"]
        (row,) = [r for r in store.sessions() if r.id == first]
        own = {t.path: (t.step, t.kind, t.position) for t in store.touches(row.sid, paths)}
        since = store.touches_since(row.sid, paths, 0)
    finally:
        store.close()

    assert own == {"written.txt": ("w", "write", 0), "kept.txt": ("r", "read", 1)}
    assert [(t.session_id, t.path, t.step) for t in since] == [(other.id, "written.txt", "again")]
