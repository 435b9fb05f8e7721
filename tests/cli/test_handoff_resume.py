"""Hand-off: a session started in one clone, killed, and resumed in another clone of the
same repository, as on another machine (docs/fleet.md, "Hand-off: resume on another
machine"). Real PostgreSQL as the store both clones share, a bare repository on disk as
the git remote, the real `acode` in two directories."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tests.cli.conftest import Background, Cli, plan_yaml, step_started, wait_for
from tests.support.postgres import PgServer

__all__: list[str] = []

CONFIG = "store:\n  workspace: acme\nhandoff:\n  remote: origin\n"


def git(ws: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ws, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


class Machines(NamedTuple):
    a: Cli
    b: Cli
    remote: Path
    effects: Path  # outside both clones: one line per time a step ran


@pytest.fixture
def machines(
    tmp_path: Path,
    cli_env: dict[str, str],
    background: Background,
    pg_server: PgServer,
    dbname: str,
) -> Machines:
    """Clone A with the repository's first commit pushed to a bare remote, clone B made
    from that remote in another directory; both store their sessions in one database."""
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
    env = {**cli_env, "ACODE_STORE_URL": pg_server.store_url(dbname)}
    return Machines(
        Cli(a_dir, env, background), Cli(b_dir, env, background), remote, tmp_path / "effects"
    )


def _plan(m: Machines, marker: Path, pids: Path) -> str:
    nap = f"test -e {marker} || {{ touch {marker}; echo $$ >> {pids}; sleep 30; }}"
    fx = m.effects
    return plan_yaml(
        "Hand-off",
        '{id: w, write: src/a.py, content: "print(1)\\n"}',
        '{id: e, edit: src/a.py, old: "print(1)", new: "print(2)"}',
        f"{{id: r, run: 'echo r >> {fx}; echo built > out.txt'}}",
        "{id: c1, commit: Add a}",
        f"{{id: nap, run: '{nap}', idempotent: true}}",
        f"{{id: r2, run: 'echo r2 >> {fx}; echo more >> out.txt'}}",
        '{id: w2, write: src/b.py, content: "print(3)\\n"}',
        "{id: c2, commit: Add b}",
    )


def _killed_in_a(m: Machines, tmp_path: Path) -> str:
    """Start the plan in A, kill it with SIGKILL in its `nap` step once the remote has
    its work tree, and return the session's id."""
    pids = m.a.watch_pids(str(tmp_path / "pids"))
    m.a.write("plan.yml", _plan(m, tmp_path / "napped", pids))
    run = m.a.start("run", "plan.yml")
    step_started(m.a, run, pids)
    (session,) = m.a.sessions()
    ref = f"refs/acode/sessions/{session['id']}"
    here = git(m.a.workspace, "rev-parse", ref).strip()
    wait_for(
        "the remote to hold the work tree",
        lambda: _remote_ref(m.remote, ref) == here,
        timeout=30,
    )
    os.killpg(run.proc.pid, signal.SIGKILL)
    m.a.finish(run, expect=-signal.SIGKILL)
    return str(session["id"])


def _remote_ref(remote: Path, ref: str) -> str | None:
    done = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", ref],
        cwd=remote,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or None


def _remote_refs(remote: Path) -> list[str]:
    return git(remote, "for-each-ref", "--format=%(refname)", "refs/acode").split()


def _files(ws: Path) -> dict[str, str]:
    return {
        str(p.relative_to(ws)): p.read_text()
        for p in sorted(ws.rglob("*"))
        if p.is_file()
        and ".git" not in p.parts
        and ".agent" not in p.parts
        and p.name != "plan.yml"
    }


def _commits(ws: Path) -> list[str]:
    """The session's commits as content: message and tree, oldest first."""
    return git(ws, "log", "--reverse", "--format=%s %T", "origin/main..HEAD").splitlines()


def _events(m: Machines, session_id: str) -> int:
    return len(m.b("session", "history", session_id, "--json").json_lines())


