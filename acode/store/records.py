"""Rows as the store hands them out, and the one unit the store writes: a Commit.

All are named tuples: as immutable as a frozen dataclass, several times cheaper to
build (a Commit and its CheckpointRow are built at every step), and over ten times
cheaper to define, which every process start pays for each class (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from acode.domain.events import Event
from acode.domain.reducer import StepRecord
from acode.domain.retention import prune_record_message

__all__ = [
    "Backlog",
    "CheckpointRow",
    "Commit",
    "FileFields",
    "FileRow",
    "MessageRow",
    "PruneCost",
    "PrunedRow",
    "SessionRow",
    "SyncStateRow",
]


class SessionRow(NamedTuple):
    """A session's row: who it is, where it runs, and what it started with."""

    sid: int
    id: str
    title: str
    state: str
    workspace: str
    parent_id: str | None
    kind: str
    config: str
    config_hash: str
    created_at: int
    updated_at: int
    current_task: str | None
    current_step: str | None
    archived: bool
    chain: int  # the version of its hash chain (acode.domain.chain), schema 7
    key_id: str | None  # the key its chain is made with (Signer.key_id); None: not known
    short_id: str = ""  # the shortest unique prefix, at least 8 characters


class CheckpointRow(NamedTuple):
    """A signed checkpoint: ``summary`` is the session's state at event ``seq``, whose
    hash is ``head``. From schema 4 on it lives in that event's row and ``id`` is ``seq``;
    older ones numbered theirs 1, 2, 3..., always below their ``seq``."""

    id: int
    seq: int
    summary: str
    head: bytes
    signature: str  # hex
    created_at: int


class MessageRow(NamedTuple):
    """One message of a session's model conversation, at its place in it."""

    idx: int
    role: str
    content: str
    seq: int


class FileRow(NamedTuple):
    """A workspace file as a session last saw it (``sha256`` None: it did not exist),
    with git's stat data: the change time and inode are what a person cannot put back
    (None in rows recorded before schema 7: not recorded)."""

    path: str
    sha256: str | None
    size: int | None
    mtime_ns: int | None
    ctime_ns: int | None = None
    ino: int | None = None


# A FileRow's fields as the plain tuple SQLite returns: what a check of a session's
# 200,000 files reads without making an object of each (acode.resume.environment).
FileFields = tuple[str, str | None, int | None, int | None, int | None, int | None]


class FileTouch(NamedTuple):
    """A step's record of a workspace file: which session, which step, and when."""

    session_id: str
    path: str
    seq: int  # the event that recorded the file
    ts_us: int
    step: str | None
    kind: str | None
    position: int | None


class Commit(NamedTuple):
    """Everything one transaction writes for a session: events and what they project to.

    A step's completion (event, step row, checkpoint, session row) is one Commit, so
    after a crash either all of it is there or none of it. The checkpoint, when there
    is one, is taken at the last event and written into its row.
    """

    events: Sequence[Event]
    updated_at: int
    state: str | None = None  # set when the session row changes state
    steps: Sequence[StepRecord] = ()
    checkpoint: CheckpointRow | None = None
    # False: the checkpoint's row leaves its summary out, for readers to derive (schema 5).
    summary_written: bool = True
    # The step ids for the ledger (schema 6), written with the summaries: see Journal.
    step_ids: Sequence[str] = ()
    messages: Sequence[MessageRow] = ()
    blobs: Sequence[tuple[str, bytes]] = ()
    files: Sequence[FileRow] = ()
    archive: bool = False  # take the session off the resumable list


class SyncStateRow(NamedTuple):
    """A session's sync bookkeeping; times in microseconds since the epoch."""

    remote_id: str | None = None
    synced_seq: int = 0
    last_attempt: int | None = None
    last_success: int | None = None
    last_error: str | None = None
    next_retry: int | None = None
    failures: int = 0
    down_since: int | None = None

    def synced_for(self, remote_id: str) -> int:
        """What ``remote_id`` holds: nothing, as far as we know, when it is not the
        remote recorded here (the configuration now names another one)."""
        return self.synced_seq if self.remote_id == remote_id else 0


class Backlog(NamedTuple):
    """One session's position: its last event and what the recorded remote holds."""

    session_id: str
    last_seq: int
    remote_id: str | None
    synced_seq: int

    def pending_for(self, remote_id: str | None = None) -> int:
        """Events ``remote_id`` lacks (None: the recorded remote, which is all that can
        be known without asking it)."""
        held = self.synced_seq if remote_id in (None, self.remote_id) else 0
        return max(0, self.last_seq - held)


class PrunedRow(NamedTuple):
    """The record a prune keeps of a session it removed (schema 8): ``signature`` is the
    user's key's tag over the other fields but ``files_left`` (see
    acode.domain.retention.prune_record_message)."""

    id: str
    state: str
    pruned_at: int
    last_seq: int
    last_hash: bytes
    key_id: str
    signature: bytes
    files_left: int = 0  # 1: its files wait to be removed, 2: its rollback backups too

    @classmethod
    def signed(
        cls,
        session_id: str,
        state: str,
        pruned_at: int,
        last: tuple[Any, Any] | None,
        *,
        key_id: str,
        sign: Callable[[bytes], bytes],
        files_left: int,
    ) -> PrunedRow:
        """The record of session ``session_id`` pruned at ``pruned_at``, whose last event
        is ``last`` (its seq and hash; None: it had none), signed with ``sign``."""
        last_seq, last_hash = (int(last[0]), bytes(last[1])) if last else (0, b"")
        message = prune_record_message(session_id, state, pruned_at, last_seq, last_hash)
        return cls(
            id=session_id,
            state=state,
            pruned_at=pruned_at,
            last_seq=last_seq,
            last_hash=last_hash,
            key_id=key_id,
            signature=sign(message),
            files_left=files_left,
        )


class PruneCost(NamedTuple):
    """What pruning a set of sessions removes: each one's events and bytes (its rows), and
    the stored file images no other session refers to; ``own_images``: the bytes of the
    images each one alone refers to (what pruning it by itself frees besides its rows)."""

    events: dict[str, int]
    bytes: dict[str, int]
    blobs: int
    blob_bytes: int
    own_images: dict[str, int]
