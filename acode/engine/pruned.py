"""What a pruned session's record says, once its signature is checked: "pruned on DATE",
or tampering when the record was not written with the user's key."""

from __future__ import annotations

from datetime import UTC, datetime

from acode.domain.ids import SHORT_ID_LENGTH
from acode.domain.retention import prune_record_message
from acode.errors import AcodeError, CheckpointError, ErrorCode, SessionPrunedError
from acode.security.signing import Signer, load_signer
from acode.store.records import PrunedRow

__all__ = ["is_authentic", "pruned_error"]


def is_authentic(record: PrunedRow, signer: Signer) -> bool:
    """Whether ``record`` was written by a prune holding the user's key."""
    message = prune_record_message(
        record.id, record.state, record.pruned_at, record.last_seq, record.last_hash
    )
    return signer.verify(message, record.signature.hex())


def pruned_error(record: PrunedRow, signer: Signer | None = None) -> AcodeError:
    """The error for an id that names a pruned session: that it was pruned, when its
    record verifies; tampering when it does not (someone without the key removed the
    session and wrote a record to make it look pruned)."""
    signer = signer or load_signer()
    short = record.id[:SHORT_ID_LENGTH]
    if record.key_id != signer.key_id and not is_authentic(record, signer):
        return CheckpointError(
            f"session {short} was pruned with another key than the one acode has now: "
            "its record cannot be verified",
            hint="set ACODE_CHECKPOINT_SECRET to the key it was pruned with, or put that "
            "key back in the key file",
            code=ErrorCode.KEY_CHANGED,
        )
    if not is_authentic(record, signer):
        return CheckpointError(
            f"session {short} is gone from the database, and a record says it was pruned, "
            "but that record is not signed with your key: the database was edited",
            hint="restore the database from a backup; `acode session list` shows the sessions left",
            code=ErrorCode.CHAIN_BROKEN,
        )
    when = datetime.fromtimestamp(record.pruned_at / 1e6, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return SessionPrunedError(
        f"session {short} was pruned on {when} ({record.state.lower()}, "
        f"{record.last_seq} events): its history is gone from this workspace",
        hint="`acode session list` shows the sessions left; pruning follows the "
        "retention: settings of .agent/config.yml (docs/retention.md)",
    )