def test_a_session_killed_in_one_clone_ends_in_another_as_an_uninterrupted_run(
    machines: Machines, tmp_path: Path, cli_env: dict[str, str], background: Background
) -> None:
    m = machines
    session_id = _killed_in_a(m, tmp_path)
    assert m.effects.read_text().split() == ["r"]
    a_head = git(m.a.workspace, "rev-parse", "HEAD").strip()  # A's "Add a"
    b_branch = git(m.b.workspace, "rev-parse", "main").strip()

    # B sees the session (the same store.workspace), and its dry run says what it fetches.
    (seen,) = m.b.sessions()
    assert seen["id"] == session_id
    dry = m.b("resume", "--dry-run", session_id)
    assert f"Would fetch refs/acode/sessions/{session_id} from origin" in dry.out, dry.describe()
    assert "Would check out commit" in dry.out
    shown = m.b("resume", "--dry-run", "--json", session_id).json()["handoff"]
    assert shown["fetch"] is True
    assert shown["remote"] == "origin"
    assert shown["ref"] == f"refs/acode/sessions/{session_id}"
    assert _remote_ref(m.b.workspace, f"refs/acode/sessions/{session_id}") is None

    done = m.b("resume", session_id, "--mode", "autopilot")
    assert "Work tree: fetched" in done.out, done.describe()
    assert m.b.status(session_id)["state"] == "COMPLETED"
    # No completed step ran twice: r in A, r2 in B.
    assert m.effects.read_text().split() == ["r", "r2"]
    # B's records follow A's on the session's ref, and B pushed them (a fast-forward).
    ref = f"refs/acode/sessions/{session_id}"
    b_ref = git(m.b.workspace, "rev-parse", ref).strip()
    wait_for("B's records to reach the remote", lambda: _remote_ref(m.remote, ref) == b_ref)
    git(
        m.b.workspace,
        "merge-base",
        "--is-ancestor",
        git(m.a.workspace, "rev-parse", ref).strip(),
        ref,
    )
    # The history verifies from its first event (an archive replays it whole), and
    # machine A reads the same history.
    m.b("session", "archive", session_id, "-o", str(tmp_path / "session.acode.gz"))
    m.a("session", "history", session_id)

    # Ended: its hint names no directory by the workspace's name in the store.
    ended = m.b("resume", session_id, expect=15)
    assert "--workspace acme" not in ended.flat_err, ended.describe()

    # An uninterrupted run of the same plan, in a clone of its own.
    c_dir = tmp_path / "machine-c" / "repo"
    git(tmp_path, "clone", "--quiet", str(m.remote), str(c_dir))
    c = Cli(c_dir, m.b.env, background)
    c.write("plan.yml", (m.a.workspace / "plan.yml").read_text())
    c("run", "plan.yml")
    assert _files(m.b.workspace) == _files(c_dir)
    assert _commits(m.b.workspace) == _commits(c_dir)
    assert [line.rsplit(" ", 1)[0] for line in _commits(c_dir)] == ["Add a", "Add b"]
    # B's HEAD went on from A's commit; B's own branch was left where it was.
    assert git(m.b.workspace, "rev-parse", "HEAD~1").strip() == a_head
    assert git(m.b.workspace, "rev-parse", "main").strip() == b_branch


# A python step's files are not recorded on the session's ref (only write, edit, run and
# commit steps are), so the snapshot a run step takes after it holds more than the ref.
NOTE_STEP = """\
from pathlib import Path


def note(ctx):
    Path(ctx.workspace, "notes").mkdir(exist_ok=True)
    Path(ctx.workspace, "notes", "py.txt").write_text("noted\\n")
    return {"noted": True}
"""


def _build_plan(effects: Path, marker: Path, pids: Path) -> str:
    """A plan whose `build` step (a run step, not idempotent, no declared paths: rolled
    back to its ghost snapshot) writes gen/one.txt, then naps on its first attempt,
    then writes gen/two.txt; each file is appended to, so that a run on top of a half
    done one shows twice."""
    nap = f"test -e {marker} || {{ touch {marker}; echo $$ >> {pids}; sleep 30; }}"
    build = f"echo build >> {effects}; mkdir -p gen; echo one >> gen/one.txt; {nap}; "
    return plan_yaml(
        "Rolled back anywhere",
        '{id: w, write: src/a.py, content: "print(1)\\n"}',
        f"{{id: r0, run: 'echo r0 >> {effects}'}}",
        '{id: py, python: "plan_steps:note"}',
        f"{{id: build, run: '{build}echo two >> gen/two.txt'}}",
        f"{{id: after, run: 'echo after >> {effects}'}}",
        "{id: c, commit: Add the build}",
    )


