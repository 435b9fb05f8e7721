"""Pruning whole sessions (acode.operations.prune), on real SQLite files, real git and
real processes: what goes, what must stay, the record it keeps, and the space it gives
back."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import pytest

import acode
from acode.engine.journal import verify_history
from acode.engine.pruned import pruned_error
from acode.errors import (
    CheckpointError,
    ErrorCode,
    NothingToResumeError,
    SessionPrunedError,
    UsageError,
)
from acode.operations.maintenance import discard_session
from acode.operations.prune import PruneRequest, prune_sessions, select_sessions
from acode.security.signing import load_signer
from acode.store.sqlite.store import SqliteStore
from acode.system.clock import SystemClock
from acode.system.workspace import StatePaths

EVERYTHING = PruneRequest(states=frozenset({"completed", "failed", "cancelled", "discarded"}))


def _git(ws: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ws, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def repo(workspace: Path) -> Path:
    _git(workspace, "init", "-q")
    _git(workspace, "commit", "-q", "--allow-empty", "-m", "start")
    return workspace


class _DaysAgo(SystemClock):
    """The time some days ago: a session recorded with it is that old."""

    def __init__(self, days: int) -> None:
        self._offset = days * 86_400_000_000

    def now_us(self) -> int:
        return super().now_us() - self._offset


def _completed(
    ws: Path, title: str, content: str, parent_id: str | None = None, days_ago: int = 0
) -> str:
    from acode.engine.lifecycle import start_session

    s = start_session(title, ws, parent_id=parent_id, clock=_DaysAgo(days_ago))
    try:
        s.write("w", f"{title}.txt", content)
        s.step("a", lambda ctx: {"n": 1})
        s.complete()
        return s.id
    finally:
        s.close()


def _paused(ws: Path, title: str) -> str:
    s = acode.open_session(title, workspace=ws)
    s.step("a", lambda ctx: {"n": 1})
    s.pause("stopped")
    s.close()
    return s.id


def _rows(ws: Path, session_id: str) -> dict[str, int]:
    """The session's rows in every table that holds a session's."""
    with closing(sqlite3.connect(StatePaths(ws).db)) as conn:
        found = conn.execute("SELECT sid FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if found is None:
            return {}
        return {
            table: conn.execute(f"SELECT count(*) FROM {table} WHERE sid = ?", found).fetchone()[0]
            for table in ("events", "steps", "messages", "checkpoints", "step_ids", "files")
        }


def _blobs(ws: Path) -> set[str]:
    with closing(sqlite3.connect(StatePaths(ws).db)) as conn:
        return {r[0] for r in conn.execute("SELECT sha256 FROM blobs")}


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def _prune(ws: Path, request: PruneRequest = EVERYTHING) -> list[str]:
    selection = select_sessions(ws, request)
    report = prune_sessions(ws, selection.ids)
    return [r.id for r in report.selection.removals]


def test_it_removes_whole_ended_sessions_and_keeps_resumable_ones(repo: Path) -> None:
    done = _completed(repo, "done", "mine")
    paused = _paused(repo, "paused")
    paths = StatePaths(repo)
    assert paths.session_dir(done).is_dir()
    assert _rows(repo, done)["events"] > 0

    assert _prune(repo) == [done]

    assert _rows(repo, done) == {}
    assert not paths.session_dir(done).exists()
    assert not (paths.locks / f"{done}.lock").exists()
    assert _git(repo, "for-each-ref", f"refs/acode/{done}") == ""
    store = SqliteStore.open(paths.db)
    try:
        verify_history(store, store.session(paused), load_signer())
        assert store.conn.execute("SELECT count(*) FROM pruning").fetchone()[0] == 0
    finally:
        store.close()
    with acode.resume_session(paused, workspace=repo) as again:
        assert again.step("a", lambda ctx: pytest.fail("ran again")) == {"n": 1}


def test_with_every_session_gone_no_file_image_is_left(repo: Path) -> None:
    ids = [_completed(repo, name, text) for name, text in (("a", "s"), ("b", "o"), ("c", "s"))]
    assert {_sha("s"), _sha("o")} <= _blobs(repo)
    assert _prune(repo, PruneRequest(states=frozenset({"completed"}))) == ids
    assert _blobs(repo) == set()


def test_an_image_a_remaining_session_refers_to_survives(repo: Path) -> None:
    gone = _completed(repo, "gone", "shared", days_ago=3)
    alone = _completed(repo, "alone", "only mine", days_ago=2)
    kept = _completed(repo, "kept", "shared")
    selection = select_sessions(repo, PruneRequest(older_than_us=86_400_000_000))
    assert selection.ids == (gone, alone)
    prune_sessions(repo, selection.ids)
    assert _sha("shared") in _blobs(repo)
    assert _sha("only mine") not in _blobs(repo)
    store = SqliteStore.open(StatePaths(repo).db)
    try:
        row = store.session(kept)
        verify_history(store, row, load_signer())
        assert store.blob(_sha("shared")) == b"shared"
    finally:
        store.close()


def test_before_rollback_backups_stay_unless_asked(repo: Path) -> None:
    first = _completed(repo, "first", "a")
    second = _completed(repo, "second", "b")
    head = _git(repo, "rev-parse", "HEAD").strip()
    for sid in (first, second):
        _git(repo, "update-ref", f"refs/acode/{sid}/w-1", head)
        _git(repo, "update-ref", f"refs/acode/{sid}/w-1-before-rollback", head)

    prune_sessions(repo, [first])
    assert _git(repo, "for-each-ref", "--format=%(refname)", f"refs/acode/{first}").split() == [
        f"refs/acode/{first}/w-1-before-rollback"
    ]
    prune_sessions(repo, [second], include_backups=True)
    assert _git(repo, "for-each-ref", f"refs/acode/{second}") == ""


def test_a_session_a_live_process_holds_is_kept(repo: Path) -> None:
    done = _completed(repo, "done", "x")
    locks = StatePaths(repo).locks
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from pathlib import Path
                from acode.system.locks import acquire
                lock = acquire(Path({str(locks)!r}), {done!r}, command="holder",
                               now_iso="2026-01-01T00:00:00Z")
                print("held", flush=True)
                time.sleep(60)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        selection = select_sessions(repo, EVERYTHING)
        assert selection.ids == ()
        (skipped,) = selection.skipped
        assert "a process runs it" in skipped.reason
        assert "holder" in skipped.reason
        # Chosen before the process took it, it is still refused under the lock.
        report = prune_sessions(repo, [done])
        assert report.selection.removals == ()
        assert _rows(repo, done)["events"] > 0
    finally:
        holder.kill()
        holder.wait()
    assert _prune(repo) == [done]


def test_a_parent_goes_only_with_its_children(repo: Path) -> None:
    parent = _completed(repo, "parent", "p")
    child = _paused_child(repo, parent)
    selection = select_sessions(repo, EVERYTHING)
    assert selection.ids == ()
    (skipped,) = selection.skipped
    assert skipped.id == parent
    assert "its sub-session" in skipped.reason
    discard_session(repo, child)
    assert sorted(_prune(repo)) == sorted([parent, child])


def test_a_child_stays_while_its_parent_does(repo: Path) -> None:
    parent = _paused(repo, "parent")
    child = _completed(repo, "child", "c", parent_id=parent)
    selection = select_sessions(repo, EVERYTHING)
    assert selection.ids == ()
    (skipped,) = selection.skipped
    assert skipped.id == child
    assert "its parent" in skipped.reason


def _paused_child(ws: Path, parent: str) -> str:
    from acode.engine.lifecycle import start_session

    s = start_session("child", ws, parent_id=parent)
    s.step("a", lambda ctx: {"n": 1})
    s.pause("stopped")
    s.close()
    return s.id


def test_no_flags_and_no_retention_says_what_to_pass(repo: Path) -> None:
    _completed(repo, "done", "x")
    with pytest.raises(UsageError, match="no --older-than or --state"):
        select_sessions(repo, PruneRequest())


def test_retention_settings_choose_by_state_and_age(repo: Path) -> None:
    old = _completed(repo, "old", "x", days_ago=31)
    _completed(repo, "new", "y", days_ago=29)
    (repo / ".agent" / "config.yml").write_text("retention:\n  completed_days: 30\n")
    assert select_sessions(repo, PruneRequest()).ids == (old,)


def test_a_state_size_limit_prunes_the_oldest_until_it_fits(repo: Path) -> None:
    """Weighed with the images each session alone stored: a session that wrote 200 kB
    frees them, and the oldest one is enough here."""
    ids = [_completed(repo, f"s{i}", os.urandom(100_000).hex()) for i in range(4)]
    paths = StatePaths(repo)
    limit = paths.state_bytes() - 50_000
    (repo / ".agent" / "config.yml").write_text(f"retention:\n  max_state_bytes: {limit}\n")
    selection = select_sessions(repo, PruneRequest())
    assert selection.ids == (ids[0],)
    assert not selection.over_limit
    # Only resumable sessions left: it says it cannot fit.
    (repo / ".agent" / "config.yml").write_text("retention:\n  max_state_bytes: 1\n")
    prune_sessions(repo, select_sessions(repo, PruneRequest()).ids)
    _paused(repo, "resumable")
    stuck = select_sessions(repo, PruneRequest())
    assert stuck.ids == ()
    assert stuck.over_limit


def test_the_space_is_given_back(repo: Path) -> None:
    for i in range(6):
        _completed(repo, f"big{i}", os.urandom(400_000).hex())
    db = StatePaths(repo).db
    before = db.stat().st_size
    _prune(repo)
    assert db.stat().st_size < before / 4


def test_a_database_from_before_schema_8_is_converted_at_its_first_prune(repo: Path) -> None:
    for i in range(3):
        _completed(repo, f"big{i}", os.urandom(300_000).hex())
    db = StatePaths(repo).db
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("PRAGMA auto_vacuum = NONE")
        conn.execute("VACUUM")
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    before = db.stat().st_size
    selection = select_sessions(repo, EVERYTHING)
    report = prune_sessions(repo, selection.ids)
    assert report.converted
    assert report.vacuum_error is None
    assert db.stat().st_size < before / 4
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2


@pytest.fixture
def pruned(repo: Path) -> str:
    done = _completed(repo, "done", "x")
    _prune(repo)
    return done


def _record_error(ws: Path, session_id: str) -> Exception:
    store = SqliteStore.open(StatePaths(ws).db)
    try:
        (record,) = store.pruned_with_prefix(session_id)
        return pruned_error(record)
    finally:
        store.close()


def test_a_pruned_session_is_named_as_pruned(repo: Path, pruned: str) -> None:
    error = _record_error(repo, pruned)
    assert isinstance(error, SessionPrunedError)
    assert "was pruned on" in error.message
    # Resuming it: exit 14 (nothing to resume), with the code that says why.
    with pytest.raises(NothingToResumeError) as refused:
        acode.resume_session(pruned, workspace=repo)
    assert refused.value.code is ErrorCode.SESSION_PRUNED


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE pruned_sessions SET signature = zeroblob(16)",
        "UPDATE pruned_sessions SET last_seq = last_seq + 1",
        "UPDATE pruned_sessions SET state = 'PAUSED'",
    ],
)
def test_an_edited_prune_record_is_tampering(repo: Path, pruned: str, edit: str) -> None:
    with closing(sqlite3.connect(StatePaths(repo).db)) as conn:
        conn.execute(edit)
        conn.commit()
    error = _record_error(repo, pruned)
    assert isinstance(error, CheckpointError)
    assert error.code is ErrorCode.CHAIN_BROKEN


def test_a_forged_record_for_a_deleted_session_is_tampering(repo: Path) -> None:
    """Someone without the key deletes a session and writes a record that it was pruned:
    the record does not verify, and the deletion is reported as tampering."""
    victim = _completed(repo, "victim", "x")
    db = StatePaths(repo).db
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        for trigger in ("events_are_append_only_delete", "step_ids_are_append_only_delete"):
            conn.execute(f"DROP TRIGGER {trigger}")
        sid = conn.execute("SELECT sid FROM sessions WHERE id = ?", (victim,)).fetchone()[0]
        for table in ("events", "steps", "step_ids", "files", "sync_state", "sessions"):
            conn.execute(f"DELETE FROM {table} WHERE sid = ?", (sid,))
        conn.execute(
            "INSERT INTO pruned_sessions VALUES (?, 'COMPLETED', 1, 5, zeroblob(16), ?, ?, 0)",
            (victim, load_signer().key_id, os.urandom(16)),
        )
    with pytest.raises(CheckpointError) as refused:
        acode.resume_session(victim, workspace=repo)
    assert refused.value.code is ErrorCode.CHAIN_BROKEN
    assert "not signed with your key" in refused.value.message


def test_a_prune_killed_after_its_commit_is_finished_by_the_next(repo: Path) -> None:
    """The database part committed, the files not yet removed: what a kill between the
    two leaves. The next prune removes them."""
    done = _completed(repo, "done", "x")
    paths = StatePaths(repo)
    head = _git(repo, "rev-parse", "HEAD").strip()
    _git(repo, "update-ref", f"refs/acode/{done}/w-1", head)
    (paths.locks / f"{done}.lock").write_text("")
    signer = load_signer()
    store = SqliteStore.open(paths.db)
    try:
        store.prune(
            [store.session(done)], now_us=1, key_id=signer.key_id, sign=signer.tag, files_left=1
        )
    finally:
        store.close()
    assert paths.session_dir(done).exists()
    report = prune_sessions(repo, [])
    assert report.leftovers == 1
    assert not paths.session_dir(done).exists()
    assert not (paths.locks / f"{done}.lock").exists()
    assert _git(repo, "for-each-ref", f"refs/acode/{done}") == ""
    assert prune_sessions(repo, []).leftovers == 0


def test_an_image_a_running_session_starts_using_during_the_prune_survives(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other sessions' events are read before the prune's transaction; one written
    in between (a running session that stores the same image) is read inside it."""
    from acode.store.sqlite.pruning import Pruning

    gone = _completed(repo, "gone", "shared")
    running = acode.open_session("running", workspace=repo)
    scan = Pruning._unreferenced
    scans: list[int] = []

    def scan_then_write(self: Pruning, candidates: set[str], going: set[int]) -> object:
        found = scan(self, candidates, going)
        scans.append(1)
        if len(scans) == 2:  # the prune's own scan (the first is its cost's), just before
            # its transaction: the running session writes on its own connection now.
            running.write("w", "again.txt", "shared")
        return found

    try:
        monkeypatch.setattr(Pruning, "_unreferenced", scan_then_write)
        assert prune_sessions(repo, [gone]).selection.ids == (gone,)
        assert len(scans) == 2
        assert _sha("shared") in _blobs(repo)
    finally:
        running.close()
    store = SqliteStore.open(StatePaths(repo).db)
    try:
        assert store.blob(_sha("shared")) == b"shared"
    finally:
        store.close()


