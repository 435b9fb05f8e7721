"""The PostgreSQL store beyond the contract: its schema keeps the log append-only
whoever writes to it, workspaces share a database without seeing each other's sessions,
and a server that is down, a login it refuses or a newer schema are errors that say
what to do, never with the password. Against the real server of tests/conftest.py."""

from __future__ import annotations

import socket
import threading
from contextlib import closing
from typing import Any

import pytest

from acode.errors import (
    ErrorCode,
    SchemaTooNewError,
    StorageError,
    StoreUnavailableError,
    StoreUrlError,
)
from acode.store.base import EventStore, open_store, workspace_url
from acode.store.postgres.migrations import available_migrations
from tests.store.contract import EventStoreContract, _event, _message
from tests.store.contract import _commit as commit_of
from tests.support.postgres import PASSWORD_ROLE, PgServer

SECRET = "n0t-the-pa55word"


@pytest.fixture
def url(pg_server: PgServer, dbname: str) -> str:
    return pg_server.store_url(dbname)


def _sql(pg: PgServer, dbname: str, statement: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(pg.direct_dsn(dbname), autocommit=True) as conn:
        cur = conn.execute(statement.encode())
        return cur.fetchall() if cur.description else []


def _session(store: EventStore, n: int, workspace: str = "/work/space") -> Any:
    row = EventStoreContract.new_session(store, n)
    assert row.workspace == "/work/space"
    return row


# -- append-only, in the database ----------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE acode_store.events SET payload = '{}' WHERE seq = 1",
        "DELETE FROM acode_store.events WHERE seq = 1",
        "TRUNCATE acode_store.events CASCADE",
        "UPDATE acode_store.messages SET content = 'x'",
        "DELETE FROM acode_store.messages",
        "TRUNCATE acode_store.messages",
        "UPDATE acode_store.step_ids SET step_id = 'x'",
        "DELETE FROM acode_store.step_ids",
    ],
)
def test_the_database_refuses_edits_of_the_log(
    pg_server: PgServer, dbname: str, url: str, statement: str
) -> None:
    import psycopg

    with closing(open_store(url)) as store:
        row = _session(store, 1)
        store.commit(
            row.sid,
            commit_of([_event(2)], messages=[_message(0, "{}", 2)], step_ids=["s2"]),
        )
    with pytest.raises(psycopg.Error, match="append-only"):
        _sql(pg_server, dbname, statement)
    assert _sql(pg_server, dbname, "SELECT count(*) FROM acode_store.events") == [(2,)]


def _prune(store: EventStore, row: Any) -> None:
    store.prune([row], now_us=1, key_id="k", sign=lambda m: b"tag", files_left=1)


def test_only_a_prune_deletes_and_only_its_own_session(
    pg_server: PgServer, dbname: str, url: str
) -> None:
    """The triggers let a DELETE through only for the session the transaction-local
    setting names: not another session in the same transaction, not after it ends."""
    import psycopg

    with closing(open_store(url)) as store:
        first, second = _session(store, 1), _session(store, 2)
        with psycopg.connect(pg_server.direct_dsn(dbname)) as conn:
            conn.execute("SELECT set_config('acode.pruning', %s, true)", (str(first.sid),))
            conn.execute("DELETE FROM acode_store.events WHERE sid = %s", (first.sid,))
            with pytest.raises(psycopg.Error, match="append-only"):
                conn.execute("DELETE FROM acode_store.events WHERE sid = %s", (second.sid,))
            conn.rollback()
            conn.execute("SELECT set_config('acode.pruning', %s, true)", (str(first.sid),))
            conn.commit()  # the setting ends with its transaction
            with pytest.raises(psycopg.Error, match="append-only"):
                conn.execute("DELETE FROM acode_store.events WHERE sid = %s", (first.sid,))
        _prune(store, first)
        assert [r.id for r in store.sessions()] == [second.id]
    with pytest.raises(psycopg.Error, match="append-only"):
        _sql(pg_server, dbname, f"DELETE FROM acode_store.events WHERE sid = {second.sid}")
    assert _sql(pg_server, dbname, "SELECT count(*) FROM acode_store.events") == [(1,)]


