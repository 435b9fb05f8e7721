"""Chaining a session recorded before schema 7 again under the user's key.

Before schema 7 an event's hash was plain SHA-256 (acode.domain.chain ``event_hash``),
which anyone who can write the database can recompute. Migration 0007 marks those
sessions with chain version 1; the first time acode loads one with the key, this module
verifies its whole history as the old format allows (every link from the first event,
every checkpoint's signature under this key, the events after the newest checkpoint of
the only kinds acode writes without one) and only then records it again under the key:
new links, checkpoints signed over them, and in each step's event the digest of the
messages it added (History.messages). A history that fails any check is left exactly
as it was and refused: it is evidence, never laundered into a keyed chain.
"""

from __future__ import annotations

from typing import Any

from acode.domain.chain import CHAIN_VERSION, event_hash, genesis_hash
from acode.domain.events import Event, EventType, canonical_json
from acode.domain.ids import SHORT_ID_LENGTH
from acode.domain.reducer import SessionSummary, fold
from acode.engine.history import messages_digest
from acode.engine.journal import checkpoint_message, stored_summary
from acode.errors import CheckpointError, ErrorCode
from acode.security.signing import SECRET_ENV, Signer
from acode.store.base import EventStore
from acode.store.records import CheckpointRow, MessageRow, SessionRow

__all__ = ["rechain"]

# What acode writes without a checkpoint: a step's start and its rollback (Session).
_UNCHECKPOINTED = frozenset({EventType.STEP_STARTED, EventType.STEP_ROLLED_BACK})


def rechain(store: EventStore, row: SessionRow, signer: Signer) -> SessionRow:
    """Session ``row``, its history verified and chained again under ``signer``'s key;
    CheckpointError, with nothing changed, when it does not verify."""
    events = store.events(row)
    summaries = _verified_old_chain(row, events)
    checkpoints = store.checkpoint_rows(row)
    signed = {seq: (text, sig, ts) for seq, text, sig, ts in checkpoints}
    for seq, (text, sig, ts) in signed.items():
        summary_text = _summary_text(row, summaries[seq], text)
        old = CheckpointRow(
            id=seq,
            seq=seq,
            summary=summary_text,
            head=events[seq - 1].hash,
            signature=_hex(sig),
            created_at=ts,
        )
        if not signer.verify(checkpoint_message(row.id, row.title, old), old.signature):
            raise _unverified(row, f"its checkpoint at event {seq} is not signed by this key")
    old_table = store.old_checkpoints(row)
    for cp in old_table:
        if not signer.verify(checkpoint_message(row.id, row.title, cp), cp.signature):
            raise _unverified(row, f"its checkpoint {cp.id} is not signed by this key")
    newest = max([*signed, *(cp.seq for cp in old_table)], default=0)
    if newest == 0:
        raise _unverified(row, "it has no checkpoint")
    for event in events[newest:]:
        if event.type not in _UNCHECKPOINTED:
            raise _unverified(
                row, f"event {event.seq} ({event.type.value}) follows its newest checkpoint"
            )
    digests = _message_digests(store.messages(row.sid))
    chain = signer.chain_key(row.id)
    previous = chain.genesis
    rewritten: list[tuple[int, str, bytes, bytes | None]] = []
    hashes: dict[int, bytes] = {}
    for event in events:
        payload_json = event.payload_json
        if event.seq in digests:
            payload: dict[str, Any] = {**event.payload, "messages": digests[event.seq]}
            payload_json = canonical_json(payload)
        link = chain.link(
            previous, event.seq, event.event_id, event.ts_us, event.type, payload_json
        )
        tag = None
        if event.seq in signed:
            text, _, ts = signed[event.seq]
            summary_text = _summary_text(row, summaries[event.seq], text)
            new = CheckpointRow(
                id=event.seq,
                seq=event.seq,
                summary=summary_text,
                head=link,
                signature="",
                created_at=ts,
            )
            tag = signer.tag(checkpoint_message(row.id, row.title, new))
        rewritten.append((event.seq, payload_json, link, tag))
        hashes[event.seq] = previous = link
    resigned = []
    for cp in old_table:
        head = hashes[cp.seq]
        message = checkpoint_message(row.id, row.title, cp._replace(head=head))
        resigned.append((cp.id, head, signer.sign(message)))
    store.rechain(row, rewritten, resigned, CHAIN_VERSION, signer.key_id)
    return store.session(row.id)


def _verified_old_chain(row: SessionRow, events: list[Event]) -> dict[int, SessionSummary]:
    """The summary after each event, once every link of the version 1 chain holds."""
    previous = genesis_hash(row.id)
    summary: SessionSummary | None = None
    summaries: dict[int, SessionSummary] = {}
    for number, event in enumerate(events, start=1):
        link = event_hash(
            previous, event.seq, event.event_id, event.ts_us, event.type, event.payload_json
        )
        if event.seq != number or link != event.hash:
            raise _unverified(row, f"event {number} does not match its hash chain")
        try:
            summary = fold(summary, event)
        except CheckpointError as exc:
            raise _unverified(row, exc.message) from exc
        summaries[event.seq] = summary
        previous = event.hash
    return summaries


def _summary_text(row: SessionRow, summary: SessionSummary, stored: str | None) -> str:
    """The summary a checkpoint signed: the one it stored, which must be the history's,
    or (schema 5 on, when it left it out) the history's."""
    if stored is None:
        return summary.encode()
    if stored_summary(summary, stored) != stored:
        raise _unverified(row, "a checkpoint recorded a state its events do not fold to")
    return stored


def _message_digests(messages: list[MessageRow]) -> dict[int, str]:
    by_seq: dict[int, list[MessageRow]] = {}
    for message in messages:
        by_seq.setdefault(message.seq, []).append(message)
    return {seq: messages_digest(group) for seq, group in by_seq.items()}


def _hex(signature: bytes | None) -> str:
    return "" if signature is None else signature.hex()


def _unverified(row: SessionRow, what: str) -> CheckpointError:
    name = row.short_id or row.id[:SHORT_ID_LENGTH]
    return CheckpointError(
        f"session {name} was recorded before acode keyed its hash chain, and it cannot be "
        f"verified with this key: {what}: it was recorded with another key, or the database "
        "was edited",
        hint=f"if it was recorded with another key, set {SECRET_ENV} to it; the session is "
        f"kept unchanged for inspection (`acode session history {name}`)",
        code=ErrorCode.CHECKPOINT_INVALID,
    )
