"""The store contract's behaviour: what every ``EventStore`` backend must do.

``EventStoreContract`` holds the tests; a backend's test module subclasses it
(tests/store/test_contract.py), as huey's ``StorageTests`` and LangGraph's checkpoint
conformance suite are run. The ``backend`` fixture is parametrised by ``BACKENDS``: each
entry opens stores of one kind, every call another connection to the same store, so that
two writers can meet: SQLite, in a file of the test's folder, and PostgreSQL, in a
database of its own in the real server of tests/conftest.py (``pg_server``), which is
started only when a PostgreSQL case runs.

The values written here are made by hand, without the engine, but for the last tests,
which drive the journal through the store as a session does: what the engine reads
back (signed checkpoints, the derived summaries, the step id ledger) must verify.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from acode.domain.events import Event, EventType
from acode.domain.ids import uuid7
from acode.domain.reducer import StepRecord, StepStatus
from acode.errors import ErrorCode, StorageError
from acode.store.archive_records import ArchivedFile, SessionImport
from acode.store.base import EventStore, open_store
from acode.store.records import (
    CheckpointRow,
    Commit,
    FileRow,
    MessageRow,
    SessionRow,
    SyncStateRow,
)

# A backend: given the test (for its fixtures) and a fresh directory, a function that
# opens another connection to the one store it names, for as long as the test runs.
Opener = Callable[[], EventStore]


@contextmanager
def _sqlite(request: pytest.FixtureRequest, directory: Path) -> Iterator[Opener]:
    yield lambda: open_store(f"sqlite://{directory / 'acode.db'}")


@contextmanager
def _postgres(request: pytest.FixtureRequest, directory: Path) -> Iterator[Opener]:
    from tests.support.postgres import PgServer, scratch_database

    server: PgServer = request.getfixturevalue("pg_server")
    with scratch_database(server) as name:
        url = server.store_url(name)
        yield lambda: open_store(url)


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], AbstractContextManager[Opener]]] = {
    "sqlite": _sqlite,
    "postgres": _postgres,
}

_MS = 1_790_000_000_000  # a moment in 2026, in milliseconds


def _id(n: int, ms: int = _MS) -> str:
    return uuid7(ms, n.to_bytes(10, "big"))


def _event(seq: int, type_: EventType = EventType.STEP_COMPLETED, **payload: Any) -> Event:
    body = payload or {"position": seq, "result": seq, "step": f"s{seq}"}
    return Event(
        session_id="",  # the store's reads name the session; the writes take its sid
        seq=seq,
        event_id=_id(seq),
        ts_us=_MS * 1000 + seq,
        type=type_,
        payload_json=json.dumps(body, separators=(",", ":"), sort_keys=True),
        hash=seq.to_bytes(16, "big"),
    )


def _commit(events: list[Event], **fields: Any) -> Commit:
    return Commit(events=events, updated_at=_MS * 1000, **fields)


def _message(idx: int, content: str, seq: int) -> MessageRow:
    return MessageRow(idx=idx, role="user", content=content, seq=seq)


def _checkpoint(seq: int, summary: str = "") -> CheckpointRow:
    return CheckpointRow(
        id=seq,
        seq=seq,
        summary=summary or f"[summary at {seq}]",
        head=seq.to_bytes(16, "big"),
        signature=f"{seq:032x}",
        created_at=_MS * 1000 + seq,
    )


class EventStoreContract:
    @pytest.fixture(params=sorted(BACKENDS))
    def backend(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
        opened: list[EventStore] = []
        with BACKENDS[request.param](request, tmp_path) as opener:

            def another() -> EventStore:
                store = opener()
                opened.append(store)
                return store

            try:
                yield another
            finally:
                for store in opened:
                    store.close()

    @pytest.fixture
    def store(self, backend: Opener) -> EventStore:
        return backend()

    @staticmethod
    def new_session(store: EventStore, n: int = 1, events: int = 1) -> SessionRow:
        first = Commit(
            events=[
                _event(1, EventType.SESSION_CREATED, title="t", kind="library", v=1),
                *[_event(seq) for seq in range(2, events + 1)],
            ],
            updated_at=_MS * 1000,
            state="CREATED",
            checkpoint=_checkpoint(events),
        )
        return store.create_session(
            session_id=_id(n, _MS - 1000 + n),
            title=f"session {n}",
            workspace="/work/space",
            kind="library",
            config_json="{}",
            config_hash="c0ffee",
            parent_id=None,
            created_at=_MS * 1000 + n,
            key_id="key-1",
            first=first,
        )

    # -- sessions ---------------------------------------------------------------------

    def test_a_new_session_reads_back_as_it_was_written(self, store: EventStore) -> None:
        row = self.new_session(store)
        assert store.session(row.id) == row
        assert (row.title, row.state, row.workspace, row.kind) == (
            "session 1",
            "CREATED",
            "/work/space",
            "library",
        )
        assert (row.config, row.config_hash, row.parent_id, row.key_id) == (
            "{}",
            "c0ffee",
            None,
            "key-1",
        )
        assert not row.archived
        assert row.id.startswith(row.short_id)
        assert len(row.short_id) >= 8

    def test_sessions_list_newest_first_and_are_found_by_prefix(self, store: EventStore) -> None:
        rows = [self.new_session(store, n) for n in (1, 2, 3)]
        assert [r.id for r in store.sessions()] == [r.id for r in reversed(rows)]
        assert [r.id for r in store.sessions_with_prefix(rows[1].short_id)] == [rows[1].id]
        assert len(store.sessions_with_prefix(rows[1].id[:8])) == 3
        assert store.sessions_with_prefix("f") == []

    def test_an_unknown_session_is_a_storage_error(self, store: EventStore) -> None:
        with pytest.raises(StorageError, match="is not in"):
            store.session(_id(99))

    # -- the log: ordering and append-only ---------------------------------------------

    def test_events_read_back_in_order_from_any_position(self, store: EventStore) -> None:
        row = self.new_session(store)
        for first in (2, 5, 8):
            store.commit(row.sid, _commit([_event(s) for s in range(first, first + 3)]))
        seqs = list(range(1, 11))
        assert [e.seq for e in store.events(row)] == seqs
        assert [e.seq for e in store.events(row, after_seq=4, limit=3)] == [5, 6, 7]
        assert [e.seq for e in store.events(row, after_seq=10)] == []
        assert store.event(row, 7) == replace(_event(7), session_id=row.id)
        assert sorted(store.events_at(row, [9, 2])) == [2, 9]
        assert store.hashes(row, [3, 99]) == {3: _event(3).hash}
        assert [e.seq for e in store.events_of_type(row, EventType.SESSION_CREATED)] == [1]
        assert [r[0] for r in store.event_rows(row, 8, 100)] == [9, 10]
        assert store.last_seq(row.sid) == 10

    def test_a_missing_event_is_a_storage_error(self, store: EventStore) -> None:
        row = self.new_session(store)
        with pytest.raises(StorageError, match="has no event 5"):
            store.event(row, 5)
        with pytest.raises(StorageError, match="has no event 5"):
            store.events_at(row, [1, 5])

    def test_the_log_is_append_only_and_a_refused_commit_keeps_nothing(
        self, store: EventStore
    ) -> None:
        row = self.new_session(store)
        store.commit(row.sid, _commit([_event(2)]))
        before = store.events(row)
        with pytest.raises(StorageError) as refused:
            store.commit(row.sid, _commit([_event(2, result="again")]))
        assert refused.value.code is ErrorCode.STORAGE
        assert refused.value.hint  # what to do next
        with pytest.raises(StorageError):  # a new event, then one that exists: neither
            store.commit(
                row.sid,
                _commit([_event(3), _event(2)], messages=[_message(0, "{}", 3)]),
            )
        with pytest.raises(StorageError):
            store.append_completion(row.sid, 2, _id(50), 0, "{}", b"h" * 16, b"s" * 16)
        assert store.events(row) == before
        assert store.messages(row.sid) == []

    def test_sessions_do_not_see_each_others_events(self, store: EventStore) -> None:
        a, b = self.new_session(store, 1, events=3), self.new_session(store, 2, events=5)
        assert [e.seq for e in store.events(a)] == [1, 2, 3]
        assert [e.seq for e in store.events(b)] == [1, 2, 3, 4, 5]
        assert store.last_seq(a.sid) == 3

    # -- checkpoints ---------------------------------------------------------------------

    def test_the_newest_checkpoints_come_first(self, store: EventStore) -> None:
        row = self.new_session(store)
        for seq in (2, 3, 4):
            store.commit(row.sid, _commit([_event(seq)], checkpoint=_checkpoint(seq)))
        store.commit(row.sid, _commit([_event(5)]))  # no checkpoint
        newest = store.newest_checkpoint(row)
        assert newest == _checkpoint(4)
        found = store.checkpoints(row)
        assert [cp.seq for cp in found[:2]] == [4, 3]
        assert all(cp.seq in (1, 2, 3, 4) for cp in found)
        assert [(seq, text) for seq, text, _, _ in store.checkpoint_rows(row)] == [
            (s, f"[summary at {s}]") for s in (1, 2, 3, 4)
        ]
        assert store.old_checkpoints(row) == []

    def test_a_session_without_a_checkpoint_has_none(self, store: EventStore) -> None:
        row = self.new_session(store)
        other = store.create_session(
            session_id=_id(7, _MS + 7),
            title="bare",
            workspace="/w",
            kind="library",
            config_json="{}",
            config_hash="h",
            parent_id=row.id,
            created_at=1,
            key_id="key-1",
            first=_commit([_event(1)], state="CREATED"),
        )
        assert other.parent_id == row.id
        assert store.newest_checkpoint(other) is None
        assert store.checkpoints(other) == []

    # -- steps and the step id ledger -----------------------------------------------------

    def test_step_rows_and_records(self, store: EventStore) -> None:
        row = self.new_session(store)
        started = StepRecord(
            position=0,
            step_id="a",
            kind="write",
            status=StepStatus.IN_PROGRESS,
            attempt=1,
            task_id="t",
            input_hash="ih",
            event_seq=2,
        )
        store.commit(
            row.sid,
            _commit(
                [_event(2, EventType.STEP_STARTED, position=0, step="a", kind="write", attempt=1)],
                steps=[started],
            ),
        )
        assert store.step_rows(row.sid) == [started]
        assert store.unfinished_steps(row.sid) == [started]
        done = replace(started, status=StepStatus.COMPLETED, event_seq=3)
        store.commit(
            row.sid, _commit([_event(3, position=0, step="a", kind="write")], steps=[done])
        )
        assert store.step_rows(row.sid) == [done]
        assert store.unfinished_steps(row.sid) == []
        assert [(r.position, r.step_id, r.status) for r in store.steps(row.sid)] == [
            (0, "a", StepStatus.COMPLETED)
        ]
        assert [r.step_id for r in store.newest_steps(row, 5)] == ["a"]
        # One step, timed from the event before its start record (2 µs before its end).
        assert store.step_times(row) == (1, 2)

    def test_the_step_id_ledger(self, store: EventStore) -> None:
        row = self.new_session(store)
        store.commit(
            row.sid,
            _commit([_event(2)], checkpoint=_checkpoint(2), step_ids=["s1", "s2"]),
        )
        store.commit(
            row.sid, _commit([_event(3)], checkpoint=_checkpoint(3), summary_written=False)
        )
        assert store.has_step_id(row.sid, "s2")
        assert not store.has_step_id(row.sid, "s3")
        assert store.step_id_ledger(row.sid) == {"s1", "s2"}
        assert store.unledgered_step_ids(row) == ["s3"]  # after the newest summary written
        store.commit(row.sid, _commit([_event(4)], checkpoint=_checkpoint(4), step_ids=["s1"]))
        assert store.step_id_ledger(row.sid) == {"s1", "s2"}  # a step id is held once

    # -- messages, files, blobs ----------------------------------------------------------

    def test_messages_files_and_blobs_read_back(self, store: EventStore) -> None:
        row = self.new_session(store)
        data = os.urandom(3000)
        sha = hashlib.sha256(data).hexdigest()
        files = [
            FileRow(path="b.txt", sha256=sha, size=3000, mtime_ns=5, ctime_ns=6, ino=7),
            FileRow(path="a.txt", sha256=None, size=None, mtime_ns=None),
        ]
        store.commit(
            row.sid,
            Commit(
                [_event(2)],
                0,
                messages=[_message(0, '"hi"', 2), _message(1, '"yo"', 2)],
                blobs=[(sha, data)],
                files=files,
            ),
        )
        assert store.has_messages(row.sid)
        assert [m.content for m in store.messages(row.sid)] == ['"hi"', '"yo"']
        assert store.blob(sha) == data
        assert store.files(row.sid) == sorted(files)
        assert store.file_fields(row.sid) == [tuple(f) for f in sorted(files)]
        (touch,) = store.touches(row.sid, ["a.txt"])
        assert (touch.session_id, touch.seq, touch.step) == (row.id, 2, "s2")
        assert store.touches_since(row.sid, ["a.txt"], 0) == []  # no other session's

    def test_a_missing_blob_is_a_storage_error(self, store: EventStore) -> None:
        with pytest.raises(StorageError, match="missing"):
            store.blob("0" * 64)

    # -- the remote mirror's bookkeeping -------------------------------------------------

    def test_sync_marks_move_forward_only(self, store: EventStore) -> None:
        row = self.new_session(store, events=6)
        assert store.sync_state(row.sid) == SyncStateRow()
        store.record_failure(row.sid, "refused", now_us=10, next_retry_us=20)
        assert store.sync_state(row.sid).failures == 1
        store.mark_synced(row.sid, "remote-a", 5, now_us=30)
        store.mark_synced(row.sid, "remote-a", 3, now_us=40)
        state = store.sync_state(row.sid)
        assert (state.synced_seq, state.failures, state.last_error) == (5, 0, None)
        (backlog,) = store.sync_backlog()
        assert (backlog.session_id, backlog.last_seq, backlog.pending_for()) == (row.id, 6, 1)

    # -- a whole session, for archives ---------------------------------------------------

    def full_session(self, store: EventStore) -> tuple[SessionRow, bytes]:
        """A session with a row in every table it can have rows in, and a blob."""
        row = self.new_session(store, events=3)
        data = os.urandom(100)
        sha = hashlib.sha256(data).hexdigest()
        store.commit(
            row.sid,
            _commit(
                [_event(4)],
                checkpoint=_checkpoint(4),
                summary_written=False,
                steps=[StepRecord(4, "s4", "write", StepStatus.FAILED, 2, "t", "ih", 4)],
                step_ids=["s2", "s3"],
                messages=[_message(0, '"hi"', 4)],
                blobs=[(sha, data)],
                files=[FileRow("a.txt", sha, 100, 1, 2, 3)],
            ),
        )
        store.record_failure(row.sid, "refused", now_us=10, next_retry_us=20)
        return store.session(row.id), data

    def test_a_session_reads_back_as_stored(self, store: EventStore) -> None:
        row, data = self.full_session(store)
        stored = store.stored_session(row.id)
        assert stored is not None
        # Its own updated_at, which a step's commit does not move (its checkpoint's time
        # is what ``session`` reads).
        assert stored.updated_at <= row.updated_at
        assert stored._replace(updated_at=0) == row._replace(
            current_task=None, current_step=None, short_id="", updated_at=0
        )
        assert store.stored_session(_id(99)) is None
        events = store.stored_events(row.sid, 0, 10)
        assert [e.seq for e in events] == [1, 2, 3, 4]
        assert [e.event_id for e in events] == [e.event_id for e in store.events(row)]
        assert [(e.checkpoint, e.signature) for e in events] == [
            (None, None),
            (None, None),
            ("[summary at 3]", bytes.fromhex(f"{3:032x}")),
            (None, bytes.fromhex(f"{4:032x}")),  # its summary derived, not written
        ]
        assert [e.seq for e in store.stored_events(row.sid, 2, 1)] == [3]
        sha = hashlib.sha256(data).hexdigest()
        assert store.stored_files(row.sid) == [ArchivedFile("a.txt", sha, 100, 1, 2, 3, 4)]
        assert store.stored_old_checkpoints(row.sid) == []
        assert store.held_blobs([sha, "0" * 64, sha]) == [sha]

    def importing(self, store: EventStore, row: SessionRow, session_id: str) -> SessionImport:
        """``row``'s rows as an import takes them, one pass over each, under ``session_id``."""
        stored = store.stored_session(row.id)
        assert stored is not None
        sid = row.sid
        return SessionImport(
            session=stored._replace(id=session_id),
            sync_state=store.sync_state(sid),
            events=iter(store.stored_events(sid, 0, -1)),
            steps=iter(store.step_rows(sid)),
            old_checkpoints=iter(store.stored_old_checkpoints(sid)),
            messages=iter(store.messages(sid)),
            step_ids=iter(sorted(store.step_id_ledger(sid))),
            files=iter(store.stored_files(sid)),
            blobs=iter(
                [
                    (sha, store.blob(sha))
                    for sha in store.held_blobs(
                        [f.sha256 for f in store.stored_files(sid) if f.sha256]
                    )
                ]
            ),
        )

    def test_an_imported_session_is_the_same_rows_under_a_sid_of_its_own(
        self, backend: Opener
    ) -> None:
        store = backend()
        row, _ = self.full_session(store)
        copy = backend().import_session(self.importing(store, row, _id(7)))
        assert copy.sid != row.sid
        assert copy == store.session(copy.id)
        assert copy._replace(sid=row.sid, id=row.id, short_id="") == row._replace(short_id="")
        assert store.stored_events(copy.sid, 0, -1) == store.stored_events(row.sid, 0, -1)
        assert store.step_rows(copy.sid) == store.step_rows(row.sid)
        assert store.messages(copy.sid) == store.messages(row.sid)
        assert store.step_id_ledger(copy.sid) == store.step_id_ledger(row.sid)
        assert store.stored_files(copy.sid) == store.stored_files(row.sid)
        assert store.sync_state(copy.sid) == store.sync_state(row.sid)
        assert store.checkpoints(copy) == store.checkpoints(row)

    def test_an_import_of_a_session_held_already_writes_nothing(self, store: EventStore) -> None:
        row, _ = self.full_session(store)
        with pytest.raises(StorageError, match="already"):
            store.import_session(self.importing(store, row, row.id))
        assert [r.id for r in store.sessions()] == [row.id]

    def test_an_import_that_fails_half_way_writes_nothing(self, store: EventStore) -> None:
        row, _ = self.full_session(store)
        imported = self.importing(store, row, _id(8))

        def failing() -> Iterator[Any]:
            yield from imported.files
            raise StorageError("the archive broke off")

        with pytest.raises(StorageError, match="broke off"):
            store.import_session(imported._replace(files=failing()))
        assert [r.id for r in store.sessions()] == [row.id]
        assert store.stored_session(_id(8)) is None

    # -- pruning whole sessions ------------------------------------------------------------

    def sharing(self, store: EventStore, n: int, *images: bytes) -> SessionRow:
        """A completed session whose last event names each of ``images`` (stored)."""
        row = self.new_session(store, n, events=2)
        shas = [hashlib.sha256(data).hexdigest() for data in images]
        store.commit(
            row.sid,
            _commit(
                [_event(3, position=3, step="s3", result=shas)],
                state="COMPLETED",
                messages=[_message(0, '"hi"', 3)],
                step_ids=["s2"],
                blobs=list(zip(shas, images, strict=True)),
            ),
        )
        return store.session(row.id)

    def test_a_prune_removes_whole_sessions_and_the_images_only_they_used(
        self, store: EventStore
    ) -> None:
        shared, own = b"shared image", b"own image"
        gone = self.sharing(store, 1, shared, own)
        stays = self.sharing(store, 2, shared)
        cost = store.prune_cost([gone])
        assert cost.events == {gone.id: 3}
        assert cost.bytes[gone.id] > 0
        assert cost.blobs == 1  # the shared image stays
        assert cost.blob_bytes > 0
        alone = store.prune_cost([gone, stays]).own_images
        assert alone[gone.id] > 0
        assert alone[stays.id] == 0  # its one image is the other's too

        records = store.prune([gone], now_us=7, key_id="key-1", sign=lambda m: m[-4:], files_left=1)
        (record,) = records
        assert (record.id, record.state, record.pruned_at) == (gone.id, "COMPLETED", 7)
        assert record.last_seq == 3
        assert record.last_hash == (3).to_bytes(16, "big")
        assert [r.id for r in store.sessions()] == [stays.id]
        assert store.stored_session(gone.id) is None
        assert store.stored_events(gone.sid, 0, -1) == []
        assert store.messages(gone.sid) == []
        assert store.step_id_ledger(gone.sid) == set()
        sha_shared, sha_own = (hashlib.sha256(d).hexdigest() for d in (shared, own))
        assert store.held_blobs([sha_shared, sha_own]) == [sha_shared]
        assert [e.seq for e in store.events(stays)] == [1, 2, 3]

        assert store.pruned_with_prefix(gone.id[:8]) == records
        assert store.pruned_with_prefix(stays.id) == []
        assert store.pending_file_removals() == records
        store.files_removed(gone.id)
        assert store.pending_file_removals() == []
        assert store.pruned_with_prefix(gone.id)[0].files_left == 0
        assert store.reclaim_space().error is None

    def test_a_prune_of_nothing_changes_nothing(self, store: EventStore) -> None:
        row = self.sharing(store, 1, b"image")
        assert store.prune([], now_us=1, key_id="k", sign=bytes, files_left=1) == []
        assert [r.id for r in store.sessions()] == [row.id]
        assert store.pending_file_removals() == []

    def test_a_prune_that_fails_half_way_removes_nothing(self, store: EventStore) -> None:
        first, second = self.sharing(store, 1, b"one"), self.sharing(store, 2, b"two")
        signed: list[bytes] = []

        def sign(message: bytes) -> bytes:
            if signed:
                raise StorageError("the key went away")
            signed.append(message)
            return b"tag"

        with pytest.raises(StorageError, match="went away"):
            store.prune([first, second], now_us=1, key_id="k", sign=sign, files_left=1)
        assert sorted(r.id for r in store.sessions()) == sorted([first.id, second.id])
        assert [e.seq for e in store.events(first)] == [1, 2, 3]
        assert store.pruned_with_prefix(first.id) == []
        assert len(store.held_blobs([hashlib.sha256(b"one").hexdigest()])) == 1

    # -- two writers -------------------------------------------------------------------

    def test_two_writers_at_once_lose_nothing(self, backend: Opener) -> None:
        first, second = backend(), backend()
        rows = [self.new_session(first, 1), self.new_session(second, 2)]
        errors: list[BaseException] = []

        def write(store: EventStore, row: SessionRow) -> None:
            try:
                for seq in range(2, 52):
                    store.commit(row.sid, _commit([_event(seq)], checkpoint=_checkpoint(seq)))
            except BaseException as exc:  # reported below, not lost in the thread
                errors.append(exc)

        threads = [
            threading.Thread(target=write, args=(s, r))
            for s, r in zip((first, second), rows, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        reader = backend()
        for row in rows:
            assert [e.seq for e in reader.events(row)] == list(range(1, 52))

    def test_two_writers_of_one_event_one_wins(self, backend: Opener) -> None:
        first, second = backend(), backend()
        row = self.new_session(first)
        first.commit(row.sid, _commit([_event(2, result="first")]))
        with pytest.raises(StorageError):
            second.commit(row.sid, _commit([_event(2, result="second")]))
        assert second.event(row, 2).payload["result"] == "first"

    # -- the engine through the contract -------------------------------------------------

    def test_a_journal_written_through_the_store_verifies_from_another_connection(
        self, backend: Opener, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from acode.engine.journal import (
            SUMMARY_EVERY,
            Journal,
            new_session_journal,
            verify_history,
        )
        from acode.security.signing import load_signer
        from acode.system.clock import SystemClock

        monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", "contract")
        signer, clock = load_signer(), SystemClock()
        journal = new_session_journal(
            backend(),
            session_id=_id(1, clock.now_us() // 1000),
            title="through the store",
            workspace="/work/space",
            kind="library",
            config_json="{}",
            config_hash="h",
            parent_id=None,
            entries=[
                (
                    EventType.SESSION_CREATED,
                    {"title": "through the store", "kind": "library", "v": 1},
                ),
                (
                    EventType.STATE_CHANGED,
                    {"from": "CREATED", "to": "EXECUTING", "reason": "started"},
                ),
            ],
            clock=clock,
            signer=signer,
        )
        steps = SUMMARY_EVERY + 8  # one summary written out on the way, then derived ones
        for position in range(steps):
            journal.write_completion(
                {"position": position, "result": position, "step": f"s{position}"}
            )
        reader = backend()
        row = reader.session(journal.session_id)
        summary = verify_history(reader, row, signer)
        assert summary.steps_completed == steps
        loaded = Journal.load(reader, row, clock, signer)
        assert loaded.summary == journal.summary
        assert loaded.unledgered_step_ids == journal.unledgered_step_ids
        held = {f"s{p}" for p in range(steps)} - journal.unledgered_step_ids
        assert held
        assert reader.step_id_ledger(row.sid) == held