@pytest.mark.parametrize("forged_id", ["../../victim", "live"])
def test_a_forged_record_removes_no_file(repo: Path, forged_id: str) -> None:
    """A record someone wrote without the key, saying files are left to remove, names
    a path of their choosing or a session that still exists: nothing of it is removed."""
    live = _paused(repo, "live")
    paths = StatePaths(repo)
    victim = repo.parent / "victim"
    victim.mkdir()
    (victim / "work.txt").write_text("mine")
    target = live if forged_id == "live" else forged_id
    with closing(sqlite3.connect(paths.db)) as conn:
        conn.execute(
            "INSERT INTO pruned_sessions VALUES (?, 'COMPLETED', 1, 1, zeroblob(16), ?, ?, 2)",
            (target, load_signer().key_id, os.urandom(16)),
        )
        conn.commit()
    assert prune_sessions(repo, []).leftovers == 0
    assert (victim / "work.txt").read_text() == "mine"
    assert paths.session_dir(live).is_dir()
    with acode.resume_session(live, workspace=repo) as again:
        assert again.step("a", lambda ctx: pytest.fail("ran again")) == {"n": 1}


def test_files_left_to_remove_of_an_id_that_is_back_stay(repo: Path) -> None:
    """A session pruned by a prune killed before its file removal, then brought back
    under the same id (an import of its archive): its files are the live session's."""
    from acode.domain.retention import prune_record_message

    back = _paused(repo, "back")
    paths = StatePaths(repo)
    signer = load_signer()
    message = prune_record_message(back, "COMPLETED", 1, 3, b"h")
    with closing(sqlite3.connect(paths.db)) as conn:
        conn.execute(
            "INSERT INTO pruned_sessions VALUES (?, 'COMPLETED', 1, 3, ?, ?, ?, 1)",
            (back, b"h", signer.key_id, signer.tag(message)),
        )
        conn.commit()
    assert prune_sessions(repo, []).leftovers == 1
    assert paths.session_dir(back).is_dir()
    with acode.resume_session(back, workspace=repo) as again:
        assert again.step("a", lambda ctx: pytest.fail("ran again")) == {"n": 1}
