"""A full disk, a read-only file system, a name too long: the environment's faults, not
the step's. The step is not recorded as failed, the session stays resumable, and once
the cause is gone a resume runs the step again and completes the session."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import acode
from acode.domain.reducer import StepStatus
from tests.support.recorded import step_statuses

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("number", "code"),
    [
        (errno.ENOSPC, "ACODE-ENV-001"),
        (errno.EDQUOT, "ACODE-ENV-001"),
        (errno.EROFS, "ACODE-ENV-002"),
        (errno.ENAMETOOLONG, "ACODE-ENV-003"),
    ],
)
def test_the_environments_fault_leaves_the_step_for_resume(
    workspace: Path, number: int, code: str
) -> None:
    def full(ctx: acode.StepContext) -> None:
        raise OSError(number, os.strerror(number), "out.bin")

    s = acode.open_session("t", workspace=workspace)
    with pytest.raises(acode.AcodeError) as fault:
        s.step("big", full)
    s.close()
    assert fault.value.code.value == code
    assert "step 'big' could not finish" in fault.value.message
    assert "acode resume" in (fault.value.hint or "")
    assert step_statuses(workspace, s.id) == []  # no outcome: the step runs again
    with acode.resume_session(s.id, workspace) as r:
        assert r.step("big", lambda ctx: "written") == "written"
    assert step_statuses(workspace, s.id) == [("big", StepStatus.COMPLETED)]


def test_a_write_step_that_meets_a_file_size_limit_is_written_on_resume(
    workspace: Path,
) -> None:
    """A real fault: the process may not write a file past 1 MB (RLIMIT_FSIZE; Python
    ignores SIGXFSZ, so the write fails with EFBIG). The content compresses well, so the
    database, which keeps it, stays far below the limit while the workspace file cannot."""
    script = textwrap.dedent(
        """
        import resource, sys
        import acode
        s = acode.open_session("t", workspace=sys.argv[1])
        print(s.id, flush=True)
        s.write("small", "small.txt", "hello")
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))
        try:
            s.write("big", "big.txt", b"x" * 2_000_000)
        except acode.AcodeError as exc:
            print(exc.code.value, flush=True)
        s.close()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(workspace)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    session_id, code = done.stdout.split()
    assert code == "ACODE-ENV-001"
    assert not (workspace / "big.txt").exists()
    assert step_statuses(workspace, session_id) == [
        ("small", StepStatus.COMPLETED),
        ("big", StepStatus.IN_PROGRESS),
    ]
    with acode.resume_session(session_id, workspace) as r:
        r.write("small", "small.txt", "hello")
        assert r.write("big", "big.txt", b"x" * 2_000_000)["size"] == 2_000_000
    assert (workspace / "big.txt").stat().st_size == 2_000_000
    assert step_statuses(workspace, session_id) == [
        ("small", StepStatus.COMPLETED),
        ("big", StepStatus.COMPLETED),
    ]
