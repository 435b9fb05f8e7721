"""`acode session archive` and `acode session import` as a person runs them: sessions of
each kind archived, brought into a fresh clone and archived again byte for byte; a
stopped session imported resumes; a killed archive leaves no file; refusals say why."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.agent.scenario import TASK, rules, start_repository
from tests.cli.conftest import (
    Background,
    Cli,
    plan_yaml,
    session_count,
    step_started,
    wait_for,
)
from tests.support.fake_openai import FakeOpenAI
from tests.support.session_rows import session_rows

__all__: list[str] = []

PLAN = plan_yaml(
    "Add input validation",
    '{id: validator, write: src/validators.py, content: "def is_email(s):\\n    return True\\n"}',
    '{id: use-it, edit: login.py, old: "def login(user):", new: "def login(user: str):"}',
    "{id: log, run: echo done >> build.log, paths: [build.log]}",
    "{id: save, commit: Add email validation}",
)


def git_repository(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "login.py").write_text("def login(user):\n    return user\n")
    subprocess.run(["git", "-C", str(path), "add", "."], check=True)
    subprocess.run(["git", "-C", str(path), "commit", "-qm", "start"], check=True)
    return path


@pytest.fixture
def clone(tmp_path: Path, acode: Cli) -> Cli:
    """acode in another, empty directory: a fresh clone with the same key."""
    return Cli(tmp_path / "clone", acode.env, Background())


def round_trip(acode: Cli, clone: Cli, session_id: str, tmp_path: Path) -> None:
    first, second = tmp_path / "first.acode.gz", tmp_path / "second.acode.gz"
    done = acode("session", "archive", session_id[:13], "-o", str(first), "--json").json()
    assert done["id"] == session_id
    assert done["bytes"] == first.stat().st_size
    clone.workspace.mkdir(exist_ok=True)
    imported = clone("session", "import", str(first), "--json").json()
    assert imported == {
        "id": session_id,
        "state": done["state"],
        "imported": True,
        "file": str(first),
        "counts": done["counts"],
    }
    clone("session", "archive", session_id, "-o", str(second))
    assert second.read_bytes() == first.read_bytes()
    assert session_rows(clone.workspace, session_id) == session_rows(acode.workspace, session_id)
    shown = clone("session", "show", session_id, "--json").json()
    assert shown["state"] == done["state"]
    history = clone("session", "history", session_id, "--json").json()
    assert len(history) == done["counts"]["events"]


def test_a_plan_session_round_trips(acode: Cli, clone: Cli, tmp_path: Path) -> None:
    git_repository(acode.workspace)
    acode.write("plan.yml", PLAN)
    acode("run", "plan.yml")
    [session] = acode.sessions()
    round_trip(acode, clone, session["id"], tmp_path)
    text = acode("session", "archive", session["id"][:8], "-o", str(tmp_path / "t.gz")).out
    assert "unredacted" in text


def test_an_agent_session_round_trips(acode: Cli, clone: Cli, tmp_path: Path) -> None:
    start_repository(acode.workspace)
    with FakeOpenAI() as fake:
        fake.converse(rules())
        acode.write(
            ".agent/config.yml", f"model:\n  base_url: {fake.base_url}\n  name: fake-model\n"
        )
        acode("run", TASK)
    [session] = acode.sessions()
    round_trip(acode, clone, session["id"], tmp_path)


def test_a_killed_session_imported_into_a_clone_resumes_there(
    acode: Cli, clone: Cli, tmp_path: Path
) -> None:
    git_repository(acode.workspace)
    pids = acode.watch_pids("pids")
    acode.write(
        "plan.yml",
        plan_yaml(
            "Slow plan",
            '{id: one, write: a.txt, content: "one\\n"}',
            # Sleeps until killed here; in the clone, `go` lets it through.
            "{id: nap, run: 'echo $$ >> pids; test -f go || exec sleep 30', idempotent: true}",
            '{id: two, write: b.txt, content: "two\\n"}',
        ),
    )
    running = acode.start("run", "plan.yml")
    step_started(acode, running, pids)
    [session] = acode.sessions()
    archive = tmp_path / "s.acode.gz"
    # Its history still moves: refused while the process runs.
    refusal = acode("session", "archive", session["id"], "-o", str(archive), expect=16)
    assert "ACODE-LOCK" in refusal.err or "ACODE-RESUME-003" in refusal.err
    assert not archive.exists()
    os.killpg(running.pid, signal.SIGKILL)
    running.proc.wait(10)
    acode("session", "archive", session["id"], "-o", str(archive))

    # The clone: the same files as the workspace the kill left.
    shutil.copytree(acode.workspace, clone.workspace, ignore=shutil.ignore_patterns(".agent"))
    clone("session", "import", str(archive))
    (clone.workspace / "go").write_text("")
    verified = clone("resume", "--dry-run", "--verify", session["id"])
    assert "Would resume session" in verified.out  # every event verified from the first
    clone("resume", session["id"], "--mode", "autopilot", timeout=60)
    assert (clone.workspace / "b.txt").read_text() == "two\n"
    assert clone.status(session["id"])["state"] == "COMPLETED"


def test_a_killed_archive_leaves_no_file(
    acode: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import acode as library

    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", acode.env["ACODE_CHECKPOINT_SECRET"])
    # Random bytes do not compress: writing them out takes long enough to be killed in.
    with library.open_session("big", acode.workspace) as s:
        for n in range(8):
            s.write(f"w{n}", f"big{n}.bin", os.urandom(8 << 20))
        session_id = s.id
    archive = tmp_path / "out" / "big.acode.gz"
    archive.parent.mkdir()
    archiving = acode.start("session", "archive", session_id, "-o", str(archive))
    wait_for(
        "the archive's temporary file",
        lambda: (
            any(p.name.startswith(".acode-tmp-") for p in archive.parent.iterdir())
            or running_done(archiving.proc)
        ),
        timeout=60,
    )
    if running_done(archiving.proc):
        ended = acode.finish(archiving, expect=None)
        raise AssertionError(f"the archive ended before the kill\n{ended.describe()}")
    os.kill(archiving.pid, signal.SIGKILL)
    archiving.proc.wait(10)
    assert not archive.exists()
    # Again, whole: the lock the killed one held went with it.
    acode("session", "archive", session_id, "-o", str(archive), timeout=120)
    assert archive.exists()


def running_done(proc: subprocess.Popen[str]) -> bool:
    return proc.poll() is not None


@pytest.fixture
def archived(acode: Cli, tmp_path: Path) -> tuple[str, Path]:
    git_repository(acode.workspace)
    acode.write("plan.yml", PLAN)
    acode("run", "plan.yml")
    [session] = acode.sessions()
    path = tmp_path / "s.acode.gz"
    acode("session", "archive", session["id"], "-o", str(path))
    return session["id"], path


def test_refusals_say_what_to_do_and_import_nothing(
    archived: tuple[str, Path], clone: Cli, tmp_path: Path
) -> None:
    session_id, path = archived
    clone.workspace.mkdir()
    lines = gzip.decompress(path.read_bytes()).splitlines(keepends=True)

    event = next(i for i, line in enumerate(lines) if b'"t":"event"' in line)
    record = json.loads(lines[event])
    record["payload"] = record["payload"].replace("Add", "Adx")
    changed = [*lines[:event], json.dumps(record).encode() + b"\n", *lines[event + 1 :]]
    tampered = tmp_path / "tampered.gz"
    tampered.write_bytes(gzip.compress(b"".join(changed)))
    refusal = clone("session", "import", str(tampered), expect=1)
    assert "ACODE-ARCHIVE-003" in refusal.err
    assert "changed after it was made" in refusal.flat_err

    cut = tmp_path / "cut.gz"
    cut.write_bytes(path.read_bytes()[:-40])
    assert "ACODE-ARCHIVE-001" in clone("session", "import", str(cut), expect=1).err
    assert "ACODE-ARCHIVE-001" in clone("session", "import", str(tmp_path), expect=1).err

    other = {**clone.env, "ACODE_CHECKPOINT_SECRET": "another machine"}
    refusal = clone("session", "import", str(path), env=other, expect=1)
    assert "ACODE-ARCHIVE-004" in refusal.err
    assert "both machines need the same key" in refusal.flat_err
    assert session_count(clone.workspace) == 0

    clone("session", "import", str(path))
    again = clone("session", "import", str(path))
    assert "is here already, identical" in again.flat_out
    assert session_count(clone.workspace) == 1
    assert clone.sessions()[0]["id"] == session_id


def test_archive_refusals(archived: tuple[str, Path], acode: Cli, tmp_path: Path) -> None:
    session_id, path = archived
    exists = acode("session", "archive", session_id, "-o", str(path), expect=2)
    assert "--force" in exists.err
    acode("session", "archive", session_id, "-o", str(path), "--force")
    assert (
        "an archive is a gzip file"
        in acode("session", "archive", session_id, "-o", "-", expect=2).flat_err
    )
    nowhere = acode("session", "archive", session_id, "-o", str(tmp_path / "no" / "f.gz"), expect=2)
    assert "cannot be written" in nowhere.flat_err
    inside = acode("session", "archive", session_id, "-o", ".agent/state/a.gz", expect=2)
    assert "state directory" in inside.flat_err
    acode("session", "archive", "0000", "-o", str(tmp_path / "x.gz"), expect=1)


def test_imports_at_once_import_it_once(archived: tuple[str, Path], clone: Cli) -> None:
    session_id, path = archived
    clone.workspace.mkdir()
    done = clone.many([["session", "import", str(path), "--json"]] * 3)
    assert sorted(r.json()["imported"] for r in done) == [False, False, True]
    assert session_count(clone.workspace) == 1
    assert clone.sessions()[0]["id"] == session_id


def test_work_session_ledgers_round_trip(acode: Cli, clone: Cli, tmp_path: Path) -> None:
    acode.workspace.mkdir(exist_ok=True)
    acode("settings", "set", "ai_stacking_mode", "handsoff")  # acode records, no engine runs
    acode("task", "add", "Implement feature X")
    cookie = acode("work", "task", "task-001", "--json").json()["cookie"]
    acode("wsession", "breadcrumb", "add", "--cookie", cookie, "--message", "Found validate")
    ledgers = acode("session", "list", "--all", "--json").json()
    assert len(ledgers) >= 2  # the tasks' ledger and the work session's
    for n, ledger in enumerate(ledgers):
        (tmp_path / str(n)).mkdir()
        round_trip(acode, clone, ledger["id"], tmp_path / str(n))


def _peak_kib(env: dict[str, str], cwd: Path, *args: str) -> tuple[int, str]:
    """acode run with ``args`` in a process of its own: the peak resident memory of it
    (KiB) and its standard error."""
    import sys

    from tests.cli.conftest import ACODE

    probe = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "print(done.returncode)\n"
        "print(done.stderr)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe, ACODE, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    peak, code, err = ran.stdout.split("\n", 2)
    assert int(code) == 1, err
    return int(peak), err


def test_a_gzip_bomb_costs_one_line_of_memory(acode: Cli, tmp_path: Path) -> None:
    """A small file that decompresses to 600 MiB of lines, or to one line of 600 MiB, is
    refused without holding it: the MAC is checked a line at a time, and a line longer
    than 64 MiB is refused unread (reading those 64 MiB costs about twice that)."""
    from acode.security.signing import Signer

    acode.workspace.mkdir(exist_ok=True)
    secret = acode.env["ACODE_CHECKPOINT_SECRET"].encode()
    header = {
        "t": "archive",
        "format": "acode-archive",
        "v": 1,
        "acode": "0.1.0",
        "schema": 7,
        "session": "01a21bd1-1bc5-7d19-a38b-ffd2202267fd",
        "key_id": Signer(secret).key_id,  # this machine's: the file is read through
        "counts": {},
    }
    first = json.dumps(header).encode() + b"\n"
    many, long = tmp_path / "many.gz", tmp_path / "long.gz"
    chunk = b'{"t":"chunk","data":"' + b"A" * (1 << 20) + b'"}\n'
    with gzip.open(many, "wb", compresslevel=1) as out:
        out.write(first)
        for _ in range(600):
            out.write(chunk)
        out.write(b'{"t":"mac","mac":"00"}\n')
    with gzip.open(long, "wb", compresslevel=1) as out:
        out.write(first + b'{"t":"chunk","data":"')
        for _ in range(600):
            out.write(b"A" * (1 << 20))
    assert many.stat().st_size + long.stat().st_size < 16 << 20
    for bomb, problem in ((many, "ACODE-ARCHIVE-003"), (long, "longer than 64 MiB")):
        peak, err = _peak_kib(acode.env, acode.workspace, "session", "import", str(bomb))
        assert problem in err
        assert peak < 256 * 1024, f"{bomb.name}: {peak} KiB"