def test_a_schema_1_store_is_upgraded_and_its_sessions_can_be_pruned(
    pg_server: PgServer, dbname: str, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    from acode.store.postgres import migrations

    first = available_migrations()[:1]
    with monkeypatch.context() as m:
        m.setattr(migrations, "available_migrations", lambda: first)
        with closing(open_store(url)) as old:
            row = _session(old, 1)
            kept = _session(old, 2)
    assert _sql(pg_server, dbname, "SELECT max(version) FROM acode_store.schema_version") == [(1,)]
    with closing(open_store(url)) as store:
        assert _sql(pg_server, dbname, "SELECT max(version) FROM acode_store.schema_version") == [
            (len(available_migrations()),)
        ]
        assert [e.seq for e in store.events(store.session(row.id))] == [1]
        _prune(store, store.session(row.id))
        assert [r.id for r in store.sessions()] == [kept.id]
        assert [r.id for r in store.pruned_with_prefix(row.id)] == [row.id]
    with pytest.raises(psycopg.Error, match="append-only"):
        _sql(pg_server, dbname, "DELETE FROM acode_store.events")


def test_a_workspace_sees_and_finishes_only_its_own_prune_records(url: str) -> None:
    with (
        closing(open_store(workspace_url(url, "/work/space"))) as mine,
        closing(open_store(workspace_url(url, "/work/other"))) as theirs,
    ):
        row = _session(mine, 1)
        _prune(mine, row)
        assert [r.id for r in mine.pending_file_removals()] == [row.id]
        assert theirs.pending_file_removals() == []
        assert theirs.pruned_with_prefix(row.id[:8]) == []


def test_reclaiming_space_vacuums_the_pruned_tables(
    pg_server: PgServer, dbname: str, url: str
) -> None:
    count = (
        "SELECT vacuum_count FROM pg_stat_user_tables"
        " WHERE schemaname = 'acode_store' AND relname = 'events'"
    )
    with closing(open_store(url)) as store:
        _prune(store, _session(store, 1))
        before = _sql(pg_server, dbname, count)[0][0]
        reclaimed = store.reclaim_space()
    assert (reclaimed.converted, reclaimed.error) == (False, None)
    assert _sql(pg_server, dbname, count)[0][0] == before + 1


# -- many workspaces in one database -------------------------------------------------------


def test_workspaces_sharing_a_database_see_their_own_sessions(url: str) -> None:
    with (
        closing(open_store(workspace_url(url, "/work/space"))) as mine,
        closing(open_store(workspace_url(url, "/work/other"))) as theirs,
        closing(open_store(url)) as everything,
    ):
        row = _session(mine, 1)
        other = theirs.create_session(
            session_id=row.id[:-1] + ("0" if row.id[-1] != "0" else "1"),
            title="theirs",
            workspace="/work/other",
            kind="library",
            config_json="{}",
            config_hash="h",
            parent_id=None,
            created_at=1,
            key_id="k",
            first=commit_of([_event(1)], state="CREATED"),
        )
        assert [r.id for r in mine.sessions()] == [row.id]
        assert [r.id for r in theirs.sessions()] == [other.id]
        assert sorted(r.id for r in everything.sessions()) == sorted([row.id, other.id])
        # Their ids share 35 characters: only where both are seen is a long prefix needed.
        assert len(mine.session(row.id).short_id) < len(everything.session(row.id).short_id)
        assert [r.id for r in mine.sessions_with_prefix(row.id[:8])] == [row.id]
        with pytest.raises(StorageError, match="is not in"):
            mine.session(other.id)
        assert [b.session_id for b in mine.sync_backlog()] == [row.id]
        with closing(open_store(mine.url)) as again:  # its URL opens the same view
            assert [r.id for r in again.sessions()] == [row.id]


def test_two_processes_opening_a_new_database_at_once_migrate_it_once(url: str) -> None:
    errors: list[BaseException] = []

    def open_and_close() -> None:
        try:
            open_store(url).close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_and_close) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    numbers = [m.number for m in available_migrations()]
    assert numbers == list(range(1, len(numbers) + 1))


# -- errors a person meets -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "nohost.invalid:5432"])
def test_a_server_that_does_not_answer_is_named_without_the_password(host: str) -> None:
    where = host.format(port=_free_port())
    with pytest.raises(StoreUnavailableError) as refused:
        open_store(f"postgresql://acode:{SECRET}@{where}/acode")
    error = refused.value
    assert error.code is ErrorCode.STORE_UNREACHABLE
    assert error.exit_code == 1
    assert f"postgresql://acode@{where}/acode" in error.message
    assert "does not answer" in error.message
    assert SECRET not in str(error)
    assert error.hint is not None
    assert "start the server" in error.hint


def _password_role(pg_server: PgServer, dbname: str) -> tuple[str, str]:
    role, right = PASSWORD_ROLE
    if not pg_server.embedded:  # a given server: the role may have to be made first
        _sql(
            pg_server,
            dbname,
            f"DO $$ BEGIN CREATE ROLE {role} LOGIN PASSWORD '{right}';"
            " EXCEPTION WHEN duplicate_object THEN NULL; END $$",
        )
    return role, right


def test_a_wrong_password_is_refused_without_showing_it(pg_server: PgServer, dbname: str) -> None:
    role, _ = _password_role(pg_server, dbname)
    with pytest.raises(StoreUnavailableError) as refused:
        open_store(pg_server.store_url(dbname, user=role, password=SECRET))
    error = refused.value
    assert error.code is ErrorCode.STORE_REFUSED
    assert "password authentication failed" in error.message
    assert SECRET not in str(error)
    assert f"{role}@" in error.message


