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
