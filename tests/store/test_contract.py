"""The store contract run against every backend of ``tests.store.contract.BACKENDS``."""

from __future__ import annotations

from tests.store.contract import EventStoreContract


class TestEventStore(EventStoreContract):
    pass
