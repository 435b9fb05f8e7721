"""Fixtures of the sync tests: a database of the real PostgreSQL server (tests/conftest.py)
and a fault-injecting TCP proxy per test, and the check every fault test ends with:
the remote holds each local event exactly once."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from acode.domain.config import AcodeConfig, SyncSettings
from acode.domain.ids import uuid_text
from tests.support.postgres import PgServer, scratch_database
from tests.support.tcp_proxy import Proxy

SECRET = "acode-sync-tests-checkpoint-secret"


@dataclass(frozen=True)
class Mirror:
    """One test's remote: its own database, reached by acode through ``proxy``."""

    pg: PgServer
    dbname: str
    proxy: Proxy

    @property
    def dsn(self) -> str:
        return self.pg.url_via(self.proxy.port, self.dbname)

    def config(self, **overrides: Any) -> AcodeConfig:
        return AcodeConfig(sync=SyncSettings(remote=self.dsn), **overrides)

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.pg.direct_dsn(self.dbname), autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        import psycopg

        with psycopg.connect(self.pg.direct_dsn(self.dbname), autocommit=True) as conn:
            conn.execute(sql, params)

    def events(self, session_id: str) -> list[tuple[str, int, str, bytes]]:
        """(event_id, seq, type, hash) of a session on the remote, in seq order."""
        if self.query("SELECT to_regclass('acode.events')") == [(None,)]:
            return []  # acode has not connected yet
        rows = self.query(
            "SELECT event_id::text, seq, type, hash FROM acode.events WHERE session_id = %s"
            " ORDER BY seq",
            (session_id,),
        )
        return [(str(e), int(s), str(t), bytes(h)) for e, s, t, h in rows]

    def count(self, session_id: str) -> int:
        return len(self.events(session_id))


@pytest.fixture
def mirror(pg_server: PgServer) -> Iterator[Mirror]:
    with scratch_database(pg_server) as name:
        proxy = Proxy(pg_server.target).start()
        try:
            yield Mirror(pg_server, name, proxy)
        finally:
            proxy.close()


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", SECRET)


def local_events(workspace: Path, session_id: str) -> list[tuple[str, int, str, bytes]]:
    db = workspace / ".agent" / "state" / "acode.db"
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT e.event_id, e.seq, e.type, e.hash FROM events e"
            " JOIN sessions s ON s.sid = e.sid WHERE s.id = ? ORDER BY e.seq",
            (session_id,),
        ).fetchall()
    finally:
        conn.close()
    return [(uuid_text(e), int(s), str(t), bytes(h)) for e, s, t, h in rows]


def assert_mirrored(mirror: Mirror, workspace: Path, session_id: str) -> None:
    """Invariant 9: the remote holds every local event of the session exactly once."""
    local = local_events(workspace, session_id)
    remote = mirror.events(session_id)
    assert local, "the session recorded nothing"
    ids = [r[0] for r in remote]
    assert len(ids) == len(set(ids)), "an event is on the remote twice"
    assert remote == local
