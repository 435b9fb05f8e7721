"""The one place the PostgreSQL store's connections are set up, and its driver's errors
translated.

A store holds a pool (psycopg-pool) of autocommit connections: a read is one statement,
a write that is one statement (most steps' completion) is its own transaction, and the
others open one explicitly. Statements are prepared at their first use on a connection
(``prepare_threshold`` 0), so a step's INSERT is parsed and planned once per connection.
A server that does not answer, a login it refuses, a write it refuses: each leaves here
as a ``StorageError`` whose message names the server without a password.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from acode.errors import ErrorCode, StorageError, StoreUnavailableError, StoreUrlError
from acode.store.base import SCOPE_PARAMETER

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

    from acode.store.base import Durability

__all__ = [
    "StoreAddress",
    "connect",
    "load_driver",
    "open_pool",
    "parse_address",
    "pool_timeout",
    "store_error",
    "translated",
]

CONNECT_TIMEOUT_S = 5
# How long a call waits for a connection of the pool (all busy, or the server gone).
POOL_TIMEOUT_S = 10.0
_POOL_SIZE = 4

_URL_HINT = (
    "give the PostgreSQL store as postgresql://USER@HOST:PORT/DATABASE "
    "(the password in ACODE_STORE_URL or ~/.pgpass rather than in .agent/config.yml)"
)


class StoreAddress(NamedTuple):
    """A PostgreSQL store URL taken apart: what libpq connects with, what messages show
    of it (no password), the password (to keep it out of any message), and the workspace
    the store serves (None: every session of the database)."""

    conninfo: str
    shown: str
    password: str
    workspace: str | None


def load_driver() -> None:
    """Import the driver and its pool now, which a store otherwise does at its first
    connection: a process that forks sessions (the fleet's launcher) does it once for
    all of them (about 165 ms of CPU each)."""
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401


def parse_address(url: str) -> StoreAddress:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise StoreUrlError(
            f"the store URL {_masked(url)!r} cannot be read: {exc}", hint=_URL_HINT
        ) from None
    query = parse_qsl(parts.query, keep_blank_values=True)
    workspace = next((v for k, v in query if k == SCOPE_PARAMETER), None)
    rest = [(k, v) for k, v in query if k != SCOPE_PARAMETER]
    password = parts.password or next((v for k, v in rest if k == "password"), "")
    conninfo = urlunsplit(parts._replace(query=urlencode(rest), fragment=""))
    user = f"{parts.username}@" if parts.username else ""
    # A host (a Unix socket's folder) and port in the query are where libpq connects:
    # shown as given, so that two servers on one machine are told apart.
    given = [f"{k}={v}" for k, v in rest if k in ("host", "port")]
    host = parts.hostname or ("" if given else "localhost")
    where = f"{host}:{port}" if port else host
    shown = f"postgresql://{user}{where}{parts.path}"
    if given:
        shown += "?" + "&".join(given)
    return StoreAddress(conninfo, shown, password, workspace)


def _masked(url: str) -> str:
    url = re.sub(rf"[?&]{SCOPE_PARAMETER}=[^&#]*", "", url)  # acode's own, not the person's
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    return f"{scheme}{sep}***@{host}" if at and credentials else url


def _options(durability: Durability) -> dict[str, Any]:
    # ``normal`` may lose the last commits if the server crashes (never corrupts them),
    # as SQLite's synchronous=NORMAL does on power loss.
    synchronous = "on" if durability == "full" else "off"
    return {
        "autocommit": True,
        "prepare_threshold": 0,
        "connect_timeout": CONNECT_TIMEOUT_S,
        "application_name": "acode",
        "options": f"-c synchronous_commit={synchronous}",
    }


def connect(address: StoreAddress, durability: Durability) -> psycopg.Connection[Any]:
    """One connection, outside the pool: the first one, whose failure says why."""
    import psycopg

    try:
        return psycopg.connect(address.conninfo, **_options(durability))
    except psycopg.Error as exc:
        if _BAD_OPTION.search(str(exc)):  # refused before a connection was tried
            said = _clean(address, exc).removeprefix("connection is bad: ")
            raise StoreUrlError(
                f"the store URL {address.shown} has an option libpq refuses: {said}",
                hint="correct or remove that option in store.url (or ACODE_STORE_URL); the "
                "options libpq takes: https://www.postgresql.org/docs/current/"
                "libpq-connect.html#LIBPQ-PARAMKEYWORDS",
            ) from None
        raise store_error(address, exc) from None
    except OSError as exc:  # a name resolution that fails before libpq
        raise _unreachable(address, str(exc)) from None


def open_pool(
    address: StoreAddress, durability: Durability
) -> ConnectionPool[psycopg.Connection[Any]]:
    import logging

    from psycopg_pool import ConnectionPool

    # The pool reports a connection it drops as a warning, which Python prints on stderr
    # where no logging is set up: acode reports the outage itself (ACODE-DB-005).
    logger = logging.getLogger("psycopg.pool")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return ConnectionPool(
        address.conninfo,
        kwargs=_options(durability),
        min_size=1,
        max_size=_POOL_SIZE,
        timeout=POOL_TIMEOUT_S,
        num_workers=1,
        name="acode-store",
        open=True,
    )


@contextmanager
def translated(address: StoreAddress) -> Iterator[None]:
    """The driver's and the pool's errors as acode's."""
    import psycopg
    from psycopg_pool import PoolTimeout

    try:
        yield
    except psycopg.Error as exc:
        raise store_error(address, exc) from exc
    except PoolTimeout as exc:
        raise pool_timeout(address) from exc


def pool_timeout(address: StoreAddress) -> StoreUnavailableError:
    """The error for a pool that had no connection to give in time."""
    return _unreachable(address, f"no connection could be had within {POOL_TIMEOUT_S:g} s")


# libpq's words for a URL option it does not know, or a value it does not take.
_BAD_OPTION = re.compile(r"invalid (?:URI query parameter|connection option|\S+ value)")
# The SQLSTATE classes of a login the server refused: 28 (invalid authorization: a wrong
# password, an unknown role), 3D (no such database), 42501 (no privilege on it).
_REFUSED = ("28", "3D")
_REFUSED_TEXT = (
    "password authentication failed",
    "no password supplied",
    "does not exist",
    "permission denied",
    "pg_hba.conf",
)


def store_error(address: StoreAddress, exc: BaseException) -> StorageError:
    """The error to raise for the driver's ``exc``."""
    import psycopg

    text = _clean(address, exc)
    state = getattr(exc, "sqlstate", None) or ""
    if state == "42501":  # no privilege: to create acode's schema, or on its tables
        parts = urlsplit(address.conninfo)
        role = parts.username or "ROLE"
        database = parts.path.lstrip("/") or role  # libpq's default: the role's name
        fix = (
            f"as the database's owner, let the role create acode's schema: GRANT CREATE ON "
            f"DATABASE {database} TO {role}; or create it for the role: CREATE SCHEMA "
            f"acode_store AUTHORIZATION {role}"
            if "for database" in text
            else "use the role that created acode's schema acode_store, which owns its "
            f"tables, or make {role} their owner"
        )
        return StoreUnavailableError(
            f"the PostgreSQL store {address.shown} refused acode: {text}",
            hint=f"{fix} (docs/fleet.md); nothing was written",
            code=ErrorCode.STORE_REFUSED,
        )
    if isinstance(exc, psycopg.OperationalError) and (
        state[:2] in _REFUSED or state == "42501" or any(t in text for t in _REFUSED_TEXT)
    ):
        return StoreUnavailableError(
            f"the PostgreSQL store {address.shown} refused acode: {text}",
            hint="check the user, the password and the database of store.url "
            "(or ACODE_STORE_URL), and that the role may connect and create tables there; "
            "nothing was written",
            code=ErrorCode.STORE_REFUSED,
        )
    # No SQLSTATE (libpq's own: refused, no route, timed out), 08 (the connection broke)
    # or 57 (the server shut down or ended the session): the server is not there to ask.
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and (
        state[:2] in ("", "08", "57")
    ):
        return _unreachable(address, text)
    return StorageError(
        f"the PostgreSQL store {address.shown} refused a write: {text}",
        hint="nothing of this write was kept; fix the cause, then continue with `acode resume`",
    )


def _unreachable(address: StoreAddress, text: str) -> StoreUnavailableError:
    return StoreUnavailableError(
        f"the PostgreSQL store {address.shown} does not answer: {text}",
        hint="start the server (or check the network and the host and port of store.url / "
        "ACODE_STORE_URL), then run the command again; an interrupted session goes on "
        "with `acode resume`",
    )


# libpq's words for a connection that failed: where to, and why.
_TARGET = re.compile(
    r'connection to server (?:at "(?P<host>[^"]+)"(?: \([^)]*\))?, port (?P<port>\d+)'
    r'|on socket "(?P<socket>[^"]+)") failed: (?P<detail>[^\n]+)'
)


def _clean(address: StoreAddress, exc: BaseException) -> str:
    """The driver's message in a few words ("Connection refused (db:5432)"), without
    the password."""
    text = str(exc).strip() or type(exc).__name__
    match = _TARGET.search(text)
    if match:
        detail = re.sub(r"^(?:FATAL|ERROR):\s+", "", match["detail"]).strip()
        target = match["socket"] or f"{match['host']}:{match['port']}"
        text = f"{detail} ({target})"
    else:
        text = re.sub(r"^connection failed:\s*", "", text.splitlines()[0])
        resolve = re.match(r"failed to resolve host '([^']+)'", text)
        if resolve:
            text = f"unknown host {resolve[1]}"
    if address.password:
        text = text.replace(address.password, "***")
    text = text.replace('"', "")
    return text if len(text) <= 300 else text[:297] + "..."
