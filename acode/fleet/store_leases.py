"""The sessions' leases in a shared store, as a worker reads them while a resume it
started waits for one: how long until a lost machine's lapses, by the store's clock."""

from __future__ import annotations

from typing import TYPE_CHECKING

from acode.errors import AcodeError

if TYPE_CHECKING:
    from acode.store.postgres.store import PostgresStore

__all__ = ["StoreLeases"]


class StoreLeases:
    """Opened at the first read; none without a shared store (``url`` None)."""

    def __init__(self, url: str | None) -> None:
        self._url = url
        self._store: PostgresStore | None = None

    def elsewhere(self, session_id: str) -> float | None:
        """Seconds until the session's lease lapses, by the store's clock, when a process
        of another machine holds it (0 when it is free or has lapsed); None when a process
        of this machine holds it, or when the store cannot tell (no shared store, or out
        of reach)."""
        from acode.system.process_table import process_table_id

        if self._url is None:
            return None
        try:
            if self._store is None:
                from acode.store.postgres.store import PostgresStore

                self._store = PostgresStore.open(self._url)
            found = self._store.lease_lapse(session_id)
        except AcodeError:
            return None
        if found is None:
            return 0.0
        holder, left = found
        here = process_table_id()
        if here is None or holder.machine is None or holder.machine == here:
            return None
        return left

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
