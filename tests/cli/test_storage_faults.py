"""A database that stops taking writes mid-run, as on a full disk: the session pauses,
resumable, with a coded error saying what to do, and `acode resume` completes it once
the database can be written again. The fault is real: the acode process runs under a
file size limit (RLIMIT_FSIZE; Python ignores SIGXFSZ, so a write past it fails with
EFBIG, which SQLite reports as a disk I/O error)."""

from __future__ import annotations

import resource
import subprocess

from tests.cli.conftest import ACODE, Cli

# Room for the database and its log at the start, not for the big step's result.
LIMIT = 2_000_000


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def _run_limited(acode: Cli) -> subprocess.CompletedProcess[str]:
    """`acode run plan.yml` under the file size limit."""
    return subprocess.run(
        [ACODE, "run", "plan.yml"],
        cwd=acode.workspace,
        env=acode.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=_limited,  # one system call in the child, no lock to take
    )


def test_a_database_that_refuses_writes_pauses_the_session_and_resume_completes_it(
    acode: Cli,
) -> None:
    (acode.workspace / "big.bin").write_bytes(bytes(range(256)) * 12_000)
    acode.write(
        "bigread.py",
        "import pathlib\n\ndef go(ctx):\n    return pathlib.Path('big.bin').read_bytes().hex()\n",
    )
    acode.write(
        "plan.yml",
        "title: Big read\ntasks:\n  - id: main\n    title: Main\n    steps:\n"
        "      - {id: small, write: small.txt, content: hello}\n"
        "      - {id: big, python: 'bigread:go'}\n"
        "      - {id: after, write: after.txt, content: bye}\n",
    )
    done = _run_limited(acode)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "internal error" not in done.stderr
    err = " ".join(done.stderr.split())
    assert "cannot write to the acode database" in err
    short = acode.sessions()[0]["short_id"]
    assert f"Stopped session {short} (ACODE-DB-001): cannot write to the acode database" in err
    assert f"Once the cause is gone, resume with: acode resume {short}" in err
    status = acode.status(short)
    assert status["state"] == "PAUSED"
    assert status["steps_completed"] == 1

    resumed = acode("resume", short)
    assert f"Session {short} completed: 3 steps done." in resumed.out
    assert (acode.workspace / "after.txt").read_text() == "bye"


def test_a_step_that_meets_a_full_disk_pauses_the_session_and_resume_completes_it(
    acode: Cli,
) -> None:
    acode.write(
        "bigwrite.py",
        "import pathlib\n\ndef go(ctx):\n"
        "    pathlib.Path('big.bin').write_bytes(b'x' * 3_000_000)\n    return 'written'\n",
    )
    acode.write(
        "plan.yml",
        "title: Big write\ntasks:\n  - id: main\n    title: Main\n    steps:\n"
        "      - {id: small, write: small.txt, content: hello}\n"
        "      - {id: big, python: 'bigwrite:go'}\n",
    )
    done = _run_limited(acode)
    assert done.returncode == 1, done.stderr
    err = " ".join(done.stderr.split())
    short = acode.sessions()[0]["short_id"]
    assert f"Stopped session {short} (ACODE-ENV-001): step 'big' could not finish" in err
    assert acode.status(short)["state"] == "PAUSED"

    acode("resume", short)
    assert (acode.workspace / "big.bin").stat().st_size == 3_000_000
    assert acode.status(short)["state"] == "COMPLETED"