def _stopped_in_build(
    cli: Cli, tmp_path: Path, effects: Path, name: str, *, pause: bool = False
) -> str:
    """Start the build plan in ``cli``'s clone and stop it in its `build` step: SIGKILL
    once the remote holds the step's snapshot and the session's ref, or (``pause``)
    SIGTERM, whose last push sends them with the pause's as-left snapshot; return the
    session's id."""
    pids = cli.watch_pids(str(tmp_path / f"{name}.pids"))
    cli.write("plan_steps.py", NOTE_STEP)
    cli.write("plan.yml", _build_plan(effects, tmp_path / f"{name}.napped", pids))
    run = cli.start("run", "plan.yml")
    step_started(cli, run, pids)
    session_id = _newest(cli)
    ghost = f"refs/acode/{session_id}/build-1"
    refs = [ghost, f"refs/acode/sessions/{session_id}"]
    if pause:
        run.proc.send_signal(signal.SIGTERM)
        cli.finish(run, expect=130)
        refs.append(f"{ghost}-as-left")
    here = [git(cli.workspace, "rev-parse", ref).strip() for ref in refs]
    remote = tmp_path / "team.git"
    wait_for(
        "the remote to hold the step's snapshots and the session's ref",
        lambda: [_remote_ref(remote, ref) for ref in refs] == here,
        timeout=30,
    )
    if not pause:
        os.killpg(run.proc.pid, signal.SIGKILL)
        cli.finish(run, expect=-signal.SIGKILL)
    assert (cli.workspace / "gen/one.txt").read_text() == "one\n"  # half done
    assert not (cli.workspace / "gen/two.txt").exists()
    return session_id


def _newest(cli: Cli) -> str:
    rows = [r for r in cli.sessions() if r["state"] == "EXECUTING"]
    assert len(rows) == 1, rows
    return str(rows[0]["id"])


def _resume_events(cli: Cli, session_id: str) -> list[dict[str, Any]]:
    """The events from the resume on, as the history lists them."""
    events: list[dict[str, Any]] = cli("session", "history", session_id, "--json").json()
    first = next(i for i, e in enumerate(events) if e["type"] == "session_resumed")
    return events[first:]


def _shape(event: dict[str, Any]) -> tuple[object, ...]:
    """What two runs of one plan must agree on in an event: its type, its step and
    attempt, and the names of what it records (ids, times, digests and the paths a
    rollback found differ)."""
    payload = event.get("payload") or {}
    return (event["type"], payload.get("step"), payload.get("attempt"), tuple(sorted(payload)))


def test_a_run_step_left_running_on_one_machine_is_rolled_back_on_another_as_there(
    machines: Machines, tmp_path: Path, background: Background
) -> None:
    m = machines
    session_id = _stopped_in_build(m.a, tmp_path, m.effects, "a")
    assert m.effects.read_text().split() == ["r0", "build"]
    m.b.write("plan.yml", "my own notes\n")  # ignored: a person's file of machine B
    ghost_ref = f"refs/acode/{session_id}/build-1"
    dry = m.b("resume", "--dry-run", "--json", session_id).json()
    assert dry["handoff"]["snapshots"] == [ghost_ref]
    assert dry["continuation"]["in_progress_action"] == "rollback_retry"

    done = m.b("resume", session_id, "--mode", "autopilot")
    assert "build -> rollback_retry" in done.out, done.describe()
    assert f"Fetched {ghost_ref}: the snapshot the step left running there" in done.out
    assert "rolled back to snapshot" in done.out
    assert m.b.status(session_id)["state"] == "COMPLETED"
    # The interrupted step ran once more; no completed step ran twice.
    assert m.effects.read_text().split() == ["r0", "build", "build", "after"]
    assert (m.b.workspace / "gen/one.txt").read_text() == "one\n"
    assert (m.b.workspace / "notes/py.txt").read_text() == "noted\n"  # from the snapshot
    assert (m.b.workspace / "plan.yml").read_text() == "my own notes\n"
    # B took the snapshot from the remote, checked against the history.
    ghost = git(m.a.workspace, "rev-parse", ghost_ref).strip()
    rolled = [e for e in _resume_events(m.b, session_id) if e["type"] == "step_rolled_back"]
    assert [e["payload"]["started"]["ghost"] for e in rolled] == [ghost]
    assert rolled[0]["payload"]["restored"] == ["notes/py.txt"]
    # Ended: the snapshots went from the remote (deleted by B's last push); its ref stays.
    ours = f"refs/acode/{session_id}/"
    wait_for(
        "the session's snapshots to go from the remote",
        lambda: not any(ref.startswith(ours) for ref in _remote_refs(m.remote)),
    )
    assert f"refs/acode/sessions/{session_id}" in _remote_refs(m.remote)

    # The same plan killed at the same point and resumed on its own machine.
    c_dir, u_dir = tmp_path / "machine-c" / "repo", tmp_path / "machine-u" / "repo"
    for where in (c_dir, u_dir):
        git(tmp_path, "clone", "--quiet", str(m.remote), str(where))
    c = Cli(c_dir, m.b.env, background)
    c_effects = tmp_path / "c-effects"
    c_session = _stopped_in_build(c, tmp_path, c_effects, "c")
    c("resume", c_session, "--mode", "autopilot")
    assert c_effects.read_text().split() == ["r0", "build", "build", "after"]
    c_rolled = [e for e in _resume_events(c, c_session) if e["type"] == "step_rolled_back"]
    # There the rollback deleted what the half-done step wrote; on B the tree that arrived
    # lacked what the snapshot holds: each put its work tree back to the same snapshot.
    assert c_rolled[0]["payload"]["restored"] == ["gen/one.txt"]
    b_events = [_shape(e) for e in _resume_events(m.b, session_id)]
    c_events = [_shape(e) for e in _resume_events(c, c_session)]
    assert b_events == c_events

    # An uninterrupted run of the same plan.
    u = Cli(u_dir, m.b.env, background)
    u.write("plan_steps.py", NOTE_STEP)
    u.write("plan.yml", _build_plan(tmp_path / "u-effects", tmp_path / "a.napped", tmp_path / "u"))
    u("run", "plan.yml")
    for ws in (m.b.workspace, c_dir):
        assert _files(ws) == _files(u_dir), ws
        assert _commits(ws) == _commits(u_dir)