def test_a_role_that_may_not_create_the_schema_is_refused_as_a_login_not_a_write(
    pg_server: PgServer, dbname: str
) -> None:
    # The password role may connect to the new database, not create anything in it.
    role, right = _password_role(pg_server, dbname)
    with pytest.raises(StoreUnavailableError) as refused:
        open_store(pg_server.store_url(dbname, user=role, password=right))
    error = refused.value
    assert (error.code, error.exit_code) == (ErrorCode.STORE_REFUSED, 1)
    assert "permission denied" in error.message
    assert error.hint is not None
    assert f"GRANT CREATE ON DATABASE {dbname} TO {role}" in error.hint
    assert f"CREATE SCHEMA acode_store AUTHORIZATION {role}" in error.hint
    assert "acode resume" not in error.hint  # nothing was started that could go on
    assert _sql(pg_server, dbname, "SELECT to_regnamespace('acode_store')") == [(None,)]
    # The schema made by another role: its tables are not this one's.
    open_store(pg_server.store_url(dbname)).close()
    with pytest.raises(StoreUnavailableError) as refused:
        open_store(pg_server.store_url(dbname, user=role, password=right))
    assert refused.value.code is ErrorCode.STORE_REFUSED
    assert "permission denied for schema acode_store" in refused.value.message
    assert f"make {role} their owner" in (refused.value.hint or "")


def test_a_database_that_does_not_exist_is_refused(pg_server: PgServer) -> None:
    with pytest.raises(StoreUnavailableError) as refused:
        open_store(pg_server.store_url("acode_no_such_database"))
    assert refused.value.code is ErrorCode.STORE_REFUSED
    assert "acode_no_such_database" in refused.value.message


def test_a_newer_schema_is_refused_and_left_untouched(
    pg_server: PgServer, dbname: str, url: str
) -> None:
    open_store(url).close()
    newer = len(available_migrations()) + 1
    _sql(pg_server, dbname, f"INSERT INTO acode_store.schema_version (version) VALUES ({newer})")
    before = _sql(pg_server, dbname, "SELECT version FROM acode_store.schema_version")
    with pytest.raises(SchemaTooNewError) as refused:
        open_store(url)
    assert refused.value.code is ErrorCode.SCHEMA_TOO_NEW
    assert f"schema version {newer}" in refused.value.message
    assert "upgrade acode" in (refused.value.hint or "")
    assert _sql(pg_server, dbname, "SELECT version FROM acode_store.schema_version") == before


def test_connections_the_server_ended_fail_one_write_and_no_read(
    pg_server: PgServer, dbname: str, url: str
) -> None:
    with closing(open_store(url)) as store:
        row = _session(store, 1)
        kill = (
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            f" WHERE datname = '{dbname}' AND pid != pg_backend_pid()"
        )
        _sql(pg_server, dbname, kill)
        # The pool's connections were cut: the write that meets it fails, naming the
        # cause; the pool replaces them all then, and the next calls go through.
        with pytest.raises(StoreUnavailableError) as cut:
            store.commit(row.sid, commit_of([_event(2)]))
        assert cut.value.code is ErrorCode.STORE_UNREACHABLE
        assert "administrator command" in cut.value.message
        assert store.last_seq(row.sid) == 1
        store.commit(row.sid, commit_of([_event(2)]))
        assert store.last_seq(row.sid) == 2
        _sql(pg_server, dbname, kill)
        assert store.last_seq(row.sid) == 2  # a read is asked again on a new connection


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://acode:pw@/acode?host=%2Fvar%2Frun%2Fpostgresql&port=5433",
            "postgresql://acode@/acode?host=/var/run/postgresql&port=5433",
        ),
        ("postgresql://acode@/acode?port=5433", "postgresql://acode@/acode?port=5433"),
        ("postgresql://acode:pw@db:5433/acode?sslmode=require", "postgresql://acode@db:5433/acode"),
        ("postgresql:///acode", "postgresql://localhost/acode"),
    ],
)
def test_a_store_is_named_by_where_it_connects_without_the_password(url: str, shown: str) -> None:
    # Two servers of one machine differ by the port of their socket: both are shown.
    from acode.store.postgres.connection import parse_address

    assert parse_address(url).shown == shown


@pytest.mark.parametrize(
    ("query", "named"),
    [("foo=bar", "foo"), ("sslmode=bogus", "sslmode"), ("target_session_attrs=xx", "xx")],
)
def test_an_option_libpq_refuses_is_a_store_url_error_not_an_outage(query: str, named: str) -> None:
    # Refused before any connection is tried: no server needed, and none is blamed.
    with pytest.raises(StoreUrlError) as refused:
        open_store(f"postgresql://acode:s3cret@127.0.0.1:1/acode?{query}")
    error = refused.value
    assert (error.code, error.exit_code) == (ErrorCode.STORE_URL, 2)
    assert named in error.message
    assert "postgresql://acode@127.0.0.1:1/acode" in error.message
    assert "s3cret" not in str(error)
    assert error.hint is not None
    assert "store.url" in error.hint
