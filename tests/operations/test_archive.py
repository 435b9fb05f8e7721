"""`acode session archive` and `import` of real sessions: a round trip gives the same rows
and the same bytes, and every change to an archive is refused before anything is written."""

from __future__ import annotations

import functools
import gzip
import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import acode
from acode.domain.config import AcodeConfig, ModelSettings
from acode.errors import ArchiveError, ErrorCode, SessionLockedError
from acode.operations.archive import archive_session
from acode.operations.archive_import import import_archive
from acode.system.workspace import StatePaths
from tests.support.fake_openai import FakeOpenAI
from tests.support.session_rows import session_rows

TOKEN = "ghp_" + "k7Lm9Np2Qr" * 3 + "St4Uv5"


@pytest.fixture(autouse=True)
def signing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "archive-tests")


def library_session(workspace: Path) -> str:
    """A library session of every kind of row: writes with pre-images, a run with a
    snapshot, a model call with its messages, a python step."""
    (workspace / "notes.txt").write_text("old\n")
    with FakeOpenAI() as fake:
        fake.script([f"The token is {TOKEN}."])
        config = AcodeConfig(model=ModelSettings(base_url=fake.base_url, name="fake-model"))
        with acode.open_session("archive me", workspace, config) as s:
            s.write("notes", "notes.txt", f"token={TOKEN}\n")
            s.step("lookup", lambda ctx: {"found": TOKEN})
            s.model("ask", f"Check {TOKEN}")
            s.run("show", "echo more >> notes.txt", paths=["notes.txt"])
            s.read("again", "notes.txt")
        return s.id


def test_a_round_trip_gives_the_same_rows_and_the_same_bytes(
    workspace: Path, tmp_path: Path
) -> None:
    session_id = library_session(workspace)
    first = tmp_path / "first.acode.gz"
    archived = archive_session(workspace, session_id[:8], first)
    assert archived.counts["events"] > 5
    assert archived.counts["blobs"] >= 2
    assert archived.counts["messages"] >= 2

    elsewhere = tmp_path / "clone"
    elsewhere.mkdir()
    imported = import_archive(elsewhere, first)
    assert imported.new
    assert imported.row.id == session_id

    second = tmp_path / "second.acode.gz"
    archive_session(elsewhere, session_id, second)
    assert second.read_bytes() == first.read_bytes()
    original, copy = session_rows(workspace, session_id), session_rows(elsewhere, session_id)
    assert copy == original
    # Unredacted: the archive is the evidence itself.
    assert TOKEN in gzip.decompress(first.read_bytes()).decode()


def test_importing_again_is_done_already(workspace: Path, tmp_path: Path) -> None:
    session_id = library_session(workspace)
    path = tmp_path / "s.acode.gz"
    archive_session(workspace, session_id, path)
    again = import_archive(workspace, path)
    assert not again.new
    assert again.row.id == session_id


def lines(path: Path) -> list[bytes]:
    return gzip.decompress(path.read_bytes()).splitlines(keepends=True)


def rewrite(path: Path, new_lines: list[bytes]) -> None:
    path.write_bytes(gzip.compress(b"".join(new_lines), mtime=0))


@pytest.fixture
def archived(workspace: Path, tmp_path: Path) -> Path:
    path = tmp_path / "s.acode.gz"
    archive_session(workspace, library_session(workspace), path)
    return path


def refused(tmp_path: Path, path: Path, *codes: ErrorCode) -> ArchiveError:
    target = tmp_path / "target"
    target.mkdir(exist_ok=True)
    with pytest.raises(ArchiveError) as caught:
        import_archive(target, path)
    assert caught.value.code in codes, caught.value
    db = StatePaths(target.resolve()).db
    if db.exists():
        conn = sqlite3.connect(db)
        try:
            assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM blobs").fetchone() == (0,)
        finally:
            conn.close()
    assert not [p for p in (target / ".agent" / "state").glob(".import-*")]
    return caught.value


def test_a_byte_changed_anywhere_is_refused(archived: Path, tmp_path: Path) -> None:
    data = gzip.decompress(archived.read_bytes())
    # One byte of each line but the MAC's: a digit or letter changed for another.
    offset = 0
    for line in data.splitlines(keepends=True)[:-1]:
        at = offset + max(i for i, c in enumerate(line) if chr(c).isalnum())
        changed = bytearray(data)
        changed[at] = ord("0") if changed[at] != ord("0") else ord("1")
        archived.write_bytes(gzip.compress(bytes(changed), mtime=0))
        # A change that breaks the file's form is found as it is read, any other by the MAC.
        error = refused(
            tmp_path,
            archived,
            ErrorCode.ARCHIVE_TAMPERED,
            ErrorCode.ARCHIVE_INVALID,
            ErrorCode.ARCHIVE_OTHER_KEY,
            ErrorCode.ARCHIVE_TOO_NEW,
        )
        assert "nothing was imported" in (error.hint or "") or "upgrade" in (error.hint or "")
        offset += len(line)


