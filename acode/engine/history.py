"""One session's history as the engine uses it: every event authenticated as it is read.

An event is authentic when its stored hash is its link, under the session's chain key
(acode.domain.chain), from the stored hash of the event before it: only the holder of
the user's key can make such a pair, and a pair is worth nothing at another place of
the history or in another session. So every read checks the links of what it reads,
and only those: the newest checkpoint's event, a window of a replay, the approvals of a
step, the messages of a conversation. Nothing is taken from a column on trust.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from acode.domain.chain import ChainKey
from acode.domain.events import Event, EventType, canonical_json
from acode.domain.ids import SHORT_ID_LENGTH
from acode.errors import CheckpointError, ErrorCode, StorageError
from acode.security.signing import SECRET_ENV, key_path
from acode.store.records import MessageRow, SessionRow

if TYPE_CHECKING:
    from acode.store.base import EventStore

__all__ = ["EventRow", "History", "key_changed_error", "messages_digest"]

# An event as a replay reads it: (seq, event id, time, type, payload JSON, hash).
EventRow = tuple[int, str, int, str, str, bytes]


def messages_digest(rows: Sequence[MessageRow]) -> str:
    """What a step's event records of the messages it added to the conversation."""
    text = canonical_json([[m.idx, m.role, m.content] for m in rows])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class History:
    """The events of session ``row``, each checked against its chain as it is read.
    ``key_changed``: the session's chain was made with another key than ``chain``'s,
    which a failed check then names instead of an edit."""

    def __init__(
        self, store: EventStore, row: SessionRow, chain: ChainKey, *, key_changed: bool
    ) -> None:
        self.store = store
        self.row = row
        self.chain = chain
        self._key_changed = key_changed
        # The first failed check: once the history is found edited, the journal writes
        # nothing more to it (Journal.write), whatever a caller that catches the error does.
        self.refused: CheckpointError | None = None

    def event(self, seq: int) -> Event:
        """Event ``seq``."""
        try:
            event = self.store.event(self.row, seq)
        except StorageError:
            raise self._edited(f"event {seq} is missing from the history") from None
        self.check(self._previous([seq])[seq], event)
        return event

    def events(self, after: int = 0) -> list[Event]:
        """Every event after event ``after``, in order."""
        events = self.store.events(self.row, after_seq=after)
        previous = self._previous([after + 1])[after + 1] if events else b""
        for event in events:
            self.check(previous, event)
            previous = event.hash
        return events

    def of_type(self, type_: EventType) -> list[Event]:
        """The events of type ``type_``, in order."""
        events = self.store.events_of_type(self.row, type_)
        previous = self._previous([e.seq for e in events])
        for event in events:
            self.check(previous[event.seq], event)
        return events

    def window(self, after: int, previous: bytes | None, limit: int) -> list[EventRow]:
        """Up to ``limit`` events after event ``after``, in order, as rows: what a replay
        reads. ``previous`` is event ``after``'s hash when the caller has checked it."""
        rows = self.store.event_rows(self.row, after, limit)
        if not rows:
            return rows
        if previous is None:
            previous = self._previous([after + 1])[after + 1]
        held = self.chain.linked(previous, rows)
        if held < len(rows):
            raise self.broken(rows[held][0], rows[held][3])
        # Each link covers its seq: the rows hold every seq from ``after + 1`` on when
        # the last one is where it would be with none missing.
        if rows[0][0] != after + 1 or rows[-1][0] != after + len(rows):
            for expected, row in enumerate(rows, after + 1):
                if row[0] != expected:
                    raise self.broken(row[0], row[3])
        return rows

    def messages(self) -> list[MessageRow]:
        """The conversation's messages, each held to the digest its step's event
        recorded of them (Journal.write)."""
        rows = self.store.messages(self.row.sid)
        by_seq: dict[int, list[MessageRow]] = {}
        for index, row in enumerate(rows):
            if row.idx != index:
                raise self._edited(f"message {index} of the conversation is missing")
            by_seq.setdefault(row.seq, []).append(row)
        try:
            events = self.store.events_at(self.row, sorted(by_seq))
        except StorageError as missing:
            raise self._edited(f"a message names an event that {missing.message}") from None
        previous = self._previous(sorted(by_seq))
        for seq, group in by_seq.items():
            event = events[seq]
            self.check(previous[seq], event)
            if event.payload.get("messages") != messages_digest(group):
                raise self._edited(
                    f"the messages of event {seq} are not the ones it recorded",
                )
        return rows

    def check(self, previous: bytes, event: Event) -> None:
        """Raise CheckpointError unless ``event`` links to ``previous``."""
        link = self.chain.link(
            previous, event.seq, event.event_id, event.ts_us, event.type, event.payload_json
        )
        if link != event.hash:
            raise self.broken(event.seq, event.type.value)

    def broken(self, seq: int, type_: str) -> CheckpointError:
        """The error of an event whose link does not hold."""
        if self._key_changed:
            return self._refuse(key_changed_error(self.row))
        return self._refuse(
            CheckpointError(
                f"session {_short(self.row)}: event {seq} ({type_}) does not match its hash "
                "chain: the database was edited (an event changed, inserted, removed or forged)",
                hint="refusing to use it; the history is kept unchanged for inspection "
                f"(`acode session history {_short(self.row)}`)",
                code=ErrorCode.CHAIN_BROKEN,
            )
        )

    def _edited(self, what: str) -> CheckpointError:
        return self._refuse(
            CheckpointError(
                f"session {_short(self.row)}: {what}: the database was edited",
                hint="refusing to use it; the history is kept unchanged for inspection",
                code=ErrorCode.CHAIN_BROKEN,
            )
        )

    def _refuse(self, error: CheckpointError) -> CheckpointError:
        if self.refused is None:
            self.refused = error
        return error

    def _previous(self, seqs: Sequence[int]) -> dict[int, bytes]:
        """The stored hash each of events ``seqs`` links to."""
        found = self.store.hashes(self.row, [seq - 1 for seq in seqs if seq > 1])
        previous: dict[int, bytes] = {}
        for seq in seqs:
            if seq == 1:
                previous[seq] = self.chain.genesis
            elif seq - 1 in found:
                previous[seq] = found[seq - 1]
            else:
                raise self._edited(f"event {seq - 1} is missing from the history")
        return previous


def key_changed_error(row: SessionRow) -> CheckpointError:
    return CheckpointError(
        f"session {_short(row)} was recorded with another key (key {row.key_id}) than this "
        "one: its history cannot be verified, so it is not used",
        hint=f"set {SECRET_ENV} to the key it was recorded with, or put that key back in "
        f"{key_path()}; a session recorded on another machine: both machines need the "
        f"same {SECRET_ENV}; the database was not changed",
        code=ErrorCode.KEY_CHANGED,
    )


def _short(row: SessionRow) -> str:
    return row.short_id or row.id[:SHORT_ID_LENGTH]
