"""The remote schema `acode` is created and migrated by acode, versioned like the local
one, and a remote migrated by a newer acode is refused untouched."""

from __future__ import annotations

import threading
import uuid

import pytest

from acode.errors import SchemaTooNewError
from acode.sync.remote import connect_remote
from acode.sync.schema import remote_migrations
from tests.sync.conftest import Mirror


def test_migrations_are_numbered_from_one_and_never_build_indexes_concurrently() -> None:
    migrations = remote_migrations()
    assert [m.number for m in migrations] == list(range(1, len(migrations) + 1))
    for m in migrations:  # CONCURRENTLY cannot run inside the migration's transaction
        assert "CONCURRENTLY" not in m.sql.upper(), m.name


def test_the_first_connection_creates_the_schema_and_later_ones_find_it(mirror: Mirror) -> None:
    first = connect_remote(mirror.dsn)
    first.close()
    second = connect_remote(mirror.dsn)
    second.close()

    assert first.remote_id
    assert first.remote_id == second.remote_id
    tables = {
        r[0] for r in mirror.query("SELECT tablename FROM pg_tables WHERE schemaname = 'acode'")
    }
    assert tables == {"schema_version", "remote_info", "sessions", "events", "checkpoints"}
    versions = [r[0] for r in mirror.query("SELECT version FROM acode.schema_version")]
    assert versions == [m.number for m in remote_migrations()]


def test_machines_migrating_at_once_do_not_collide(mirror: Mirror) -> None:
    ids: list[str] = []
    errors: list[BaseException] = []

    def connect() -> None:
        try:
            remote = connect_remote(mirror.dsn)
            ids.append(remote.remote_id)
            remote.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=connect) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)

    assert errors == []
    assert len(set(ids)) == 1
    assert mirror.query("SELECT count(*) FROM acode.remote_info") == [(1,)]


def test_a_remote_from_a_newer_acode_is_refused_and_left_untouched(mirror: Mirror) -> None:
    connect_remote(mirror.dsn).close()
    mirror.query("INSERT INTO acode.schema_version (version) VALUES (999) RETURNING version")
    before = mirror.query("SELECT version FROM acode.schema_version ORDER BY version")

    with pytest.raises(SchemaTooNewError, match="schema version 999") as refused:
        connect_remote(mirror.dsn)

    assert "upgrade acode" in (refused.value.hint or "")
    assert "password" not in refused.value.message
    assert mirror.query("SELECT version FROM acode.schema_version ORDER BY version") == before


def test_events_on_the_remote_are_append_only(mirror: Mirror) -> None:
    import psycopg

    connect_remote(mirror.dsn).close()
    session, event = str(uuid.uuid4()), str(uuid.uuid4())
    mirror.execute(
        "INSERT INTO acode.sessions (id, title, state, workspace, host, created_at, updated_at)"
        " VALUES (%s, 't', 'EXECUTING', '/w', 'h', now(), now())",
        (session,),
    )
    mirror.execute(
        "INSERT INTO acode.events (event_id, session_id, seq, ts, type, payload, hash)"
        " VALUES (%s, %s, 1, 1, 'session_created', '{}', '\\x00')",
        (event, session),
    )

    for change in ("DELETE FROM acode.events", "UPDATE acode.events SET seq = 2"):
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            mirror.execute(change)


def test_a_remote_of_version_1_is_migrated_its_leases_kept(mirror: Mirror) -> None:
    import psycopg

    first = remote_migrations()[0]
    assert first.number == 1
    mirror.execute(
        "CREATE SCHEMA acode; CREATE TABLE acode.schema_version ("
        " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    with psycopg.connect(mirror.pg.direct_dsn(mirror.dbname), autocommit=True) as conn:
        conn.execute(first.sql)  # without parameters: its "%" are no placeholders
    mirror.execute("INSERT INTO acode.schema_version (version) VALUES (1)")
    session = str(uuid.uuid4())
    # A session an acode of version 1 holds: its lease says nothing of the machine.
    mirror.execute(
        "INSERT INTO acode.sessions (id, title, state, workspace, host, created_at, updated_at,"
        " lease_holder, lease_host, lease_pid, lease_since, lease_expires) VALUES (%s, 't',"
        " 'EXECUTING', '/w', 'h', now(), now(), 'old', 'h', 4242, now(),"
        " now() + interval '30 s')",
        (session,),
    )

    connect_remote(mirror.dsn).close()

    versions = [r[0] for r in mirror.query("SELECT version FROM acode.schema_version")]
    assert versions == [m.number for m in remote_migrations()]
    assert mirror.query(
        "SELECT lease_holder, lease_pid, lease_machine, lease_started, lease_epoch,"
        " lease_expires > now() FROM acode.sessions"
    ) == [("old", 4242, None, None, 0, True)]