def test_a_line_removed_or_moved_is_refused(archived: Path, tmp_path: Path) -> None:
    original = lines(archived)
    events = [i for i, line in enumerate(original) if line.startswith(b'{"checkpoint"')]
    without = original[: events[2]] + original[events[2] + 1 :]
    rewrite(archived, without)
    refused(tmp_path, archived, ErrorCode.ARCHIVE_TAMPERED)
    moved = list(original)
    moved[events[1]], moved[events[2]] = moved[events[2]], moved[events[1]]
    rewrite(archived, moved)
    refused(tmp_path, archived, ErrorCode.ARCHIVE_TAMPERED)


def test_a_checkpoint_signature_changed_is_refused(archived: Path, tmp_path: Path) -> None:
    original = lines(archived)
    changed = []
    for line in original[:-1]:
        record = json.loads(line)
        if record.get("signature") and record["t"] == "event":
            record["signature"] = "00" * 16
        changed.append(json.dumps(record, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    rewrite(archived, [*changed, original[-1]])
    refused(tmp_path, archived, ErrorCode.ARCHIVE_TAMPERED)


def test_another_key_is_told_apart(
    archived: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "another machine's key")
    error = refused(tmp_path, archived, ErrorCode.ARCHIVE_OTHER_KEY)
    assert "same key" in (error.hint or "")
    assert not (tmp_path / "target" / ".agent").exists()  # not even acode's state is made


def test_a_truncated_file_is_refused(archived: Path, tmp_path: Path) -> None:
    data = archived.read_bytes()
    for cut in (len(data) - 1, len(data) // 2, 20, 0):
        archived.write_bytes(data[:cut])
        refused(tmp_path, archived, ErrorCode.ARCHIVE_INVALID)
    assert not (tmp_path / "target" / ".agent").exists()


def test_a_file_that_is_not_an_archive_is_refused(tmp_path: Path) -> None:
    for content in (b"hello\n", gzip.compress(b'{"t":"archive"}\n'), gzip.compress(b"[1]\n")):
        path = tmp_path / "x"
        path.write_bytes(content)
        refused(tmp_path, path, ErrorCode.ARCHIVE_INVALID)


def test_a_newer_format_is_refused(archived: Path, tmp_path: Path) -> None:
    original = lines(archived)
    header = json.loads(original[0])
    header["v"] = 2
    rewrite(archived, [json.dumps(header).encode() + b"\n", *original[1:]])
    error = refused(tmp_path, archived, ErrorCode.ARCHIVE_TOO_NEW)
    assert "upgrade acode" in (error.hint or "")


def test_a_huge_line_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "bomb.gz"
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(b'{"t":"archive","x":"')
        block = b"a" * (1 << 20)
        for _ in range(80):
            out.write(block)
    assert path.stat().st_size < 1 << 20
    error = refused(tmp_path, path, ErrorCode.ARCHIVE_INVALID)
    assert "longer than" in error.message


def test_a_deeply_nested_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nested.gz"
    path.write_bytes(gzip.compress(b"[" * 200_000 + b"\n"))
    refused(tmp_path, path, ErrorCode.ARCHIVE_INVALID)


def test_a_session_a_process_runs_is_not_archived(workspace: Path, tmp_path: Path) -> None:
    with acode.open_session("running", workspace) as s:
        s.step("one", lambda ctx: 1)
        with pytest.raises(SessionLockedError):
            archive_session(workspace, s.id, tmp_path / "s.acode.gz")
    assert not (tmp_path / "s.acode.gz").exists()


def test_an_existing_different_session_is_refused(workspace: Path, tmp_path: Path) -> None:
    session_id = library_session(workspace)
    path = tmp_path / "s.acode.gz"
    archive_session(workspace, session_id, path)
    from acode.operations.maintenance import mark_checkpoint

    mark_checkpoint(workspace, session_id, "later")
    with pytest.raises(ArchiveError) as caught:
        import_archive(workspace, path)
    assert caught.value.code is ErrorCode.ARCHIVE_SESSION_EXISTS


_NAMES = st.sampled_from(["a.txt", "b.txt", "src/c.py"])
_ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), _NAMES, st.binary(max_size=3000)),
        st.tuples(
            st.just("python"),
            st.just(""),
            st.recursive(
                st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                lambda inner: (
                    st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3)
                ),
                max_leaves=8,
            ),
        ),
        st.tuples(st.just("read"), _NAMES, st.just(b"")),
    ),
    min_size=1,
    max_size=12,
)


