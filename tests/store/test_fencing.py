"""The session lease of the PostgreSQL store and the epoch that fences every write of a
session's history (docs/fleet.md, "One holder per session"): the database refuses a
write whose epoch is no longer the lease's, in the write's own statement, and leaves
nothing of it. Two store objects stand for two processes; two real processes race for
one lease. Against the real server of tests/conftest.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from acode.errors import SessionTakenOverError
from acode.store.base import EventStore, open_store
from acode.store.leases import Lease
from acode.store.postgres.migrations import available_migrations
from acode.store.postgres.store import PostgresStore
from acode.system.process_table import process_table_id, start_mark
from tests.store.contract import _MS, EventStoreContract, _event, _id, _message
from tests.store.contract import _commit as commit_of
from tests.support.postgres import PgServer

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def url(pg_server: PgServer, dbname: str) -> str:
    return pg_server.store_url(dbname)


def _sql(pg: PgServer, dbname: str, statement: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(pg.direct_dsn(dbname), autocommit=True) as conn:
        cur = conn.execute(statement.encode())
        return cur.fetchall() if cur.description else []


def _pg(store: EventStore) -> PostgresStore:
    assert isinstance(store, PostgresStore)
    return store


def _me() -> Lease:
    return Lease.for_this_process(process_table_id(), start_mark(os.getpid()), start_mark)


def _counts(pg: PgServer, dbname: str) -> tuple[Any, ...]:
    return _sql(
        pg,
        dbname,
        "SELECT (SELECT count(*) FROM acode_store.events),"
        " (SELECT count(*) FROM acode_store.messages),"
        " (SELECT count(*) FROM acode_store.step_ids),"
        " (SELECT string_agg(state, ',') FROM acode_store.sessions)",
    )[0]


def test_a_schema_2_store_is_upgraded_and_its_sessions_take_leases(
    pg_server: PgServer, dbname: str, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acode.store.postgres import migrations

    two = available_migrations()[:2]
    with monkeypatch.context() as m:
        m.setattr(migrations, "available_migrations", lambda: two)
        with closing(open_store(url)) as old:
            row = EventStoreContract.new_session(old, 1)
    assert _sql(pg_server, dbname, "SELECT max(version) FROM acode_store.schema_version") == [(2,)]
    with closing(_pg(open_store(url))) as store:
        assert _sql(pg_server, dbname, "SELECT max(version) FROM acode_store.schema_version") == [
            (3,)
        ]
        assert store.take_lease(row.id, _me(), 30).epoch == 1
        store.commit(row.sid, commit_of([_event(2)]))  # fenced from now on
        assert [e.seq for e in store.events(store.session(row.id))] == [1, 2]
    assert _sql(pg_server, dbname, "SELECT epoch FROM acode_store.session_leases") == [(1,)]


def test_a_write_with_a_stale_epoch_is_refused_by_the_database_and_leaves_nothing(
    pg_server: PgServer, dbname: str, url: str
) -> None:
    with closing(_pg(open_store(url))) as a, closing(_pg(open_store(url))) as b:
        a_lease = _me()
        # A: a lease of no length, as one its holder could not renew (cut off); taken
        # before the session's first write, as a new session's is.
        session_id = _id(1, _MS - 1000 + 1)  # what new_session(a, 1) names it
        assert a.take_lease(session_id, a_lease, 0).epoch == 1
        row = EventStoreContract.new_session(a, 1)
        assert row.id == session_id
        a.commit(row.sid, commit_of([_event(2)]))
        # B: it lapsed; taken over, epoch 2; B writes on.
        taken = b.take_lease(session_id, Lease.for_this_process("another-machine", 1), 30)
        assert (taken.epoch, taken.holder) == (2, None)
        b.commit(row.sid, commit_of([_event(3)]))
        before = _counts(pg_server, dbname)

        # A's late writes, every kind of them: refused, and nothing of them is written.
        with pytest.raises(SessionTakenOverError, match=r"taken over .*epoch 1 "):
            a.commit(row.sid, commit_of([_event(4)]))
        with pytest.raises(SessionTakenOverError):
            a.commit(
                row.sid,
                commit_of(
                    [_event(4), _event(5)],
                    messages=[_message(0, "{}", 5)],
                    step_ids=["s4"],
                    state="FAILED",
                ),
            )
        with pytest.raises(SessionTakenOverError):
            a.append_completion(row.sid, 4, _event(4).event_id, 1, "{}", b"h" * 16, b"s")
        with pytest.raises(SessionTakenOverError):
            a.rechain(a.session(row.id), [(1, "{}", b"h" * 16, None)], [], 3, "key-2")
        assert _counts(pg_server, dbname) == before
        assert [e.seq for e in b.events(b.session(row.id))] == [1, 2, 3]

        # B goes on; A cannot renew, and gives back nothing of B's.
        b.commit(row.sid, commit_of([_event(4)]))
        assert not a.renew_lease(session_id, a_lease, 30)
        a.give_back_lease(session_id, a_lease)
        assert _sql(
            pg_server, dbname, "SELECT epoch, token IS NOT NULL FROM acode_store.session_leases"
        ) == [(2, True)]


def test_a_live_holder_is_refused_a_dead_one_here_is_taken_at_once_a_given_back_one_too(
    url: str,
) -> None:
    with closing(_pg(open_store(url))) as a, closing(_pg(open_store(url))) as b:
        row = EventStoreContract.new_session(a, 1)
        me = _me()
        assert a.take_lease(row.id, me, 30).epoch == 1
        assert a.renew_lease(row.id, me, 30)
        assert a.take_lease(row.id, me, 30).epoch == 1  # ours already: the same epoch

        other = _me()  # another process of this machine, and this one runs
        refused = b.take_lease(row.id, other, 30)
        assert refused.epoch == 0
        assert refused.holder is not None
        assert (refused.holder.pid, other.runs_here(refused.holder)) == (os.getpid(), True)

        ended = subprocess.Popen(["sleep", "60"])
        gone = Lease(
            "ended", socket.gethostname(), ended.pid, process_table_id(), start_mark(ended.pid)
        )
        ended.kill()
        ended.wait()
        a.give_back_lease(row.id, me)
        assert b.take_lease(row.id, gone, 30).epoch == 2  # given back: taken at once
        taken = a.take_lease(row.id, me, 30)
        assert (taken.epoch, taken.replaced and taken.replaced.pid) == (3, ended.pid)

        far = b.take_lease(row.id, Lease.for_this_process("another-machine", 1, start_mark), 30)
        assert far.holder is not None  # live, of this machine: it waits
        assert far.holder.epoch == 3


def test_the_lapse_of_a_held_lease_is_read_by_the_servers_clock(
    pg_server: PgServer, dbname: str, url: str
) -> None:
    with closing(_pg(open_store(url))) as a, closing(_pg(open_store(url))) as b:
        row = EventStoreContract.new_session(a, 1)
        me = _me()
        assert b.lease_lapse(row.id) is None  # never taken
        assert a.take_lease(row.id, me, 30).epoch == 1
        found = b.lease_lapse(row.id)
        assert found is not None
        holder, left = found
        assert (holder.pid, holder.machine, holder.epoch) == (os.getpid(), me.machine, 1)
        assert 0 < left <= 30
        lapsed = "UPDATE acode_store.session_leases SET expires = now() - interval '1 s'"
        _sql(pg_server, dbname, lapsed)
        assert b.lease_lapse(row.id) is None  # lapsed
        assert a.take_lease(row.id, me, 30).epoch == 1
        a.give_back_lease(row.id, me)
        assert b.lease_lapse(row.id) is None  # given back


RACER = """
import json, os, sys, time
from pathlib import Path
from acode.store.base import open_store
from acode.store.leases import Lease
from acode.system.process_table import process_table_id, start_mark

