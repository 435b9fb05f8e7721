"""The work queue in PostgreSQL: items added, listed, cancelled, claimed under a lease
with an epoch, and every write of a worker fenced by that epoch.

psycopg is imported inside functions. A call that gets no answer (a network that swallows
packets, which no libpq time-out notices) is cut after ``CALL_TIMEOUT_S``: the socket is
shut down under it, the call fails, and the next call connects again.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from acode.errors import ConfigError, ErrorCode, FleetError
from acode.security.redaction import redact
from acode.sync.dsn import describe_remote

if TYPE_CHECKING:
    import psycopg

    from acode.domain.config import AcodeConfig

__all__ = [
    "CALL_TIMEOUT_S",
    "STATES",
    "LeaseLost",
    "Queue",
    "QueueItem",
    "WorkerRow",
    "fleet_url",
]

CALL_TIMEOUT_S = 5.0
STATES = ("queued", "running", "done", "failed", "cancelled")
T = TypeVar("T")

_COLUMNS = (
    "id, queue, title, plan, task, repo_url, branch, state, attempts, worker_id, worker_host,"
    " worker_pid, lease_expires, epoch, session_id::text, session_host, session_workspace,"
    " outside_effects, result_branch, error, created_at, updated_at, started_at, finished_at"
)
# The oldest item of the queue that is queued, or running under a lease that lapsed.
_CLAIM = (
    "WITH next AS (SELECT id FROM acode_fleet.queue_items WHERE queue = %(queue)s AND"
    " (state = 'queued' OR (state = 'running' AND lease_expires < now()))"
    " ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)"
    " UPDATE acode_fleet.queue_items q SET state = 'running', epoch = q.epoch + 1,"
    " attempts = q.attempts + 1, worker_id = %(worker)s, worker_host = %(host)s,"
    " worker_pid = %(pid)s, lease_expires = now() + make_interval(secs => %(lease)s),"
    " started_at = now(), updated_at = now(), error = NULL"
    f" FROM next WHERE q.id = next.id RETURNING {_COLUMNS.replace('id,', 'q.id,', 1)}"
)
_FENCE = " WHERE id = %(id)s AND epoch = %(epoch)s AND state = 'running'"


class QueueItem(NamedTuple):
    id: int
    queue: str
    title: str
    plan: str | None
    task: str | None
    repo_url: str
    branch: str | None
    state: str
    attempts: int
    worker_id: str | None
    worker_host: str | None
    worker_pid: int | None
    lease_expires: datetime | None
    epoch: int
    session_id: str | None
    session_host: str | None
    session_workspace: str | None
    outside_effects: bool
    result_branch: str | None
    error: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class WorkerRow(NamedTuple):
    id: str
    host: str
    pid: int
    queue: str
    concurrency: int
    started_at: datetime
    heartbeat_at: datetime
    running: int
    stopped_at: datetime | None


class LeaseLost(Exception):
    """The item's lease is no longer this worker's (another claimed it with a newer
    epoch, or it was cancelled): nothing more may be written or pushed for it."""


def fleet_url(config: AcodeConfig) -> str:
    """The queue's PostgreSQL URL: ``fleet.url`` (``ACODE_FLEET_URL``), else the session
    store's, else the mirror's."""
    url = config.fleet.url or config.store.url or config.sync.remote
    if not url:
        raise ConfigError(
            "no work queue configured: fleet.url (or store.url, or sync.remote) is not set",
            hint="export ACODE_FLEET_URL=postgresql://user@host/db, or set fleet.url in "
            ".agent/config.yml (docs/fleet.md)",
        )
    return url


class Queue:
    """A connection to the queue, made again after a failure; one thread at a time."""

    def __init__(self, url: str, *, application: str = "acode queue") -> None:
        self.url = url
        self.name = describe_remote(url)
        self._application = application
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._guard = threading.Lock()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- people ---------------------------------------------------------------------

    def add(
        self,
        *,
        queue: str,
        title: str,
        plan: str | None,
        task: str | None,
        repo_url: str,
        branch: str | None,
    ) -> QueueItem:
        return self._one(
            "INSERT INTO acode_fleet.queue_items (queue, title, plan, task, repo_url, branch)"
            f" VALUES (%s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}",
            (queue, title, plan, task, repo_url, branch),
        )

    def items(self, *, queue: str | None, state: str | None) -> list[QueueItem]:
        sql = f"SELECT {_COLUMNS} FROM acode_fleet.queue_items WHERE true"
        params: list[object] = []
        if queue is not None:
            sql += " AND queue = %s"
            params.append(queue)
        if state is not None:
            sql += " AND state = %s"
            params.append(state)
        rows = self._call(lambda c: c.execute(sql + " ORDER BY id", params).fetchall())
        return [QueueItem(*row) for row in rows]

    def item(self, item_id: int) -> QueueItem:
        rows = self._call(
            lambda c: c.execute(
                f"SELECT {_COLUMNS} FROM acode_fleet.queue_items WHERE id = %s", (item_id,)
            ).fetchall()
        )
        if not rows:
            raise FleetError(
                f"no queue item {item_id}",
                hint="acode queue list shows the items",
                code=ErrorCode.FLEET_ITEM,
            )
        return QueueItem(*rows[0])

    def cancel(self, item_id: int) -> QueueItem:
        """Cancel a queued or running item: a worker running it finds its lease gone at
        its next renewal and stops the session."""
        rows = self._call(
            lambda c: c.execute(
                "UPDATE acode_fleet.queue_items SET state = 'cancelled', lease_expires = NULL,"
                " epoch = epoch + 1, finished_at = now(), updated_at = now()"
                f" WHERE id = %s AND state IN ('queued', 'running') RETURNING {_COLUMNS}",
                (item_id,),
            ).fetchall()
        )
        if not rows:
            item = self.item(item_id)
            raise FleetError(
                f"queue item {item_id} is {item.state}: only a queued or running item can be "
                "cancelled",
                hint="acode queue list shows the items",
                code=ErrorCode.FLEET_ITEM,
            )
        return QueueItem(*rows[0])

    def workers(self) -> list[WorkerRow]:
        rows = self._call(
            lambda c: c.execute(
                "SELECT id, host, pid, queue, concurrency, started_at, heartbeat_at, running,"
                " stopped_at FROM acode_fleet.workers ORDER BY started_at DESC, id"
            ).fetchall()
        )
        return [WorkerRow(*row) for row in rows]

    def pending(self, queue: str) -> int:
        """Items of ``queue`` queued or running: what a worker with --once waits for."""
        rows = self._call(
            lambda c: c.execute(
                "SELECT count(*) FROM acode_fleet.queue_items WHERE queue = %s"
                " AND state IN ('queued', 'running')",
                (queue,),
            ).fetchall()
        )
        return int(rows[0][0])

    def soonest_lapse(self, queue: str) -> float | None:
        """Seconds until the soonest lease of a running item of ``queue`` lapses, by the
        database's clock (negative: lapsed already); None when nothing runs."""
        rows = self._call(
            lambda c: c.execute(
                "SELECT extract(epoch FROM min(lease_expires) - now())::float8"
                " FROM acode_fleet.queue_items WHERE queue = %s AND state = 'running'",
                (queue,),
            ).fetchall()
        )
        return None if rows[0][0] is None else float(rows[0][0])

    # -- workers --------------------------------------------------------------------

    def register(self, worker: str, queue: str, concurrency: int) -> None:
        self._call(
            lambda c: c.execute(
                "INSERT INTO acode_fleet.workers (id, host, pid, queue, concurrency)"
                " VALUES (%s, %s, %s, %s, %s)",
                (worker, socket.gethostname(), _pid(), queue, concurrency),
            )
        )

    def heartbeat(self, worker: str, running: int, *, stopped: bool = False) -> None:
        self._call(
            lambda c: c.execute(
                "UPDATE acode_fleet.workers SET heartbeat_at = now(), running = %s,"
                " stopped_at = CASE WHEN %s THEN now() END WHERE id = %s",
                (running, stopped, worker),
            )
        )

    def claim(self, queue: str, worker: str, lease_seconds: float) -> QueueItem | None:
        params = {
            "queue": queue,
            "worker": worker,
            "host": socket.gethostname(),
            "pid": _pid(),
            "lease": lease_seconds,
        }
        rows = self._call(lambda c: c.execute(_CLAIM, params).fetchall())
        return QueueItem(*rows[0]) if rows else None

    def renew(self, item: QueueItem, lease_seconds: float) -> None:
        self._fenced(
            item, "lease_expires = now() + make_interval(secs => %(lease)s)", lease=lease_seconds
        )

    def renew_all(self, items: list[QueueItem], lease_seconds: float) -> set[int]:
        """Renew the leases of ``items`` in one statement; returns the ids still held
        (an item missing was claimed again or cancelled: its lease is lost)."""
        if not items:
            return set()
        rows = self._call(
            lambda c: c.execute(
                "UPDATE acode_fleet.queue_items SET lease_expires = now() +"
                " make_interval(secs => %s), updated_at = now() WHERE state = 'running'"
                " AND (id, epoch) IN (SELECT * FROM unnest(%s::bigint[], %s::bigint[]))"
                " RETURNING id",
                (lease_seconds, [i.id for i in items], [i.epoch for i in items]),
            ).fetchall()
        )
        return {int(row[0]) for row in rows}

    def record_session(self, item: QueueItem, session_id: str, workspace: str) -> None:
        self._fenced(
            item,
            "session_id = %(sid)s, session_host = %(host)s, session_workspace = %(ws)s,"
            " outside_effects = false",
            sid=session_id,
            host=socket.gethostname(),
            ws=workspace,
        )

    def record_outside_effects(self, item: QueueItem) -> None:
        self._fenced(item, "outside_effects = true")

    def restart(self, item: QueueItem) -> None:
        """Forget the session of an item that starts over (its workspace is out of reach)."""
        self._fenced(
            item,
            "session_id = NULL, session_host = NULL, session_workspace = NULL,"
            " outside_effects = false",
        )

    def release(self, item: QueueItem) -> None:
        """Give the item back, its session kept, for the next claim to resume it."""
        self._fenced(
            item,
            "state = 'queued', lease_expires = NULL, worker_id = NULL, worker_host = NULL,"
            " worker_pid = NULL, started_at = NULL",
        )

    def finish(self, item: QueueItem, *, branch: str | None, error: str | None) -> None:
        self._fenced(
            item,
            "state = %(state)s, result_branch = %(branch)s, error = %(error)s,"
            " lease_expires = NULL, finished_at = now()",
            state="failed" if error is not None else "done",
            branch=branch,
            error=None if error is None else redact(error),
        )

    # -- the connection -------------------------------------------------------------

    def _fenced(self, item: QueueItem, assignments: str, **values: object) -> None:
        params = {"id": item.id, "epoch": item.epoch, **values}
        sql = (
            f"UPDATE acode_fleet.queue_items SET {assignments}, updated_at = now()"
            f"{_FENCE} RETURNING id"
        )
        if not self._call(lambda c: c.execute(sql, params).fetchall()):
            raise LeaseLost(f"queue item {item.id}: epoch {item.epoch} is no longer its lease")

    def _one(self, sql: str, params: tuple[object, ...]) -> QueueItem:
        return QueueItem(*self._call(lambda c: c.execute(sql, params).fetchall())[0])

    def _call(self, body: Callable[[psycopg.Connection[tuple[Any, ...]]], T]) -> T:
        import psycopg

        with self._guard, self._translated():
            conn = self._connected()
            timer = threading.Timer(CALL_TIMEOUT_S, _cut, (conn,))
            timer.daemon = True
            timer.start()
            try:
                return body(conn)
            except psycopg.Error:
                self.close()
                raise
            finally:
                timer.cancel()

    def _connected(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        import psycopg

        from acode.sync.schema import migrate

        self._conn = psycopg.connect(
            self.url,
            autocommit=True,
            connect_timeout=2,
            application_name=self._application,
        )
        self._conn.execute(f"SET statement_timeout = {int(CALL_TIMEOUT_S * 1000)}")
        migrate(self._conn, self.name, package="acode.fleet", schema="acode_fleet")
        return self._conn

    @contextmanager
    def _translated(self) -> Iterator[None]:
        import psycopg

        from acode.sync.remote import failure_reason

        try:
            yield
        except psycopg.Error as exc:
            self.close()
            raise FleetError(
                f"cannot use the work queue {self.name}: {failure_reason(exc)}",
                hint="check that PostgreSQL answers there (fleet.url, ACODE_FLEET_URL); "
                "nothing was changed by this command",
                code=ErrorCode.FLEET_QUEUE,
            ) from exc
        except OSError as exc:
            self.close()
            raise FleetError(
                f"cannot use the work queue {self.name}: {redact(str(exc))}",
                hint="check the host name in fleet.url (ACODE_FLEET_URL)",
                code=ErrorCode.FLEET_QUEUE,
            ) from exc


def _cut(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    """Shut the socket of a call that got no answer in time: the call fails at once."""
    try:
        sock = socket.socket(fileno=conn.fileno())
    except (OSError, ValueError):  # closed meanwhile
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.detach()  # the fd stays psycopg's


def _pid() -> int:
    import os

    return os.getpid()
