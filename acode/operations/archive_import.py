"""``acode session import``: an archive (acode/operations/archive.py) brought back into a
workspace's store.

Nothing is written to the store before everything is verified: the archive's MAC is
checked under the user's key over the whole file, none of it parsed; then it is read
into a scratch database beside the store, the session's whole history verified there as
``acode resume --verify`` does, and every checkpoint's signature; only then is it copied
into the store, in one transaction. The session keeps
its id, events, hashes and checkpoints; the store gives it a ``sid`` of its own.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from acode.domain.chain import CHAIN_VERSION
from acode.domain.reducer import StepRecord, StepStatus
from acode.errors import AcodeError, ArchiveError, ErrorCode, StorageError
from acode.operations.archive import archive_lines, stored_events
from acode.operations.archive_format import (
    ArchiveReader,
    Header,
    base64_bytes,
    field,
    hex_bytes,
    mac_message,
    open_archive,
    optional,
)
from acode.security.signing import SECRET_ENV, Signer, key_path
from acode.store.archive_records import ArchivedEvent, ArchivedFile, SessionImport
from acode.store.base import EventStore, open_store
from acode.store.records import CheckpointRow, MessageRow, SessionRow, SyncStateRow

__all__ = ["Imported", "check_archive", "import_archive", "read_archive"]

_STATUS = {s.value: s for s in StepStatus}
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PAGE = 1000


class Imported(NamedTuple):
    """An import's outcome: the session as the store holds it, and whether this import
    wrote it (False: the store held it already, identical)."""

    row: SessionRow
    new: bool
    counts: dict[str, int]


def import_archive(workspace: Path, path: Path) -> Imported:
    """Verify the archive at ``path``, then bring its session into the workspace's store."""
    from acode.engine.lifecycle import open_workspace, open_workspace_store
    from acode.security.signing import load_signer

    signer = load_signer()
    header = check_archive(path, signer)  # before the workspace's state is even made
    ws = open_workspace(workspace)
    store = open_workspace_store(ws)
    try:
        # The scratch database is SQLite whatever the workspace's store: private, beside
        # the state, and on the same disk.
        with tempfile.TemporaryDirectory(prefix=".import-", dir=ws.paths.state_dir) as scratch_dir:
            scratch = open_store(Path(scratch_dir) / "scratch.db", "normal")
            try:
                body, blobs = read_archive(path, header, scratch, signer)
                verified = scratch.session(header.session_id)
                existing = store.stored_session(header.session_id)
                if existing is None:
                    try:
                        row = store.import_session(_copy(scratch, verified, blobs))
                    except StorageError:
                        # Another import of it won the race: compared below, like any.
                        existing = store.stored_session(header.session_id)
                        if existing is None:
                            raise
                if existing is not None:
                    return _present(store, existing, verified.workspace, body, path, header)
            finally:
                scratch.close()
    finally:
        store.close()
    return Imported(row=row, new=True, counts=header.counts)


def check_archive(path: Path, signer: Signer) -> Header:
    """The header of the archive at ``path`` once its MAC holds under ``signer``'s key:
    the whole file read once through, one line at a time, none of it parsed but the
    header and the MAC's line, so that a file not made with the key is refused before
    anything of it is used."""
    with open_archive(path) as stream:
        reader = ArchiveReader(path, stream)
        header = reader.header()
        _check_key(header, signer, path)
        _check_mac(*reader.skim(), signer, path)
    return header


