"""What a write killed before its rename leaves in the session's staging directory
(``.agent/state/tmp/<session>``) is removed when the session is resumed."""

from __future__ import annotations

from pathlib import Path

import acode
from acode.system.workspace import StatePaths


def _paused_session(workspace: Path) -> str:
    with acode.open_session("t", workspace=workspace) as s:
        s.write("w", "a.txt", "one\n")
        s.pause("test")
        return s.id


def test_resume_removes_what_a_killed_write_staged(workspace: Path) -> None:
    session_id = _paused_session(workspace)
    staged = StatePaths(workspace).temp_dir(session_id)
    (staged / "nested").mkdir(parents=True, exist_ok=True)
    (staged / ".a.txt.tmp123").write_bytes(b"half a file")
    (staged / "nested" / "b").write_bytes(b"x")

    with acode.resume_session(session_id, workspace=workspace) as s:
        assert not staged.exists()
        s.write("w", "a.txt", "one\n")
        s.write("w2", "b.txt", "two\n")
    assert (workspace / "b.txt").read_text() == "two\n"


def test_resume_with_nothing_staged(workspace: Path) -> None:
    session_id = _paused_session(workspace)
    staged = StatePaths(workspace).temp_dir(session_id)
    if staged.exists():
        staged.rmdir()  # a finished write leaves the directory empty, at most

    with acode.resume_session(session_id, workspace=workspace) as s:
        s.write("w", "a.txt", "one\n")
        s.write("w2", "b.txt", "two\n")
    assert (workspace / "b.txt").read_text() == "two\n"


def _staged_write(session: acode.Session, workspace: Path) -> Path:
    session.write("w", "a.txt", "one\n")
    staged = StatePaths(workspace).temp_dir(session.id)
    assert staged.is_dir()  # a write stages there
    return staged


def test_a_completed_session_leaves_no_staging_folder(workspace: Path) -> None:
    with acode.open_session("t", workspace=workspace) as s:
        staged = _staged_write(s, workspace)
    assert not staged.exists()


def test_a_failed_or_cancelled_session_leaves_no_staging_folder(workspace: Path) -> None:
    for end in ("fail", "cancel"):
        with acode.open_session(end, workspace=workspace) as s:
            staged = _staged_write(s, workspace)
            getattr(s, end)("test")
            assert not staged.exists()


def test_a_paused_session_keeps_its_staging_folder(workspace: Path) -> None:
    session_id = _paused_session(workspace)
    assert StatePaths(workspace).temp_dir(session_id).is_dir()


def test_a_discarded_session_leaves_no_staging_folder(workspace: Path) -> None:
    from acode.operations.maintenance import discard_session

    session_id = _paused_session(workspace)
    discard_session(workspace, session_id)
    assert not StatePaths(workspace).temp_dir(session_id).exists()


def test_the_next_session_tidies_the_empty_folders_of_ended_sessions(workspace: Path) -> None:
    paths = StatePaths(workspace)
    with acode.open_session("done", workspace=workspace) as s:
        done = s.id
    paused = _paused_session(workspace)
    with acode.open_session("done too", workspace=workspace) as s:
        left_full = s.id
    # As versions before this one left them, and a kill after the end does.
    paths.temp_dir(done).mkdir(parents=True)
    paths.temp_dir(left_full).mkdir(parents=True)
    (paths.temp_dir(left_full) / "debris").write_bytes(b"x")
    stranger = paths.temp_dir("not-a-session")
    stranger.mkdir()

    with acode.open_session("next", workspace=workspace):
        pass

    assert not paths.temp_dir(done).exists()
    assert paths.temp_dir(paused).is_dir()  # it may resume: its folder is evidence
    assert (paths.temp_dir(left_full) / "debris").exists()  # only empty ones are tidied
    assert stranger.is_dir()