def _result(value: Any, ctx: object) -> Any:
    return value


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=_ACTIONS, stop=st.booleans())
def test_random_sessions_round_trip(actions: list[tuple[str, str, Any]], stop: bool) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        workspace, clone = root / "ws", root / "clone"
        workspace.mkdir()
        clone.mkdir()
        session = acode.open_session("random", workspace)
        with session as s:
            for n, (kind, name, value) in enumerate(actions):
                if kind == "write":
                    s.write(f"w{n}", name, value)
                elif kind == "python":
                    s.step(f"p{n}", functools.partial(_result, value))
                elif (workspace / name).exists():
                    s.read(f"r{n}", name)
            if stop:
                s.pause("stopped by the test")  # resumable: left PAUSED
        first, second = root / "1.gz", root / "2.gz"
        archive_session(workspace, session.id, first)
        import_archive(clone, first)
        archive_session(clone, session.id, second)
        assert second.read_bytes() == first.read_bytes()
        assert session_rows(clone, session.id) == session_rows(workspace, session.id)


def signed(path: Path, new_lines: list[bytes]) -> None:
    """``new_lines`` (the MAC's line left out) written as an archive with a MAC made with
    the key: what only the key's holder can make."""
    import hashlib

    from acode.operations.archive_format import encode_line, mac_message
    from acode.security.signing import load_signer

    content = b"".join(new_lines)
    mac = load_signer().sign(mac_message(hashlib.sha256(content).digest()))
    path.write_bytes(gzip.compress(content + encode_line({"t": "mac", "mac": mac}), mtime=0))


def edited(path: Path, kind: str, change: Any) -> list[bytes]:
    """The archive's lines but its MAC, the ``kind`` lines passed through ``change``
    (which returns the record, or None to leave it as it is)."""
    out = []
    for line in lines(path)[:-1]:
        record = json.loads(line)
        new = change(record) if record["t"] == kind else None
        out.append(
            line
            if new is None
            else json.dumps(new, sort_keys=True, separators=(",", ":")).encode() + b"\n"
        )
    return out


def test_with_the_key_an_edited_event_is_still_caught_by_its_chain(
    archived: Path, tmp_path: Path
) -> None:
    def change(record: dict[str, Any]) -> dict[str, Any] | None:
        if record["seq"] != 3:
            return None
        return {**record, "ts": record["ts"] + 1}

    signed(archived, edited(archived, "event", change))
    error = refused(tmp_path, archived, ErrorCode.ARCHIVE_TAMPERED)
    assert "does not verify" in error.message
    assert "event 3" in error.message


def test_with_the_key_every_checkpoint_signature_is_checked(archived: Path, tmp_path: Path) -> None:
    """verify_history checks the newest checkpoints and those that wrote their summary
    out; an import checks every one, the derived ones too."""
    events = [json.loads(line) for line in lines(archived)[:-1]]
    derived = [
        e["seq"] for e in events if e["t"] == "event" and e["signature"] and not e["checkpoint"]
    ]
    assert len(derived) > 3
    oldest = derived[0]  # neither among the newest two nor written out

    def change(record: dict[str, Any]) -> dict[str, Any] | None:
        return {**record, "signature": "00" * 16} if record["seq"] == oldest else None

    signed(archived, edited(archived, "event", change))
    error = refused(tmp_path, archived, ErrorCode.ARCHIVE_TAMPERED)
    assert f"checkpoint at event {oldest}" in error.message


def test_with_the_key_rows_that_break_the_schema_are_refused(
    archived: Path, tmp_path: Path
) -> None:
    def change(record: dict[str, Any]) -> dict[str, Any] | None:
        return {**record, "seq": 2} if record["seq"] == 3 else None

    signed(archived, edited(archived, "event", change))
    refused(tmp_path, archived, ErrorCode.ARCHIVE_INVALID)

    def huge(record: dict[str, Any]) -> dict[str, Any] | None:
        return {**record, "ts": 1 << 70} if record["seq"] == 3 else None

    signed(archived, edited(archived, "event", huge))
    refused(tmp_path, archived, ErrorCode.ARCHIVE_INVALID)
