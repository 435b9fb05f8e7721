"""A connection to the remote mirror: one transaction per batch, leases, listings.

psycopg is imported here, inside functions, and only when a remote is configured. Every
driver error leaves this module as ``RemoteUnavailable`` with a short reason a person
can act on ("Connection refused (db.example.com:5432)"), never with a password.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from acode.domain.events import Event, canonical_json
from acode.errors import RemoteUnavailable
from acode.security.redaction import redact, redact_json
from acode.store.leases import Lease, LeaseHolder, LeaseOutcome, take
from acode.store.records import CheckpointRow, SessionRow
from acode.sync.dsn import describe_remote

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CONNECT_TIMEOUT_S",
    "LEASE_SECONDS",
    "STATEMENT_TIMEOUT_S",
    "Lease",
    "LeaseHolder",
    "LeaseOutcome",
    "Remote",
    "RemoteSession",
    "connect_remote",
    "failure_reason",
    "mirrored_payload",
]

CONNECT_TIMEOUT_S = 2  # libpq's smallest
STATEMENT_TIMEOUT_S = 5
LEASE_SECONDS = 30
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

UPSERT_SESSION = (
    "INSERT INTO acode.sessions (id, title, state, workspace, host, created_at, updated_at)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET"
    " (title, state, workspace, host, updated_at) = (excluded.title, excluded.state,"
    " excluded.workspace, excluded.host, excluded.updated_at)"
    " WHERE acode.sessions.updated_at <= excluded.updated_at"  # a late pusher never goes back
)
INSERT_EVENT = (
    "INSERT INTO acode.events (event_id, session_id, seq, ts, type, payload, redacted, hash)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (event_id) DO NOTHING"
)
INSERT_CHECKPOINT = (
    "INSERT INTO acode.checkpoints (session_id, id, seq, summary, head, signature, created_at)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (session_id, id) DO NOTHING"
)
# Free, ours, lapsed, or held by a process of this machine that has ended (acode.store.
# leases.take).
TAKE_LEASE = (
    "UPDATE acode.sessions SET lease_holder = %(token)s, lease_host = %(host)s,"
    " lease_pid = %(pid)s, lease_machine = %(machine)s, lease_started = %(started)s,"
    " lease_epoch = CASE WHEN lease_holder = %(token)s THEN lease_epoch ELSE lease_epoch + 1 END,"
    " lease_since = CASE WHEN lease_holder = %(token)s THEN lease_since ELSE now() END,"
    " lease_expires = now() + make_interval(secs => %(seconds)s)"
    " WHERE id = %(id)s AND (lease_holder IS NULL OR lease_holder = %(token)s"
    " OR lease_expires < now() OR (lease_holder = %(gone)s AND lease_epoch = %(gone_epoch)s))"
    " RETURNING lease_epoch"
)
SELECT_LEASE = (
    "SELECT lease_holder, lease_host, lease_pid, lease_since, lease_expires, lease_machine,"
    " lease_started, lease_epoch FROM acode.sessions WHERE id = %s AND lease_expires >= now()"
)
RELEASE_LEASE = (
    "UPDATE acode.sessions SET lease_holder = NULL, lease_host = NULL, lease_pid = NULL,"
    " lease_machine = NULL, lease_started = NULL, lease_since = NULL, lease_expires = NULL"
    " WHERE id = %s AND lease_holder = %s"  # the epoch stays: the next holder's is one more
)
SELECT_NEWEST_SEQ = "SELECT coalesce(max(seq), 0) FROM acode.events WHERE session_id = %s"
SELECT_SESSIONS = (
    "SELECT s.id, s.title, s.state, s.workspace, s.host, s.created_at, s.updated_at,"
    " (SELECT coalesce(max(e.seq), 0) FROM acode.events e WHERE e.session_id = s.id),"
    " s.lease_host, s.lease_pid, s.lease_since, s.lease_expires, s.lease_expires >= now()"
    " FROM acode.sessions s ORDER BY s.updated_at DESC, s.id DESC"
)


@dataclass(frozen=True)
class RemoteSession:
    id: str
    title: str
    state: str
    workspace: str
    host: str
    created_at: int  # microseconds since the epoch, like the local rows
    updated_at: int
    last_seq: int
    holder: LeaseHolder | None  # None: nobody holds an unexpired lease


def _moment(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _us(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def mirrored_payload(payload_json: str) -> tuple[str, bool]:
    """The payload as the remote may hold it: unchanged unless it carries a secret,
    then redacted field by field (and flagged, since it no longer matches its hash)."""
    if redact(payload_json) == payload_json:
        return payload_json, False
    return canonical_json(redact_json(json.loads(payload_json))), True


def _event_row(session_id: str, e: Event) -> tuple[object, ...]:
    payload, redacted = mirrored_payload(e.payload_json)
    return (e.event_id, session_id, e.seq, e.ts_us, e.type.value, payload, redacted)


_TARGET = re.compile(
    r'connection to server (?:at "(?P<host>[^"]+)"(?: \([^)]*\))?, port (?P<port>\d+)'
    r'|on socket "(?P<socket>[^"]+)") failed: (?P<detail>[^\n]+)'
)


def failure_reason(exc: BaseException) -> str:
    """A driver error in a few words, without secrets."""
    import psycopg

    if isinstance(exc, psycopg.errors.UniqueViolation):
        return (
            "the remote holds other events at the same positions of this session: "
            "it also ran somewhere else"
        )
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return f"the remote took longer than {STATEMENT_TIMEOUT_S} s to answer"
    text = str(exc).strip() or type(exc).__name__
    match = _TARGET.search(text)
    if match:
        detail = re.sub(r"^(?:FATAL|ERROR):\s+", "", match["detail"]).strip()
        if detail == "timeout expired":
            detail = f"no answer within {CONNECT_TIMEOUT_S} s"
        target = match["socket"] or f"{match['host']}:{match['port']}"
        text = f"{detail} ({target})"
    else:
        text = re.sub(r"^connection failed:\s*", "", text.splitlines()[0])
        resolve = re.match(r"failed to resolve host '([^']+)'", text)
        if resolve:
            text = f"unknown host {resolve[1]}"
        elif text == "connection timeout expired":
            text = f"no answer within {CONNECT_TIMEOUT_S} s"
    text = text if len(text) <= 200 else text[:197] + "..."
    return redact(text.replace('"', ""))


def connect_remote(
    dsn: str,
    *,
    connect_timeout: float = CONNECT_TIMEOUT_S,
    statement_timeout: float = STATEMENT_TIMEOUT_S,
) -> Remote:
    """Connect, set the time-outs, create or migrate the schema; RemoteUnavailable (or
    SchemaTooNewError) when that cannot be done."""
    name = describe_remote(dsn)
    try:
        import psycopg
    except ImportError as exc:
        raise RemoteUnavailable(
            name, "the PostgreSQL driver is not installed: pip install 'acode[sync]'"
        ) from exc
    try:
        conn = psycopg.connect(
            dsn,
            autocommit=True,
            connect_timeout=max(2, round(connect_timeout)),
            application_name="acode sync",
            # A peer that vanished (cable, sleeping laptop) is noticed in about 11 s.
            keepalives=1,
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=3,
        )
    except psycopg.Error as exc:
        raise RemoteUnavailable(name, failure_reason(exc)) from exc
    except OSError as exc:  # name resolution, before libpq is involved
        raise RemoteUnavailable(name, redact(str(exc))) from exc
    remote = Remote(conn, name)
    try:
        with remote.translated():
            conn.execute(
                f"SET statement_timeout = {int(statement_timeout * 1000)};"
                " SET idle_in_transaction_session_timeout = 15000"
            )
            from acode.sync.schema import ensure_schema

            remote.remote_id = ensure_schema(conn, name)
    except BaseException:
        remote.close()
        raise
    return remote


def _read_lease(
    cur: psycopg.Cursor[tuple[Any, ...]], session_id: str
) -> tuple[str | None, LeaseHolder | None]:
    """The token and holder of the session's unexpired lease; (None, None) without one."""
    row = cur.execute(SELECT_LEASE, (session_id,)).fetchone()
    if row is None:
        return None, None
    token, host, pid, since, expires, machine, started, epoch = row
    holder = LeaseHolder(
        host=str(host),
        pid=int(pid),
        since=since,
        expires=expires,
        machine=machine,
        started=started,
        epoch=int(epoch),
    )
    return str(token), holder