def test_a_forged_or_missing_snapshot_on_the_remote_is_refused_and_retry_does_without(
    machines: Machines, tmp_path: Path, pg_server: PgServer, dbname: str
) -> None:
    m = machines
    session_id = _stopped_in_build(m.a, tmp_path, m.effects, "a")
    ghost_ref = f"refs/acode/{session_id}/build-1"
    # Someone with push rights points the snapshot's ref at a commit of their own.
    m.b.write("gen/one.txt", "evil\n")
    git(m.b.workspace, "add", "gen/one.txt")
    git(m.b.workspace, "commit", "--quiet", "--message", "forged")
    git(m.b.workspace, "push", "--quiet", "--force", "origin", f"HEAD:{ghost_ref}")
    git(m.b.workspace, "reset", "--quiet", "--hard", "HEAD~1")
    before, events = _untouched(m), _event_count(pg_server, dbname, session_id)

    forged = m.b("resume", session_id, "--mode", "autopilot", expect=17)
    assert "ACODE-HANDOFF-002" in forged.err, forged.describe()
    assert f"{ghost_ref} on origin is at" in forged.flat_err
    assert "the ref was moved or forged" in forged.flat_err
    assert f"git push origin :{ghost_ref}" in forged.flat_err
    assert "Traceback" not in forged.err
    assert _untouched(m) == before
    assert _event_count(pg_server, dbname, session_id) == events
    assert _remote_ref(m.b.workspace, ghost_ref) is None  # nothing of it named here

    git(m.b.workspace, "push", "--quiet", "origin", f":{ghost_ref}")
    missing = m.b("resume", session_id, "--mode", "autopilot", expect=17)
    assert "ACODE-HANDOFF-004" in missing.err, missing.describe()
    needs = "does not have the snapshot of the work tree that the step's rollback needs"
    assert needs in missing.flat_err
    assert f"acode resume {session_id[:13]} --strategy retry" in missing.flat_err
    assert _untouched(m) == before
    assert _event_count(pg_server, dbname, session_id) == events

    # The person's choice: the step runs again on the tree as recorded after `r0`.
    m.b("resume", session_id, "--mode", "autopilot", "--strategy", "retry")
    assert m.b.status(session_id)["state"] == "COMPLETED"
    assert m.effects.read_text().split() == ["r0", "build", "build", "after"]
    assert (m.b.workspace / "gen/one.txt").read_text() == "one\n"


