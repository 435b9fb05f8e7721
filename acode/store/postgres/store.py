"""The PostgreSQL store (``EventStore``): sessions, events and checkpoints in the schema
`acode_store` of one database, which many workspaces and machines may share.

Every method takes a connection of the store's pool for its statements and gives it
back; a write is one transaction (a single statement is one by itself). Two writers of
one session meet at the events' key (sid, seq): the second is refused, as in SQLite.
The SQL is in ``queries.py``; the rows are read as every backend reads them
(acode.store.rows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from acode.domain.events import Event, EventType
from acode.domain.reducer import StepRecord
from acode.errors import ErrorCode, SessionTakenOverError, StorageError, StoreUnavailableError
from acode.store.base import Durability
from acode.store.postgres import queries as q
from acode.store.postgres.archive_rows import SELECT_STORED_SESSION
from acode.store.postgres.connection import (
    StoreAddress,
    connect,
    open_pool,
    parse_address,
    pool_timeout,
    store_error,
    translated,
)
from acode.store.postgres.migrations import migrate
from acode.store.postgres.writes import Fence, StaleEpoch, run, statements_of
from acode.store.records import (
    Backlog,
    CheckpointRow,
    Commit,
    FileFields,
    FileRow,
    FileTouch,
    MessageRow,
    PrunedRow,
    SessionRow,
    SyncStateRow,
)
from acode.store.rows import (
    checkpoint_position,
    derived_summary,
    event_from_row,
    signature_hex,
    step_from_row,
    step_records,
)
from acode.store.sqlite.blobs import image

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

    from acode.store.archive_records import ArchivedEvent, ArchivedFile, SessionImport
    from acode.store.leases import Lease, LeaseHolder, LeaseOutcome
    from acode.store.records import PruneCost
    from acode.store.sqlite.pruning import Reclaimed

__all__ = ["PostgresStore"]

_T = TypeVar("_T")
_LAST = (1 << 32) - 1  # the highest seq or position a session may have (as in SQLite)
_COMPLETED = EventType.STEP_COMPLETED.value


class PostgresStore:
    def __init__(
        self, pool: ConnectionPool[psycopg.Connection[Any]], address: StoreAddress, url: str
    ) -> None:
        import psycopg
        from psycopg_pool import PoolTimeout

        self._pool = pool
        # Looked up once: the step path catches them at every write.
        self._driver_error = psycopg.Error
        self._pool_timeout = PoolTimeout
        self._lock_not_available = psycopg.errors.LockNotAvailable
        self._address = address
        self._url = url
        # A store opened for one workspace sees its sessions alone (queries.py).
        scope = q.UNSCOPED if address.workspace is None else q.SCOPED
        self._scope: dict[str, Any] = (
            {} if address.workspace is None else {"workspace": address.workspace}
        )
        self._session_by_id = q.scoped(q.SELECT_SESSION_BY_ID, scope)
        self._sessions_by_prefix = q.scoped(q.SELECT_SESSIONS_BY_PREFIX, scope)
        self._sessions = q.scoped(q.SELECT_SESSIONS, scope)
        self._ids_between = q.scoped(q.SELECT_IDS_BETWEEN, scope)
        self._touches_since = q.scoped(q.SELECT_TOUCHES_SINCE, scope)
        self._backlog = q.scoped(q.SELECT_BACKLOG, scope)
        self._scope_sql = scope
        self._stored_session = q.scoped(SELECT_STORED_SESSION, scope)
        # The leases this store's process holds (session id: epoch), those it gave up
        # without the server (forfeit_lease), and the fence of each of those sessions'
        # writes (sid: (session id, epoch); epoch 0: given up, every write refused here).
        self._held: dict[str, int] = {}
        self._forfeited: set[str] = set()
        self._fences: dict[int, Fence] = {}

    @classmethod
    def open(cls, url: str, durability: Durability = "full") -> PostgresStore:
        """The store at ``url`` (``postgresql://``), its schema created or migrated."""
        address = parse_address(url)
        conn = connect(address, durability)
        try:
            with translated(address):
                migrate(conn, address.shown)
        finally:
            conn.close()
        return cls(open_pool(address, durability), address, url)

    @property
    def location(self) -> str:
        return self._address.shown

    @property
    def url(self) -> str:
        return self._url

    def close(self) -> None:
        self._pool.close()

    def _get(self) -> psycopg.Connection[Any]:
        try:
            return self._pool.getconn()
        except self._pool_timeout as exc:
            raise pool_timeout(self._address) from exc

    def _failed(self, exc: Exception) -> StorageError:
        error = store_error(self._address, exc)
        if error.code is ErrorCode.STORE_UNREACHABLE:
            # The server went away (or restarted) under the pool: every idle connection
            # is dead too. Tested now, and replaced, so that one call meets the outage,
            # not one call per connection of the pool.
            self._pool.check()
        return error

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        conn = self._get()
        try:
            yield conn
        except self._driver_error as exc:
            raise self._failed(exc) from exc
        finally:
            self._pool.putconn(conn)

    def _all(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        return self._read(lambda conn: conn.execute(sql, params).fetchall())

    def _one(self, sql: str, params: Any) -> tuple[Any, ...] | None:
        return self._read(lambda conn: conn.execute(sql, params).fetchone())

    def _read(self, read: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """A read, asked again once, on a new connection, when the server was gone from
        under the pool's: a restart of the server between two calls needs no person."""
        try:
            with self._conn() as conn:
                return read(conn)
        except StoreUnavailableError as exc:
            if exc.code is not ErrorCode.STORE_UNREACHABLE:
                raise
        with self._conn() as conn:
            return read(conn)

    # -- sessions ---------------------------------------------------------------------

    def create_session(
        self,
        *,
        session_id: str,
        title: str,
        workspace: str,
        kind: str,
        config_json: str,
        config_hash: str,
        parent_id: str | None,
        created_at: int,
        key_id: str,
        first: Commit,
    ) -> SessionRow:
        row = (
            session_id,
            title,
            first.state,
            workspace,
            parent_id,
            kind,
            config_json,
            config_hash,
            created_at,
            created_at,
            key_id,
        )
        epoch = self._held.get(session_id)
        if session_id in self._forfeited:
            raise _taken_over(session_id, 0)
        fence = None if epoch is None else (session_id, epoch)
        try:
            with self._conn() as conn, conn.transaction():
                found = conn.execute(q.INSERT_SESSION, row).fetchone()
                assert found is not None  # RETURNING gives the new row's
                run(conn, statements_of(int(found[0]), first, fence))
        except StaleEpoch:
            raise _taken_over(session_id, epoch) from None
        if fence is not None:
            self._fences[int(found[0])] = fence
        return self.session(session_id)

    def session(self, session_id: str) -> SessionRow:
        row = self._one(self._session_by_id, {"id": session_id, **self._scope})
        if row is None:
            raise StorageError(f"session {session_id} is not in {self.location}")
        return self._session(row)._replace(short_id=self.short_id(session_id))

    def _session(self, row: tuple[Any, ...]) -> SessionRow:
        """A sessions row with the time, task and step of its newest checkpoint."""
        session = SessionRow(*row)
        newest = self.newest_checkpoint(session)
        if newest is None:
            return session
        task, step = checkpoint_position(newest, session.title)
        return session._replace(
            updated_at=max(session.updated_at, newest.created_at),
            current_task=task,
            current_step=step,
        )

    def sessions_with_prefix(self, prefix: str) -> list[SessionRow]:
        """Sessions whose id starts with ``prefix`` (at most 11, enough to say "ambiguous")."""
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else "\U0010ffff"
        found = self._all(self._sessions_by_prefix, {"low": prefix, "high": upper, **self._scope})
        return [self._session(r)._replace(short_id=self.short_id(r[1])) for r in found]

    def short_id(self, session_id: str) -> str:
        """The session's shortest unique id prefix (at least 8 characters)."""
        from acode.domain.ids import abbreviations

        head = session_id[:8]
        upper = head[:-1] + chr(ord(head[-1]) + 1)
        found = self._all(self._ids_between, {"low": head, "high": upper, **self._scope})
        return abbreviations([*(str(r[0]) for r in found), session_id])[session_id]

    def sessions(self) -> list[SessionRow]:
        """All sessions (of the store's workspace), most recently updated first."""
        from acode.domain.ids import abbreviations

        rows = [self._session(r) for r in self._all(self._sessions, self._scope)]
        rows.sort(key=lambda r: (r.updated_at, r.id), reverse=True)
        short = abbreviations([r.id for r in rows])
        return [r._replace(short_id=short[r.id]) for r in rows]

    # -- writes -----------------------------------------------------------------------

    def commit(self, sid: int, commit: Commit) -> None:
        """Write one Commit in one transaction, or nothing (SessionTakenOverError: the
        session's lease, which this store's process held, is another's now)."""
        fence = self._fence(sid)
        statements = statements_of(sid, commit, fence)
        try:
            with self._conn() as conn:
                if len(statements) == 1:
                    run(conn, statements)  # one statement is a transaction of its own
                    return
                with conn.transaction():
                    run(conn, statements)
        except StaleEpoch:
            raise self._refused(sid) from None

    def append_completion(
        self,
        sid: int,
        seq: int,
        event_id: str,
        ts_us: int,
        payload_json: str,
        hash_: bytes,
        signature: bytes,
    ) -> None:
        """A step's completion: one row, one statement, one round trip (``_conn`` written
        out: the path most steps take)."""
        row: tuple[Any, ...] = (
            sid,
            seq,
            event_id,
            ts_us,
            _COMPLETED,
            payload_json,
            hash_,
            None,
            signature,
        )
        fence = self._fence(sid)
        if fence is not None:
            row = (*fence, *row)
        conn = self._get()
        try:
            written = conn.execute(
                q.INSERT_EVENT if fence is None else q.FENCED_INSERT_EVENT, row
            ).rowcount
        except self._driver_error as exc:
            raise self._failed(exc) from exc
        finally:
            self._pool.putconn(conn)
        if written != 1:
            raise self._refused(sid)

    def rechain(
        self,
        session: SessionRow,
        events: Sequence[tuple[int, str, bytes, bytes | None]],
        old_checkpoints: Sequence[tuple[int, bytes, str]],
        chain: int,
        key_id: str,
    ) -> bool:
        """The history chained again, in one transaction (see SqliteStore.rechain). This
        store has no checkpoints of the table before SQLite's schema 4: ``old_checkpoints``
        is empty."""
        assert not old_checkpoints
        sid = session.sid
        fence = self._fence(sid)
        with self._conn() as conn, conn.transaction():
            if fence is not None and conn.execute(q.FENCE, fence).fetchone() is None:
                raise self._refused(sid)
            found = conn.execute(q.SELECT_CHAIN_FOR_UPDATE, (sid,)).fetchone()
            if found is None or found[0] == chain:
                return False
            conn.execute(q.DISABLE_EVENTS_UPDATE_TRIGGER, prepare=False)
            with conn.cursor() as cur:
                cur.executemany(q.RECHAIN_EVENT, [(p, h, s, sid, seq) for seq, p, h, s in events])
            conn.execute(q.ENABLE_EVENTS_UPDATE_TRIGGER, prepare=False)
            conn.execute(q.MARK_RECHAINED, (chain, key_id, sid))
        return True

    # -- the session's lease (sql/0003_leases.sql) ---------------------------------------

    def take_lease(self, session_id: str, lease: Lease, seconds: float) -> LeaseOutcome:
        """Take the session's lease for ``lease`` for ``seconds`` (acode.store.leases.
        take); once taken, every write of the session by this store names its epoch."""
        from acode.store.leases import take

        params: dict[str, object] = {
            "id": session_id,
            "token": lease.token,
            "host": lease.host,
            "pid": lease.pid,
            "machine": lease.machine,
            "started": lease.started,
            "seconds": seconds,
        }
        sids: list[int | None] = []

        def attempt(gone: str | None, gone_epoch: int | None) -> int | None:
            with self._conn() as conn, conn.transaction():
                # A write of the holder in flight holds the row (FOR SHARE) until it
                # commits: one that does not (its process frozen, or cut off) is not
                # waited for long. Not taken: the holder is named as any other's.
                conn.execute(q.LEASE_LOCK_TIMEOUT)
                try:
                    with conn.transaction():  # a savepoint: the time-out ends it alone
                        taken = conn.execute(
                            q.TAKE_LEASE, {**params, "gone": gone, "gone_epoch": gone_epoch}
                        ).fetchone()
                except self._lock_not_available:
                    taken = None
            if taken is None:
                return None
            sids.append(None if taken[1] is None else int(taken[1]))
            return int(taken[0])

        outcome = take(lease, attempt, lambda: self._lease_holder(session_id))
        if outcome.holder is None and outcome.epoch:
            self._held[session_id] = outcome.epoch
            if sids[-1] is not None:
                self._fences[sids[-1]] = (session_id, outcome.epoch)
        return outcome

    def lease_holder(self, session_id: str) -> LeaseHolder | None:
        """Who holds the session's lease now (None: no one): what `acode status` shows."""
        return self._lease_holder(session_id)[1]

    def _lease_holder(self, session_id: str) -> tuple[str | None, LeaseHolder | None]:
        row = self._one(q.SELECT_LEASE, (session_id,))
        if row is None:
            return None, None
        return str(row[0]), _holder(row[1:])

    def lease_lapse(self, session_id: str) -> tuple[LeaseHolder, float] | None:
        """The holder of the session's unexpired lease and the seconds until it lapses,
        unrenewed, by the server's clock; None when the lease is free or has lapsed."""
        row = self._one(q.SELECT_LEASE_LAPSE, (session_id,))
        if row is None:
            return None
        return _holder(row[1:8]), max(float(row[8]), 0.0)

    def renew_lease(self, session_id: str, lease: Lease, seconds: float) -> bool:
        """Renew the lease this store holds; False when it is another's now."""
        epoch = self._held.get(session_id)
        if epoch is None:
            return False
        params = (seconds, session_id, lease.token, epoch)
        with self._conn() as conn:
            return conn.execute(q.RENEW_LEASE, params).fetchone() is not None

    def holds_lease(self, session_id: str, lease: Lease) -> bool:
        """Whether the lease is still this store's and has not lapsed (the server asked)."""
        epoch = self._held.get(session_id)
        if epoch is None or session_id in self._forfeited:
            return False
        return self._one(q.HOLDS_LEASE, (session_id, lease.token, epoch)) is not None

    def give_back_lease(self, session_id: str, lease: Lease) -> None:
        """Give the lease back (if it is still ours): the next holder takes it at once."""
        epoch = self._held.pop(session_id, 0)
        self._forfeited.discard(session_id)
        self._fences = {s: f for s, f in self._fences.items() if f[0] != session_id}
        if epoch:
            with self._conn() as conn:
                conn.execute(q.GIVE_BACK_LEASE, (session_id, lease.token, epoch))

    def forfeit_lease(self, session_id: str) -> None:
        """This process gives up the session without asking the server (which it may not
        reach): from now on every write of the session by this store is refused."""
        self._forfeited.add(session_id)
        for sid, (held_id, _) in list(self._fences.items()):
            if held_id == session_id:
                self._fences[sid] = (session_id, 0)

    def _fence(self, sid: int) -> Fence | None:
        fence = self._fences.get(sid)
        if fence is not None and not fence[1]:
            raise self._refused(sid)
        return fence

    def _refused(self, sid: int) -> SessionTakenOverError:
        session_id, epoch = self._fences[sid]
        return _taken_over(session_id, epoch)

    # -- events -----------------------------------------------------------------------

    def events(self, session: SessionRow, after_seq: int = 0, limit: int = -1) -> list[Event]:
        rows = self._all(q.SELECT_EVENTS_AFTER, (session.sid, after_seq, _limit(limit)))
        return [event_from_row(session.id, r) for r in rows]

    def event(self, session: SessionRow, seq: int) -> Event:
        row = self._one(q.SELECT_EVENT, (session.sid, seq))
        if row is None:
            raise StorageError(f"session {session.short_id or session.id} has no event {seq}")
        return event_from_row(session.id, row)

    def events_at(self, session: SessionRow, seqs: Sequence[int]) -> dict[int, Event]:
        if not seqs:
            return {}
        rows = self._all(q.SELECT_EVENTS_AT, (session.sid, list(seqs)))
        found = {int(r[0]): event_from_row(session.id, r) for r in rows}
        missing = [seq for seq in seqs if seq not in found]
        if missing:
            raise StorageError(
                f"session {session.short_id or session.id} has no event {missing[0]}"
            )
        return found

    def events_of_type(
        self, session: SessionRow, type_: EventType, after_seq: int = 0
    ) -> list[Event]:
        rows = self._all(q.SELECT_EVENTS_OF_TYPE, (session.sid, after_seq, type_.value))
        return [event_from_row(session.id, r) for r in rows]

    def event_rows(
        self, session: SessionRow, after_seq: int, limit: int
    ) -> list[tuple[int, str, int, str, str, bytes]]:
        rows = self._all(q.SELECT_EVENTS_AFTER, (session.sid, after_seq, _limit(limit)))
        return [(seq, i, ts, t, p, bytes(h)) for seq, i, ts, t, p, h in rows]

    def hashes(self, session: SessionRow, seqs: Sequence[int]) -> dict[int, bytes]:
        if not seqs:
            return {}
        rows = self._all(q.SELECT_HASHES_AT, (session.sid, list(seqs)))
        return {int(seq): bytes(hash_) for seq, hash_ in rows}

    def model_results(
        self, session: SessionRow, after_seq: int = 0, upto_seq: int = _LAST
    ) -> list[dict[str, Any]]:
        import json

        rows = self._all(q.SELECT_MODEL_RESULTS, (session.sid, after_seq, upto_seq))
        return [json.loads(r[0]) for r in rows]

    def step_times(self, session: SessionRow) -> tuple[int, int]:
        row = self._one(q.SELECT_STEP_TIMES, (session.sid,))
        assert row is not None  # an aggregate has a row
        return int(row[0]), int(row[1])

    # -- checkpoints ------------------------------------------------------------------

    def checkpoints(self, session: SessionRow) -> list[CheckpointRow]:
        """The two newest checkpoints, then the two newest that wrote their summary out
        (see SqliteStore.checkpoints); this store has no older table of them."""
        with self._conn() as conn:
            rows = conn.execute(q.SELECT_EVENT_CHECKPOINTS, (session.sid, 2)).fetchall()
            taken = {r[0] for r in rows}
            written = conn.execute(q.SELECT_WRITTEN_CHECKPOINTS, (session.sid,)).fetchall()
        rows += [r for r in written if r[0] not in taken]
        return [self._checkpoint(session, r) for r in rows]

    def newest_checkpoint(self, session: SessionRow) -> CheckpointRow | None:
        row = self._one(q.SELECT_EVENT_CHECKPOINTS, (session.sid, 1))
        return None if row is None else self._checkpoint(session, row)

    def checkpoint_rows(
        self, session: SessionRow
    ) -> list[tuple[int, str | None, bytes | None, int]]:
        rows = self._all(q.SELECT_EVENT_CHECKPOINTS_ASCENDING, (session.sid,))
        return [
            (int(seq), None if text is None else bytes(text).decode(), _bytes(sig), int(ts))
            for seq, text, _, sig, ts in rows
        ]

    def old_checkpoints(self, session: SessionRow) -> list[CheckpointRow]:
        return []  # only SQLite databases recorded before its schema 4 have them

    def _checkpoint(self, session: SessionRow, row: tuple[Any, ...]) -> CheckpointRow:
        seq, text, head, signature, ts = row
        summary = self._derived_summary(session, seq) if text is None else bytes(text).decode()
        return CheckpointRow(
            id=seq,
            seq=seq,
            summary=summary,
            head=bytes(head),
            signature=signature_hex(_bytes(signature)),
            created_at=ts,
        )

    def _derived_summary(self, session: SessionRow, seq: int) -> str:
        """The summary at event ``seq``, derived (acode.store.rows.derived_summary)."""
        with self._conn() as conn:
            found = conn.execute(q.SELECT_SUMMARY_BEFORE, (session.sid, seq)).fetchone()
            if found is None:
                return ""
            base = (int(found[0]), bytes(found[1]))
            rows = conn.execute(q.SELECT_EVENTS_BETWEEN, (session.sid, base[0], seq)).fetchall()
        return derived_summary(session, base, rows)

    # -- steps and the step id ledger ---------------------------------------------------

    def steps(self, sid: int) -> list[StepRecord]:
        records = step_records(self._all(q.SELECT_STEP_EVENTS, (sid,)))
        return [records[p] for p in sorted(records)]

    def step_rows(self, sid: int, first: int = 0, last: int = _LAST) -> list[StepRecord]:
        return [step_from_row(r) for r in self._all(q.SELECT_STEPS_BETWEEN, (sid, first, last))]

    def unfinished_steps(self, sid: int) -> list[StepRecord]:
        return [step_from_row(r) for r in self._all(q.SELECT_UNFINISHED_STEPS, (sid,))]

    def newest_steps(self, session: SessionRow, count: int) -> list[StepRecord]:
        """The records of the ``count`` highest positions, read backwards from the end."""
        records: dict[int, StepRecord] = {}
        upper = _LAST + 1
        while len(records) < count:
            rows = self._all(q.SELECT_NEWEST_STEP_EVENTS, (session.sid, upper, count))
            for position, record in step_records(reversed(rows)).items():
                records.setdefault(position, record)
            if len(rows) < count:
                break
            upper = rows[-1][0]
        return [records[p] for p in sorted(records)[-count:]]

    def has_step_id(self, sid: int, step_id: str) -> bool:
        return self._one(q.HAS_STEP_ID, (sid, step_id)) is not None

    def step_id_ledger(self, sid: int) -> set[str]:
        return {str(r[0]) for r in self._all(q.SELECT_STEP_ID_LEDGER, (sid,))}

    def unledgered_step_ids(self, session: SessionRow) -> list[str]:
        return [str(r[0]) for r in self._all(q.SELECT_UNLEDGERED_STEP_IDS, {"sid": session.sid})]

    # -- messages, files, blobs ---------------------------------------------------------

    def messages(self, sid: int) -> list[MessageRow]:
        return [MessageRow(*r) for r in self._all(q.SELECT_MESSAGES, (sid,))]

    def has_messages(self, sid: int) -> bool:
        return self._one(q.HAS_MESSAGES, (sid,)) is not None

    def files(self, sid: int) -> list[FileRow]:
        return [FileRow(*r) for r in self.file_fields(sid)]

    def file_fields(self, sid: int) -> list[FileFields]:
        rows: list[FileFields] = self._all(q.SELECT_FILES, (sid,))
        return rows

    def touches(self, sid: int, paths: Sequence[str]) -> list[FileTouch]:
        params = {"sid": sid, "paths": list(paths)}
        return [FileTouch(*r) for r in self._all(q.SELECT_TOUCHES, params)]

    def touches_since(self, sid: int, paths: Sequence[str], after_us: int) -> list[FileTouch]:
        params = {"sid": sid, "paths": list(paths), "after": after_us, **self._scope}
        return [FileTouch(*r) for r in self._all(self._touches_since, params)]

    def blob(self, sha256: str) -> bytes:
        row = self._one(q.SELECT_BLOB, (sha256,))
        return image(sha256, None if row is None else (int(row[0]), bytes(row[1])))

    # -- the remote mirror's bookkeeping ------------------------------------------------

    def sync_state(self, sid: int) -> SyncStateRow:
        row = self._one(q.SELECT_SYNC_STATE, (sid,))
        return SyncStateRow(*row) if row else SyncStateRow()

    def last_seq(self, sid: int) -> int:
        row = self._one(q.SELECT_LAST_SEQ, (sid,))
        return 0 if row is None else int(row[0])

    def sync_backlog(self) -> list[Backlog]:
        return [
            Backlog(
                session_id=str(i), last_seq=int(last or 0), remote_id=remote, synced_seq=int(synced)
            )
            for i, last, remote, synced in self._all(self._backlog, self._scope)
        ]

    def mark_synced(self, sid: int, remote_id: str, seq: int, now_us: int) -> None:
        with self._conn() as conn:
            conn.execute(q.MARK_SYNCED, (sid, remote_id, seq, now_us, now_us))

    def record_failure(self, sid: int, reason: str, now_us: int, next_retry_us: int) -> None:
        with self._conn() as conn:
            conn.execute(q.RECORD_FAILURE, (sid, now_us, reason, next_retry_us, now_us))

    # -- a whole session as stored, for archives (acode/operations/archive.py) --------

    def stored_session(self, session_id: str) -> SessionRow | None:
        from acode.store.postgres import archive_rows

        params = {"id": session_id, **self._scope}
        return self._read(lambda c: archive_rows.stored_session(c, self._stored_session, params))

    def stored_events(self, sid: int, after_seq: int, limit: int) -> list[ArchivedEvent]:
        from acode.store.postgres import archive_rows

        return self._read(lambda c: archive_rows.stored_events(c, sid, after_seq, limit))

    def stored_files(self, sid: int) -> list[ArchivedFile]:
        from acode.store.postgres import archive_rows

        return self._read(lambda c: archive_rows.stored_files(c, sid))

    def stored_old_checkpoints(self, sid: int) -> list[tuple[int, CheckpointRow]]:
        return []  # only SQLite databases recorded before its schema 4 have them

    def held_blobs(self, shas: Sequence[str]) -> list[str]:
        from acode.store.postgres import archive_rows

        return self._read(lambda c: archive_rows.held_blobs(c, shas))

    def import_session(self, imported: SessionImport) -> SessionRow:
        """See EventStore.import_session; a store that serves one workspace records the
        session under that workspace (archive_rows.insert_session)."""
        from psycopg.errors import UniqueViolation

        from acode.store.postgres import archive_rows

        session_id = imported.session.id
        try:
            with self._conn() as conn, conn.transaction():
                archive_rows.insert_session(conn, imported, self._address.workspace)
        except StorageError as exc:
            if not isinstance(exc.__cause__, UniqueViolation):
                raise
            if self._one(q.SELECT_SESSION_ID, (session_id,)) is None:
                raise
            if self.stored_session(session_id) is not None:
                raise StorageError(
                    f"session {session_id} is in {self.location} already",
                    hint="nothing was written",
                ) from exc
            raise StorageError(
                f"session {session_id} is in {self.location} already, recorded by another "
                "workspace: a database holds a session once",
                hint="nothing was written; see it from the workspace that recorded it, or "
                "import the archive into a workspace whose store is another database "
                "(or its own SQLite file, without store.url)",
            ) from exc
        return self.session(session_id)

    # -- pruning whole sessions (acode.operations.prune) --------------------------------

    def prune_cost(self, sessions: Sequence[SessionRow]) -> PruneCost:
        from acode.store.postgres import pruning

        return self._read(lambda c: pruning.prune_cost(c, sessions))

    def prune(
        self,
        sessions: Sequence[SessionRow],
        *,
        now_us: int,
        key_id: str,
        sign: Callable[[bytes], bytes],
        files_left: int,
    ) -> list[PrunedRow]:
        """See EventStore.prune (acode/store/postgres/pruning.py): one transaction."""
        from acode.store.postgres import pruning

        if not sessions:
            return []
        with self._conn() as conn, conn.transaction():
            return pruning.prune_sessions(
                conn, sessions, now_us=now_us, key_id=key_id, sign=sign, files_left=files_left
            )

    def pruned_with_prefix(self, prefix: str) -> list[PrunedRow]:
        from acode.store.postgres import pruning

        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else "\U0010ffff"
        sql = q.scoped(pruning.PRUNED_BY_PREFIX, self._scope_sql)
        return [_pruned(r) for r in self._all(sql, {"low": prefix, "high": upper, **self._scope})]

    def pending_file_removals(self) -> list[PrunedRow]:
        from acode.store.postgres import pruning

        sql = q.scoped(pruning.PRUNED_WITH_FILES_LEFT, self._scope_sql)
        return [_pruned(r) for r in self._all(sql, self._scope)]

    def files_removed(self, session_id: str) -> None:
        from acode.store.postgres import pruning

        with self._conn() as conn:
            conn.execute(pruning.CLEAR_FILES_LEFT, (session_id,))

    def reclaim_space(self) -> Reclaimed:
        """A plain VACUUM of the tables a prune deletes from, outside any transaction:
        the space of the removed rows is reused by the rows written next (and empty
        pages at a table's end go back to the file system). Never VACUUM FULL, which
        rewrites a table under a lock that would stop every workspace's steps. A VACUUM
        that fails leaves the prune standing and says why; a role that does not own the
        tables has them skipped by PostgreSQL with a warning (autovacuum does it later)."""
        from acode.store.sqlite.pruning import Reclaimed

        error = None
        conn = self._get()
        try:
            conn.execute(q.VACUUM_PRUNED_TABLES, prepare=False)
        except self._driver_error as exc:
            error = str(exc).strip()
        finally:
            self._pool.putconn(conn)
        return Reclaimed(converted=False, error=error)


def _holder(row: tuple[Any, ...]) -> LeaseHolder:
    """A lease's holder from its row: host, pid, since, expires, machine, started, epoch."""
    from acode.store.leases import LeaseHolder

    host, pid, since, expires, machine, started, epoch = row
    return LeaseHolder(str(host), int(pid), since, expires, machine, started, int(epoch))


def _taken_over(session_id: str, epoch: int | None) -> SessionTakenOverError:
    # The whole id in the hints: a store this process may not reach cannot be asked for
    # the shortest prefix that is unique.
    if not epoch:  # given up by this process itself (acode.engine.leases)
        return SessionTakenOverError(
            "this process no longer holds the session's lease (another process took the "
            "session over, or this one could not renew the lease in time: cut off from "
            "the store?) and stops here without writing more",
            hint=f"`acode session show {session_id}` shows where the session stands; if "
            f"no other process took it over, `acode resume {session_id}` continues it",
        )
    return SessionTakenOverError(
        f"the session was taken over by another process (this process held epoch {epoch} "
        "of its lease): this process stops; the session continues there",
        hint=f"`acode session show {session_id}` shows where it stands",
    )


def _limit(limit: int) -> int | None:
    return None if limit < 0 else limit  # LIMIT NULL: all of them


def _pruned(row: tuple[Any, ...]) -> PrunedRow:
    id_, state, at, seq, hash_, key_id, signature, left = row
    return PrunedRow(
        id=str(id_),
        state=str(state),
        pruned_at=int(at),
        last_seq=int(seq),
        last_hash=bytes(hash_),
        key_id=str(key_id),
        signature=bytes(signature),
        files_left=int(left),
    )


def _bytes(value: bytes | memoryview | None) -> bytes | None:
    return None if value is None else bytes(value)