def read_archive(
    path: Path, header: Header, scratch: EventStore, signer: Signer
) -> tuple[bytes, list[str]]:
    """Read the archive at ``path``, whose ``check_archive`` gave ``header``, into the
    empty store ``scratch`` and verify it there: the MAC again over what is read (the
    file may have changed since), then the session's history and every checkpoint.
    Returns the digest of its body (what two archives of the same session share) and
    its blobs."""
    with open_archive(path) as stream:
        reader = ArchiveReader(path, stream)
        if reader.header() != header:
            raise _changed(path)
        blobs: list[str] = []
        parts = _Parts(reader, header, blobs)
        try:
            scratch.import_session(parts.session_import())
        except (StorageError, OverflowError, UnicodeError) as exc:
            # Rows that break the schema's rules (two events of one seq, a number beyond
            # 64 bits): only someone who holds the key can have made them.
            raise reader.invalid(f"its rows do not fit together ({exc})") from None
        _check_mac(*reader.finish(), signer, path)
        parts.check_counts()
        body = reader.body.digest()
    _verify(scratch, header.session_id, signer, path)
    return body, blobs


def _check_key(header: Header, signer: Signer, path: Path) -> None:
    if header.key_id != signer.key_id:
        raise ArchiveError(
            f"{path} was made with another key (key {header.key_id}) than this one "
            f"(key {signer.key_id}): it cannot be verified here, so it is not imported",
            hint=f"both machines need the same key: copy {key_path()} from the machine "
            f"that made it (mode 0600), or set {SECRET_ENV} to its key; nothing was imported",
            code=ErrorCode.ARCHIVE_OTHER_KEY,
        )


def _check_mac(content: bytes, mac: str, signer: Signer, path: Path) -> None:
    if not hmac.compare_digest(signer.sign(mac_message(content)), mac):
        raise _changed(path)


def _changed(path: Path) -> ArchiveError:
    return ArchiveError(
        f"{path} does not match its MAC: it was changed after it was made "
        "(a byte edited, a line added, removed or moved)",
        hint="nothing was imported; archive the session again from its workspace",
        code=ErrorCode.ARCHIVE_TAMPERED,
    )


def _verify(scratch: EventStore, session_id: str, signer: Signer, path: Path) -> None:
    from acode.engine.journal import verify_history

    row = scratch.session(session_id)
    if row.chain != CHAIN_VERSION:
        raise ArchiveError(
            f"{path} holds a session chained in version {row.chain}, which acode never archives",
            hint="nothing was imported",
            code=ErrorCode.ARCHIVE_TAMPERED,
        )
    try:
        verify_history(scratch, row, signer)
        _verify_every_checkpoint(scratch, row, signer)
    except AcodeError as exc:
        raise ArchiveError(
            f"the session in {path} does not verify: {exc.message}",
            hint="nothing was imported; its MAC holds, so it was archived this way: "
            "archive it again from its workspace after `acode resume --verify ID` there",
            code=ErrorCode.ARCHIVE_TAMPERED,
        ) from None


def _verify_every_checkpoint(store: EventStore, row: SessionRow, signer: Signer) -> None:
    """Every checkpoint's signature, the derived ones with the summary the history folds
    to at their event (verify_history checks the newest ones)."""
    from acode.domain.reducer import SessionSummary, fold
    from acode.engine.journal import checkpoint_message

    rows = {seq: (text, sig, ts) for seq, text, sig, ts in store.checkpoint_rows(row)}
    summary: SessionSummary | None = None
    after = 0
    while events := store.events(row, after_seq=after, limit=_PAGE):
        for event in events:
            summary = fold(summary, event)
            found = rows.get(event.seq)
            if found is None:
                continue
            text, sig, ts = found
            cp = CheckpointRow(
                id=event.seq,
                seq=event.seq,
                summary=summary.encode() if text is None else text,
                head=event.hash,
                signature="" if sig is None else sig.hex(),
                created_at=ts,
            )
            if not signer.verify(checkpoint_message(row.id, row.title, cp), cp.signature):
                raise ArchiveError(
                    f"the checkpoint at event {event.seq} is not signed by the key",
                    code=ErrorCode.ARCHIVE_TAMPERED,
                )
        after = events[-1].seq
    for old in store.old_checkpoints(row):
        if not signer.verify(checkpoint_message(row.id, row.title, old), old.signature):
            raise ArchiveError(
                f"the old checkpoint {old.id} is not signed by the key",
                code=ErrorCode.ARCHIVE_TAMPERED,
            )