def test_a_snapshot_the_remote_lost_is_sent_again_by_acode_sync_on_the_first_machine(
    machines: Machines, tmp_path: Path
) -> None:
    m = machines
    session_id = _stopped_in_build(m.a, tmp_path, m.effects, "a")
    ghost_ref = f"refs/acode/{session_id}/build-1"
    git(m.a.workspace, "push", "--quiet", "origin", f":{ghost_ref}")  # as if never sent
    missing = m.b("resume", session_id, "--mode", "autopilot", expect=17)
    assert "ACODE-HANDOFF-004" in missing.err, missing.describe()
    assert "acode sync there" in missing.flat_err

    m.a("sync")
    done = m.b("resume", session_id, "--mode", "autopilot")
    assert "build -> rollback_retry" in done.out, done.describe()
    assert m.effects.read_text().split() == ["r0", "build", "build", "after"]
    assert (m.b.workspace / "notes/py.txt").read_text() == "noted\n"


def test_a_run_step_paused_on_one_machine_is_rolled_back_on_another_half_done_files_gone(
    machines: Machines, tmp_path: Path
) -> None:
    # The pause records the work tree as it stopped (gen/one.txt half written) on the
    # session's ref: it arrives in B, and the rollback takes the step's work out of it
    # before the step runs again, as it would in A.
    m = machines
    session_id = _stopped_in_build(m.a, tmp_path, m.effects, "a", pause=True)
    assert m.a.status(session_id)["state"] == "PAUSED"

    done = m.b("resume", session_id, "--mode", "autopilot")
    assert "build -> rollback_retry" in done.out, done.describe()
    assert "rolled back to snapshot" in done.out
    assert m.b.status(session_id)["state"] == "COMPLETED"
    assert m.effects.read_text().split() == ["r0", "build", "build", "after"]
    assert (m.b.workspace / "gen/one.txt").read_text() == "one\n"
    assert (m.b.workspace / "gen/two.txt").read_text() == "two\n"
    assert (m.b.workspace / "notes/py.txt").read_text() == "noted\n"
    rolled = [e for e in _resume_events(m.b, session_id) if e["type"] == "step_rolled_back"]
    assert rolled[0]["payload"]["restored"] == ["gen/one.txt"]