class Remote:
    """An open connection to the mirror (autocommit; transactions are explicit)."""

    def __init__(self, conn: psycopg.Connection[tuple[Any, ...]], name: str) -> None:
        self._conn = conn
        self.name = name
        self.remote_id = ""

    @contextmanager
    def translated(self) -> Iterator[None]:
        import psycopg

        try:
            yield
        except psycopg.Error as exc:
            raise RemoteUnavailable(self.name, failure_reason(exc)) from exc

    def close(self) -> None:
        self._conn.close()

    def send(
        self,
        session: SessionRow,
        events: Sequence[Event],
        checkpoints: Sequence[CheckpointRow],
        *,
        lease: Lease | None = None,
        release: Lease | None = None,
    ) -> LeaseOutcome:
        """One remote transaction: the session row, ``events`` (those already there are
        ignored), ``checkpoints``, then the lease taken or renewed for ``lease`` (or
        given up for ``release``)."""
        rows = [(*_event_row(session.id, e), e.hash) for e in events]
        outcome = LeaseOutcome()
        with self.translated(), self._conn.transaction(), self._conn.cursor() as cur:
            cur.execute(
                UPSERT_SESSION,
                (
                    session.id,
                    redact(session.title),
                    session.state,
                    session.workspace,
                    socket.gethostname(),
                    _moment(session.created_at),
                    _moment(session.updated_at),
                ),
            )
            if rows:
                cur.executemany(INSERT_EVENT, rows)
            for cp in checkpoints:
                cur.execute(
                    INSERT_CHECKPOINT,
                    (
                        session.id,
                        cp.id,
                        cp.seq,
                        mirrored_payload(cp.summary)[0],
                        cp.head,
                        cp.signature,
                        _moment(cp.created_at),
                    ),
                )
            if lease is not None:
                outcome = self._take(cur, session.id, lease)
            elif release is not None:
                cur.execute(RELEASE_LEASE, (session.id, release.token))
        return outcome

    @staticmethod
    def _take(cur: psycopg.Cursor[tuple[Any, ...]], session_id: str, lease: Lease) -> LeaseOutcome:
        params: dict[str, object] = {
            "token": lease.token,
            "host": lease.host,
            "pid": lease.pid,
            "machine": lease.machine,
            "started": lease.started,
            "seconds": LEASE_SECONDS,
            "id": session_id,
        }

        def attempt(gone: str | None, gone_epoch: int | None) -> int | None:
            taken = cur.execute(
                TAKE_LEASE, {**params, "gone": gone, "gone_epoch": gone_epoch}
            ).fetchone()
            return None if taken is None else int(taken[0])

        return take(lease, attempt, lambda: _read_lease(cur, session_id))

    def newest_seq(self, session_id: str) -> int:
        """The newest event of the session the remote holds (0: none)."""
        with self.translated():
            row = self._conn.execute(SELECT_NEWEST_SEQ, (session_id,)).fetchone()
        return int(row[0]) if row else 0

    def sessions(self) -> list[RemoteSession]:
        """Every session on the remote, most recently updated first."""
        with self.translated():
            rows = self._conn.execute(SELECT_SESSIONS).fetchall()
        found = []
        for (
            sid,
            title,
            state,
            ws,
            host,
            created,
            updated,
            last,
            l_host,
            pid,
            since,
            exp,
            live,
        ) in rows:
            holder = (
                LeaseHolder(host=str(l_host), pid=int(pid), since=since, expires=exp)
                if live
                else None
            )
            found.append(
                RemoteSession(
                    id=str(sid),
                    title=str(title),
                    state=str(state),
                    workspace=str(ws),
                    host=str(host),
                    created_at=_us(created),
                    updated_at=_us(updated),
                    last_seq=int(last),
                    holder=holder,
                )
            )
        return found