def _present(
    store: EventStore,
    existing: SessionRow,
    workspace: str,
    body: bytes,
    path: Path,
    header: Header,
) -> Imported:
    """The store holds the session already: identical to the archive, that is done
    (an import run again); otherwise it is refused, whichever is newer. Its workspace
    (``workspace``, the archive's) is not compared: a PostgreSQL store records an
    imported session under the workspace that imported it."""
    digest = hashlib.sha256()
    lines = archive_lines(store, existing, header.key_id, {}, workspace)
    next(lines)  # the header: it names the acode that made it
    for line in lines:
        digest.update(line)
    row = store.session(existing.id)
    if digest.digest() == body:
        return Imported(row=row, new=False, counts=header.counts)
    raise ArchiveError(
        f"session {row.short_id} is in this workspace already, and differs from the one "
        f"in {path} (state {row.state} here)",
        hint=f"nothing was imported; see it with `acode session show {row.short_id}`, or "
        "import the archive into another workspace (acode session import FILE -w DIR)",
        code=ErrorCode.ARCHIVE_SESSION_EXISTS,
    )


def _copy(scratch: EventStore, row: SessionRow, blobs: list[str]) -> SessionImport:
    """The verified session, read back from the scratch store a page at a time."""
    stored = scratch.stored_session(row.id)
    assert stored is not None  # read into it just now
    sid = stored.sid
    sync = scratch.sync_state(sid)
    return SessionImport(
        session=stored,
        sync_state=None if sync == SyncStateRow() else sync,
        events=stored_events(scratch, sid),
        steps=scratch.step_rows(sid),
        old_checkpoints=scratch.stored_old_checkpoints(sid),
        messages=scratch.messages(sid),
        step_ids=sorted(scratch.step_id_ledger(sid)),
        files=scratch.stored_files(sid),
        blobs=((sha, scratch.blob(sha)) for sha in blobs),
    )