url, session_id, go, end = sys.argv[1:]
store = open_store(url)
me = Lease.for_this_process(process_table_id(), start_mark(os.getpid()), start_mark)
while not Path(go).exists():
    time.sleep(0.001)
outcome = store.take_lease(session_id, me, 30)
print(json.dumps({"epoch": outcome.epoch, "refused": outcome.holder is not None,
                  "replaced": outcome.replaced.pid if outcome.replaced else None}), flush=True)
# Alive until both have asked: a winner that had ended would be taken over in its turn.
while not Path(end).exists():
    time.sleep(0.01)
store.close()
"""


def test_two_processes_taking_over_a_dead_holder_at_once_one_wins(url: str, tmp_path: Path) -> None:
    with closing(_pg(open_store(url))) as store:
        row = EventStoreContract.new_session(store, 1)
        ended = subprocess.Popen(["sleep", "60"])
        dead = Lease(
            "ended", socket.gethostname(), ended.pid, process_table_id(), start_mark(ended.pid)
        )
        assert store.take_lease(row.id, dead, 30).epoch == 1
        ended.kill()
        ended.wait()
    go, end = tmp_path / "go", tmp_path / "end"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, url, row.id, str(go), str(end)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    go.touch()
    assert all(r.stdout for r in racers)
    found = [json.loads(r.stdout.readline()) for r in racers if r.stdout]
    end.touch()
    for r in racers:
        r.communicate(timeout=60)
    assert sorted(f["epoch"] for f in found) == [0, 2]
    assert sorted(f["refused"] for f in found) == [False, True]
    assert [f["replaced"] for f in found if f["epoch"]] == [ended.pid]


def test_a_write_in_flight_holds_a_take_over_back_and_one_that_never_ends_is_not_waited_for(
    pg_server: PgServer, dbname: str, url: str
) -> None:
    import psycopg

    with closing(_pg(open_store(url))) as a, closing(_pg(open_store(url))) as b:
        row = EventStoreContract.new_session(a, 1)
        assert a.take_lease(row.id, _me(), 0).epoch == 1  # lapsed at once
        # A's write of epoch 1 in flight, frozen before its COMMIT: the lease's row is
        # held (FOR SHARE), so that no take-over misses what it writes.
        with psycopg.connect(pg_server.direct_dsn(dbname)) as frozen:
            frozen.execute(
                "SELECT 1 FROM acode_store.session_leases WHERE session_id = %s"
                " AND epoch = 1 FOR SHARE",
                (row.id,),
            )
            waited = b.take_lease(row.id, Lease.for_this_process("another-machine", 1), 30)
            assert (waited.epoch, waited.holder) == (0, None)  # not taken, not waited on
            frozen.rollback()
        assert b.take_lease(row.id, Lease.for_this_process("another-machine", 1), 30).epoch == 2


def test_a_pruned_session_leaves_no_lease_behind(
    pg_server: PgServer, dbname: str, url: str
) -> None:
    with closing(open_store(url)) as store:
        row = EventStoreContract.new_session(store, 1)
        other = EventStoreContract.new_session(store, 2)
        for session in (row, other):
            _pg(store).take_lease(session.id, _me(), 30)
            _pg(store).give_back_lease(session.id, _me())
        store.prune([row], now_us=1, key_id="k", sign=lambda m: b"tag", files_left=0)
    leases = "SELECT session_id FROM acode_store.session_leases"
    assert _sql(pg_server, dbname, leases) == [(other.id,)]