def _event_count(pg: PgServer, dbname: str, session_id: str) -> int:
    import psycopg

    with psycopg.connect(pg.direct_dsn(dbname), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM acode_store.events e JOIN acode_store.sessions s"
            " ON s.sid = e.sid WHERE s.id = %s",
            (session_id,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _untouched(m: Machines) -> dict[str, str]:
    """What of B a refused resume must leave as it was: its files, HEAD, its index."""
    return {
        **_files(m.b.workspace),
        "HEAD": git(m.b.workspace, "rev-parse", "HEAD"),
        "index": git(m.b.workspace, "ls-files", "--stage"),
    }


def test_local_changes_the_check_out_would_overwrite_are_refused_then_forced(
    machines: Machines, tmp_path: Path, pg_server: PgServer, dbname: str
) -> None:
    m = machines
    session_id = _killed_in_a(m, tmp_path)
    m.b.write("src/a.py", "mine\n")
    before, events = _untouched(m), _event_count(pg_server, dbname, session_id)

    refused = m.b("resume", session_id, "--mode", "autopilot", expect=17)
    assert "ACODE-RESUME-004" in refused.err, refused.describe()
    assert "would overwrite local changes: src/a.py" in refused.flat_err
    assert f"acode resume {session_id[:8]}" in refused.flat_err
    assert "--force" in refused.flat_err
    assert _untouched(m) == before
    assert _event_count(pg_server, dbname, session_id) == events

    m.b("resume", session_id, "--mode", "autopilot", "--force")
    assert m.b.status(session_id)["state"] == "COMPLETED"
    assert (m.b.workspace / "src/a.py").read_text() == "print(2)\n"
    assert m.effects.read_text().split() == ["r", "r2"]


def test_another_key_on_the_second_machine_is_refused_saying_both_need_the_same(
    machines: Machines, tmp_path: Path, pg_server: PgServer, dbname: str
) -> None:
    m = machines
    session_id = _killed_in_a(m, tmp_path)
    before, events = _untouched(m), _event_count(pg_server, dbname, session_id)
    other = {**m.b.env, "ACODE_CHECKPOINT_SECRET": "another machine's own key"}
    refused = m.b("resume", session_id, "--mode", "autopilot", env=other, expect=1)
    assert "ACODE-CKPT-003" in refused.err, refused.describe()
    assert "recorded with another key" in refused.flat_err
    assert "both machines need the same ACODE_CHECKPOINT_SECRET" in refused.flat_err
    assert "Traceback" not in refused.err
    assert _untouched(m) == before
    assert _event_count(pg_server, dbname, session_id) == events


def test_a_ref_on_the_remote_that_is_not_the_recorded_commit_is_refused(
    machines: Machines, tmp_path: Path, pg_server: PgServer, dbname: str
) -> None:
    m = machines
    session_id = _killed_in_a(m, tmp_path)
    ref = f"refs/acode/sessions/{session_id}"
    # Someone with push rights points the session's ref at a commit of their own.
    m.b.write("src/a.py", "import evil\n")
    git(m.b.workspace, "add", "src/a.py")
    git(m.b.workspace, "commit", "--quiet", "--message", "forged")
    git(m.b.workspace, "push", "--quiet", "--force", "origin", f"HEAD:{ref}")
    git(m.b.workspace, "reset", "--quiet", "--hard", "HEAD~1")
    before, events = _untouched(m), _event_count(pg_server, dbname, session_id)

    refused = m.b("resume", session_id, "--mode", "autopilot", expect=17)
    assert "ACODE-HANDOFF-002" in refused.err, refused.describe()
    assert "the ref was moved or forged" in refused.flat_err
    assert _untouched(m) == before
    assert _event_count(pg_server, dbname, session_id) == events
    assert _remote_ref(m.b.workspace, ref) is None  # nothing of it named here


def test_an_unreachable_remote_is_a_clear_error_and_nothing_is_written(
    machines: Machines, tmp_path: Path, pg_server: PgServer, dbname: str
) -> None:
    m = machines
    session_id = _killed_in_a(m, tmp_path)
    git(m.b.workspace, "remote", "set-url", "origin", str(tmp_path / "gone.git"))
    before, events = _untouched(m), _event_count(pg_server, dbname, session_id)

    refused = m.b("resume", session_id, "--mode", "autopilot", expect=17)
    assert "ACODE-HANDOFF-001" in refused.err, refused.describe()
    assert "cannot fetch the work tree of session" in refused.flat_err
    assert "gone.git" in refused.flat_err  # git's own words say why
    assert "Traceback" not in refused.err
    assert _untouched(m) == before
    assert _event_count(pg_server, dbname, session_id) == events


def test_an_unrelated_repository_under_the_same_name_is_refused(
    machines: Machines, tmp_path: Path, pg_server: PgServer, dbname: str, background: Background
) -> None:
    m = machines
    session_id = _killed_in_a(m, tmp_path)
    d_dir = tmp_path / "machine-d" / "other"
    d_dir.mkdir(parents=True)
    git(d_dir, "init", "--quiet", "--initial-branch=main")
    (d_dir / "NOTES.md").write_text("another project\n")
    (d_dir / ".agent").mkdir()
    (d_dir / ".agent/config.yml").write_text(CONFIG)
    git(d_dir, "add", "--all")
    git(d_dir, "commit", "--quiet", "--message", "their own start")
    git(d_dir, "remote", "add", "origin", str(m.remote))
    d = Cli(d_dir, m.b.env, background)
    events = _event_count(pg_server, dbname, session_id)

    refused = d("resume", session_id, "--mode", "autopilot", expect=17)
    assert "ACODE-HANDOFF-003" in refused.err, refused.describe()
    assert "a clone of another repository" in refused.flat_err
    assert "own store.workspace" in refused.flat_err
    assert sorted(p.name for p in d_dir.iterdir()) == [".agent", ".git", "NOTES.md"]
    assert _event_count(pg_server, dbname, session_id) == events


def test_a_clone_with_no_hand_off_remote_is_told_to_set_one(
    machines: Machines, tmp_path: Path, pg_server: PgServer, dbname: str
) -> None:
    m = machines
    session_id = _killed_in_a(m, tmp_path)
    m.b.write(".agent/config.yml", "store:\n  workspace: acme\n")
    before, events = _untouched(m), _event_count(pg_server, dbname, session_id)

    refused = m.b("resume", session_id, "--mode", "autopilot", expect=17)
    assert "ACODE-HANDOFF-001" in refused.err, refused.describe()
    assert "handoff.remote names no git remote" in refused.flat_err
    assert "(handoff: {remote: origin})" in refused.flat_err
    assert _untouched(m) == before
    assert _event_count(pg_server, dbname, session_id) == events