class _Parts:
    """The archive's lines as the rows of a SessionImport, read as the store takes them."""

    def __init__(self, reader: ArchiveReader, header: Header, blobs: list[str]) -> None:
        self.r = reader
        self.header = header
        self.blobs = blobs
        self.seen: dict[str, int] = {}

    def session_import(self) -> SessionImport:
        r = self.r
        s = r.take("session")
        session = SessionRow(
            sid=0,
            id=field(r, s, "id", str),
            title=field(r, s, "title", str),
            state=field(r, s, "state", str),
            workspace=field(r, s, "workspace", str),
            parent_id=optional(r, s, "parent_id", str),
            kind=field(r, s, "kind", str),
            config=field(r, s, "config", str),
            config_hash=field(r, s, "config_hash", str),
            created_at=field(r, s, "created_at", int),
            updated_at=field(r, s, "updated_at", int),
            current_task=None,
            current_step=None,
            archived=field(r, s, "archived", bool),
            chain=field(r, s, "chain", int),
            key_id=optional(r, s, "key_id", str),
        )
        if session.id != self.header.session_id:
            raise r.invalid("its session row is not the session its header names")
        sync = None
        if (line := r.peek()) is not None and line.get("t") == "sync":
            sync = self._sync(r.take("sync"))
        return SessionImport(
            session=session,
            sync_state=sync,
            events=self._rows("events", "event", self._event),
            steps=self._rows("steps", "step", self._step),
            old_checkpoints=self._rows("old_checkpoints", "old_checkpoint", self._old),
            messages=self._rows("messages", "message", self._message),
            step_ids=self._rows("step_ids", "step_id", lambda x: field(r, x, "step_id", str)),
            files=self._rows("files", "file", self._file),
            blobs=self._blobs(),
        )

    def check_counts(self) -> None:
        for name, count in self.header.counts.items():
            if self.seen.get(name, 0) != count:
                raise self.r.invalid(f"its header counts {count} {name}, it holds other")

    def _rows(self, name: str, kind: str, parse: Any) -> Iterator[Any]:
        self.seen[name] = 0
        for line in self.r.each(kind):
            self.seen[name] += 1
            yield parse(line)

    def _sync(self, x: dict[str, Any]) -> SyncStateRow:
        r = self.r
        return SyncStateRow(
            remote_id=optional(r, x, "remote_id", str),
            synced_seq=field(r, x, "synced_seq", int),
            last_attempt=optional(r, x, "last_attempt", int),
            last_success=optional(r, x, "last_success", int),
            last_error=optional(r, x, "last_error", str),
            next_retry=optional(r, x, "next_retry", int),
            failures=field(r, x, "failures", int),
            down_since=optional(r, x, "down_since", int),
        )

    def _event(self, x: dict[str, Any]) -> ArchivedEvent:
        r = self.r
        event_id = field(r, x, "event_id", str)
        if not _UUID.fullmatch(event_id):
            raise r.invalid("an event's id is not a UUID")
        return ArchivedEvent(
            seq=field(r, x, "seq", int),
            event_id=event_id,
            ts=field(r, x, "ts", int),
            type=field(r, x, "type", str),
            payload=field(r, x, "payload", str),
            hash=hex_bytes(r, x, "hash"),
            checkpoint=optional(r, x, "checkpoint", str),
            signature=None if x.get("signature") is None else hex_bytes(r, x, "signature"),
        )

    def _step(self, x: dict[str, Any]) -> StepRecord:
        r = self.r
        status = _STATUS.get(field(r, x, "status", str))
        if status is None:
            raise r.invalid("a step's status is not one acode writes")
        return StepRecord(
            position=field(r, x, "position", int),
            step_id=field(r, x, "step_id", str),
            kind=field(r, x, "kind", str),
            status=status,
            attempt=field(r, x, "attempt", int),
            task_id=optional(r, x, "task_id", str),
            input_hash=optional(r, x, "input_hash", str),
            event_seq=field(r, x, "event_seq", int),
        )

    def _old(self, x: dict[str, Any]) -> tuple[int, CheckpointRow]:
        r = self.r
        return field(r, x, "slot", int), CheckpointRow(
            id=field(r, x, "id", int),
            seq=field(r, x, "seq", int),
            summary=field(r, x, "summary", str),
            head=hex_bytes(r, x, "head"),
            signature=field(r, x, "signature", str),
            created_at=field(r, x, "created_at", int),
        )

    def _message(self, x: dict[str, Any]) -> MessageRow:
        r = self.r
        return MessageRow(
            idx=field(r, x, "idx", int),
            role=field(r, x, "role", str),
            content=field(r, x, "content", str),
            seq=field(r, x, "seq", int),
        )

    def _file(self, x: dict[str, Any]) -> ArchivedFile:
        r = self.r
        return ArchivedFile(
            path=field(r, x, "path", str),
            sha256=optional(r, x, "sha256", str),
            size=optional(r, x, "size", int),
            mtime_ns=optional(r, x, "mtime_ns", int),
            ctime_ns=optional(r, x, "ctime_ns", int),
            ino=optional(r, x, "ino", int),
            seq=field(r, x, "seq", int),
        )

    def _blobs(self) -> Iterator[tuple[str, bytes]]:
        r = self.r
        self.seen["blobs"] = 0
        for line in r.each("blob"):
            sha, size = field(r, line, "sha256", str), field(r, line, "size", int)
            data = bytearray()
            for chunk in r.each("chunk"):
                data += base64_bytes(r, chunk, "data")
                if len(data) > size:
                    break
            if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
                raise r.invalid(f"the file image {sha[:12]} is not the one its hash names")
            self.seen["blobs"] += 1
            self.blobs.append(sha)
            yield sha, bytes(data)
