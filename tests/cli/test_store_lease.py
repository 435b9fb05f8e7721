"""The session's lease in the PostgreSQL store, between two clones of one repository as
on two machines (docs/fleet.md, "One holder per session"): a resume waits while a live
process holds the session, here or on another machine (a pid namespace of its own stands
for one), takes a dead holder's of this machine at once and another machine's once it
lapsed; a process cut off from PostgreSQL stops itself before its lease lapses, and one
frozen past it writes nothing after the take-over (the database refuses its epoch).
Real PostgreSQL, real processes and signals, the TCP fault proxy between clone A and
the server, a bare repository on disk as the git remote."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tests.cli.conftest import (
    ACODE,
    Background,
    Cli,
    Result,
    Running,
    plan_yaml,
    step_started,
    wait_for,
)
from tests.support.postgres import PgServer, scratch_database
from tests.support.tcp_proxy import Proxy

__all__: list[str] = []

LEASE_SECONDS = 5
CONFIG = (
    "store:\n  workspace: acme\nhandoff:\n  remote: origin\n"
    f"fleet:\n  lease_seconds: {LEASE_SECONDS}\n"
)
# Another machine: a user and pid namespace of its own, whose processes this one's pids
# do not name (acode tells by the namespace, as by the boot).
ELSEWHERE = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]


def git(ws: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ws, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


class Clones(NamedTuple):
    a: Cli  # reaches PostgreSQL through ``proxy``
    b: Cli  # directly
    proxy: Proxy
    pg: PgServer
    dbname: str
    effects: Path  # outside both clones: one line per time a step ran


@pytest.fixture
def clones(
    tmp_path: Path, cli_env: dict[str, str], background: Background, pg_server: PgServer
) -> Iterator[Clones]:
    remote = tmp_path / "team.git"
    git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    a_dir, b_dir = tmp_path / "machine-a" / "repo", tmp_path / "machine-b" / "repo"
    a_dir.mkdir(parents=True)
    git(a_dir, "init", "--quiet", "--initial-branch=main")
    (a_dir / "README.md").write_text("hello\n")
    (a_dir / ".gitignore").write_text("plan.yml\n")
    (a_dir / ".agent").mkdir()
    (a_dir / ".agent/config.yml").write_text(CONFIG)
    git(a_dir, "add", "--all")
    git(a_dir, "commit", "--quiet", "--message", "init")
    git(a_dir, "remote", "add", "origin", str(remote))
    git(a_dir, "push", "--quiet", "origin", "main")
    git(tmp_path, "clone", "--quiet", str(remote), str(b_dir))
    with scratch_database(pg_server) as dbname:
        proxy = Proxy(pg_server.target).start()
        try:
            a_env = {**cli_env, "ACODE_STORE_URL": pg_server.url_via(proxy.port, dbname)}
            b_env = {**cli_env, "ACODE_STORE_URL": pg_server.store_url(dbname)}
            yield Clones(
                Cli(a_dir, a_env, background),
                Cli(b_dir, b_env, background),
                proxy,
                pg_server,
                dbname,
                tmp_path / "effects",
            )
        finally:
            background.stop_all()
            proxy.close()


def _plan(c: Clones, nap: str) -> str:
    """r, then the nap (``nap`` the first time it runs, nothing after: the run that
    resumes it goes on at once), then r2. Each of r and r2 leaves a line in effects."""
    marker, pids, fx = c.a.workspace.parent / "napped", c.a.workspace / "pids", c.effects
    once = f"test -e {marker} || {{ touch {marker}; echo $$ >> {pids}; {nap}; }}"
    return plan_yaml(
        "Lease",
        '{id: w, write: src/a.py, content: "print(1)\\n"}',
        f"{{id: r, run: 'echo r >> {fx}'}}",
        f"{{id: nap, run: '{once}', idempotent: true}}",
        f"{{id: r2, run: 'echo r2 >> {fx}'}}",
        '{id: w2, write: src/b.py, content: "print(2)\\n"}',
    )


def _start_in_a(c: Clones, nap: str, *, elsewhere: bool = False) -> tuple[Running, str]:
    """A runs the plan (in a pid namespace of its own: another machine) until its nap;
    returns the run and the session's id."""
    c.a.write("plan.yml", _plan(c, nap))
    argv = [ACODE, "run", "plan.yml"]
    if elsewhere:
        proc = subprocess.Popen(
            [*ELSEWHERE, *argv],
            cwd=c.a.workspace,
            env=c.a.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        run = Running(proc, ("run", "plan.yml"))
        c.a._background.running.append(run)
    else:
        run = c.a.start("run", "plan.yml")
    c.a.watch_pids("pids")
    step_started(c.a, run, c.a.workspace / "pids")
    (session,) = c.b.sessions()
    ref = f"refs/acode/sessions/{session['id']}"
    here = git(c.a.workspace, "rev-parse", ref).strip()
    wait_for("the remote to hold A's work tree", lambda: _remote_ref(c, ref) == here, 30)
    return run, str(session["id"])


def _remote_ref(c: Clones, ref: str) -> str | None:
    remote = c.a.workspace.parent.parent / "team.git"
    done = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", ref],
        cwd=remote,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or None


def _acode_pid(run: Running) -> int:
    """The pid of acode itself (under unshare, the child of its namespace's first process)."""
    found = subprocess.run(
        ["pgrep", "-f", "-s", str(run.pid), "run plan.yml"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    pids = [int(p) for p in found if int(p) != run.pid]
    return max(pids) if pids else run.pid


def _resume_once_free(c: Clones, session_id: str, timeout: float) -> Result:
    """B resumes as soon as the lease lets it: refused (exit 16, nothing written) until
    then."""
    refusals: list[Result] = []

    def resumed() -> bool:
        done = c.b("resume", session_id, "--mode", "autopilot", expect=None, timeout=60)
        if done.code == 16:
            refusals.append(done)
            return False
        refusals.append(done)
        return True

    wait_for("B to take the session over", resumed, timeout=timeout)
    return refusals[-1]


def _events(c: Clones, session_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    import json

    import psycopg

    with psycopg.connect(c.pg.direct_dsn(c.dbname), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT e.seq, e.type, e.payload FROM acode_store.events e JOIN"
            " acode_store.sessions s ON s.sid = e.sid WHERE s.id = %s ORDER BY e.seq",
            (session_id,),
        ).fetchall()
    return [(int(seq), str(type_), json.loads(payload)) for seq, type_, payload in rows]


def _completions(c: Clones, session_id: str) -> list[str]:
    return [p["step"] for _, t, p in _events(c, session_id) if t == "step_completed"]


def _epoch(c: Clones, session_id: str) -> int:
    import psycopg

    with psycopg.connect(c.pg.direct_dsn(c.dbname), autocommit=True) as conn:
        row = conn.execute(
            "SELECT epoch FROM acode_store.session_leases WHERE session_id = %s", (session_id,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_live_holder_here_is_refused_and_a_dead_one_here_is_taken_at_once(
    clones: Clones,
) -> None:
    c = clones
    run, session_id = _start_in_a(c, "sleep 60")
    refused = c.b("resume", session_id, expect=16)
    assert "is running in another process of this machine" in refused.flat_err, refused.describe()
    assert f"pid {_acode_pid(run)}" in refused.flat_err
    assert "lease until" in refused.flat_err
    assert f"kill {_acode_pid(run)}" in refused.flat_err
    # Nor may B change it otherwise, though A's lock file is not B's to see.
    written = len(_events(c, session_id))
    c.b("session", "discard", session_id, expect=16)
    c.b("session", "checkpoint", session_id, "--label", "from-b", expect=16)
    assert len(_events(c, session_id)) == written

    os.killpg(run.pid, signal.SIGKILL)
    c.a.finish(run, expect=-signal.SIGKILL)
    # Its lease has not lapsed, but its holder has ended: B goes on at once.
    c.b("resume", session_id, "--mode", "autopilot")
    assert c.b.status(session_id)["state"] == "COMPLETED"
    assert c.effects.read_text().split() == ["r", "r2"]
    assert _epoch(c, session_id) == 2


def test_a_paused_session_gives_its_lease_back(clones: Clones) -> None:
    c = clones
    run, session_id = _start_in_a(c, "sleep 60")
    os.kill(run.pid, signal.SIGTERM)
    c.a.finish(run, expect=130)
    import psycopg

    with psycopg.connect(c.pg.direct_dsn(c.dbname), autocommit=True) as conn:
        row = conn.execute(
            "SELECT epoch, token, expires FROM acode_store.session_leases WHERE session_id = %s",
            (session_id,),
        ).fetchone()
    assert row == (1, None, None)  # free: another machine takes it at once
    c.b("resume", session_id, "--mode", "autopilot")
    assert _epoch(c, session_id) == 2


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_a_holder_on_another_machine_is_waited_for_until_its_lease_lapses(
    clones: Clones,
) -> None:
    c = clones
    probe = subprocess.run([*ELSEWHERE, "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no user and pid namespaces here: {probe.stderr.decode().strip()}")
    run, session_id = _start_in_a(c, "sleep 60", elsewhere=True)
    refused = c.b("resume", session_id, expect=16)
    assert "is running on another machine" in refused.flat_err, refused.describe()
    assert f"lapses {LEASE_SECONDS} s after its last renewal" in refused.flat_err

    os.killpg(run.pid, signal.SIGKILL)  # the whole namespace: the machine is gone
    run.proc.communicate()
    # Dead, but on another machine: this one cannot tell, and waits for the lapse.
    c.b("resume", session_id, expect=16)
    done = _resume_once_free(c, session_id, timeout=LEASE_SECONDS * 6)
    assert done.code == 0, done.describe()
    assert c.b.status(session_id)["state"] == "COMPLETED"
    assert c.effects.read_text().split() == ["r", "r2"]
    assert _completions(c, session_id).count("r") == 1


def test_a_session_cut_off_from_postgresql_stops_itself_before_its_lease_lapses(
    clones: Clones,
) -> None:
    c = clones
    run, session_id = _start_in_a(c, "sleep 60")
    before = _events(c, session_id)
    c.proxy.set_mode("reset")  # A reaches PostgreSQL no more
    stopped = c.a.finish(run, expect=19, timeout=LEASE_SECONDS * 4)
    assert "ACODE-SESSION-004" in stopped.flat_err, stopped.describe()
    assert "no longer holds the session's lease" in stopped.flat_err
    # Its nap was killed with it: nothing of A runs on.
    wait_for("A's step to be killed", lambda: not _sleeping(c.a.workspace / "pids"))
    # A wrote nothing since (not even a pause).
    assert _events(c, session_id) == before

    c.b("resume", session_id, "--mode", "autopilot")  # A ended here: taken at once
    c.proxy.set_mode("pass")
    assert c.b.status(session_id)["state"] == "COMPLETED"
    assert c.effects.read_text().split() == ["r", "r2"]
    assert sorted(_completions(c, session_id)) == ["nap", "r", "r2", "w", "w2"]


def test_a_frozen_session_whose_lease_was_taken_over_writes_nothing_after_the_take_over(
    clones: Clones,
) -> None:
    c = clones
    # A nap longer than the wait for A's work tree on the remote (`_start_in_a`) can
    # take on a busy machine: A must be frozen before it ends (with a nap of 1 s, A had
    # once finished the session before the freeze).
    run, session_id = _start_in_a(c, f"sleep {LEASE_SECONDS + 1}")
    acode = _acode_pid(run)
    os.kill(acode, signal.SIGSTOP)  # frozen, then cut off: it renews nothing
    c.proxy.set_mode("reset")
    try:
        # Alive and of this machine: B waits for the lapse, then takes the session over
        # (epoch 2) and ends it.
        refused = c.b("resume", session_id, expect=16)
        assert "is running in another process of this machine" in refused.flat_err
        done = _resume_once_free(c, session_id, timeout=LEASE_SECONDS * 6)
        assert done.code == 0, done.describe()
        assert c.b.status(session_id)["state"] == "COMPLETED"
        taken_at = max(seq for seq, t, _ in _events(c, session_id) if t == "session_resumed")
        ended = _events(c, session_id)
    finally:
        c.proxy.set_mode("pass")  # healed: A's late writes reach the database
        os.kill(acode, signal.SIGCONT)
    # A's nap ends while it is frozen or soon after: its record of it, and anything
    # after, is refused (by the database, or by A itself if its renewal saw the lapse
    # first).
    late = c.a.finish(run, expect=19, timeout=LEASE_SECONDS * 4)
    assert "ACODE-SESSION-004" in late.flat_err, late.describe()
    assert _events(c, session_id) == ended
    assert taken_at < ended[-1][0]
    assert c.effects.read_text().split() == ["r", "r2"]  # no step ran twice
    assert _epoch(c, session_id) == 2


def _sleeping(pids: Path) -> bool:
    for line in pids.read_text().split():
        try:
            if Path(f"/proc/{line}/cmdline").read_bytes():
                stat = Path(f"/proc/{line}/stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] != "Z":
                    return True
        except OSError:
            continue
    return False


def test_a_session_whose_lease_was_taken_stops_at_its_next_renewal(clones: Clones) -> None:
    import psycopg

    c = clones
    run, session_id = _start_in_a(c, "sleep 60")
    before = _events(c, session_id)
    # Another process takes the lease over (as a fleet worker whose clock said it had
    # lapsed would): a new holder, the next epoch.
    with psycopg.connect(c.pg.direct_dsn(c.dbname), autocommit=True) as conn:
        conn.execute(
            "UPDATE acode_store.session_leases SET token = 'other', pid = 1, host = 'elsewhere',"
            " epoch = epoch + 1, expires = now() + interval '1 hour' WHERE session_id = %s",
            (session_id,),
        )
    stopped = c.a.finish(run, expect=19, timeout=LEASE_SECONDS * 4)
    assert "ACODE-SESSION-004" in stopped.flat_err, stopped.describe()
    wait_for("A's step to be killed", lambda: not _sleeping(c.a.workspace / "pids"))
    assert _events(c, session_id) == before  # nothing written, not even a pause
    assert "lease_lost" in (c.a.workspace / ".agent/state/logs/acode.jsonl").read_text()
