"""``acode session archive``: one session, whole, verifiable and signed, in one file that
``acode session import`` brings back (acode/operations/archive_import.py).

Unlike an export (acode/operations/export.py), an archive is not redacted: it is the
evidence itself, every row the database holds of the session, byte for byte, and every
file image it references. The session is verified first, as ``acode resume --verify``
does: an archive is never made of a history that does not hold.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from acode.errors import StorageError, UsageError
from acode.operations.archive_format import (
    ARCHIVE_FORMAT,
    ARCHIVE_VERSION,
    CHUNK_BYTES,
    MAX_LINE,
    encode_line,
    mac_message,
)
from acode.security.signing import Signer
from acode.store.archive_records import ArchivedEvent
from acode.store.base import EventStore
from acode.store.records import SessionRow

__all__ = ["Archived", "archive_lines", "archive_session", "stored_events", "write_archive"]

# A file image is named by its SHA-256 in hex wherever a row refers to one: an event's
# pre- and post-image, a snapshot's files, a read's result, a `files` row.
_SHA256 = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
_PAGE = 1000


class Archived(NamedTuple):
    """An archive written: the session, the file, its size and what it holds."""

    row: SessionRow
    path: Path
    size: int
    counts: dict[str, int]


def archive_session(
    workspace: Path, id_or_prefix: str, output: Path, *, force: bool = False
) -> Archived:
    """Archive a session no process runs (its lock is taken for the while: a session a
    live process runs is refused, its history still moving) to ``output``."""
    from acode.operations.export import check_export_target
    from acode.operations.maintenance import locked_session
    from acode.security.signing import load_signer

    if str(output) == "-":
        raise UsageError(
            "-o -: an archive is a gzip file, not text for a terminal or a pipe",
            hint="name a file: acode session archive ID -o session.acode.gz",
        )
    target = check_export_target(output, force=force)
    signer = load_signer()
    with locked_session(workspace, id_or_prefix) as (_ws, store, row, _clock):
        try:
            size, counts = write_archive(store, row, target, signer)
        except OSError as exc:
            raise UsageError(
                f"--output {output}: it cannot be written: {exc.strerror or exc}",
                hint="name a file in a directory that exists and you may write to, on a "
                "disk with room for it; no archive was left under that name",
            ) from None
        return Archived(
            row=store.session(row.id), path=target, size=size, counts=dict(sorted(counts.items()))
        )


def write_archive(
    store: EventStore, row: SessionRow, path: Path, signer: Signer
) -> tuple[int, dict[str, int]]:
    """Write session ``row``'s archive to ``path`` (replaced whole, or not at all: a
    killed write leaves no file under its name) and return its size and counts. The
    session is verified first (``CheckpointError`` when it does not hold); the caller
    makes sure no process writes to it meanwhile (holds its lock, or it is terminal)."""
    from acode.engine.journal import verify_history
    from acode.system.atomic import replacing

    verify_history(store, row, signer)  # it may chain an old history again first
    row = store.session(row.id)
    counts: dict[str, int] = {}
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with replacing(dir_fd, path.name) as handle:
            content = hashlib.sha256()
            # mtime 0 and no name: the same session gives the same bytes.
            # In 1 MiB writes: gzip compresses each write apart (Python 3.11), and most
            # lines are a few hundred bytes.
            with (
                gzip.GzipFile(filename="", mode="wb", fileobj=handle, mtime=0) as packed,
                io.BufferedWriter(packed, CHUNK_BYTES) as out,
            ):
                for line in archive_lines(store, row, signer.key_id, counts):
                    content.update(line)
                    out.write(line)
                mac = signer.sign(mac_message(content.digest()))
                out.write(encode_line({"t": "mac", "mac": mac}))
            size = handle.tell()
    finally:
        os.close(dir_fd)
    return size, counts


def archive_lines(
    store: EventStore,
    row: SessionRow,
    key_id: str,
    counts: dict[str, int],
    workspace: str | None = None,
) -> Iterator[bytes]:
    """The archive's lines but its MAC: the header, then the body. ``counts`` is filled
    with what it holds before the header is made. ``workspace``: the one the session's
    line names instead of the stored one (an import comparing a session that a
    PostgreSQL store recorded under the importing workspace with its archive)."""
    from importlib.metadata import version

    from acode.store.base import schema_version

    stored = store.stored_session(row.id)
    if stored is None:
        raise StorageError(f"session {row.id} is not in {store.location}")
    sid = stored.sid
    steps = store.step_rows(sid)
    old = store.stored_old_checkpoints(sid)
    messages = store.messages(sid)
    step_ids = sorted(store.step_id_ledger(sid))
    files = store.stored_files(sid)
    referenced = {f.sha256 for f in files if f.sha256}
    events = 0
    for e in stored_events(store, sid):
        events += 1
        referenced.update(_SHA256.findall(e.payload))
    for m in messages:
        referenced.update(_SHA256.findall(m.content))
    blobs = store.held_blobs(sorted(referenced))
    counts.update(
        events=events,
        steps=len(steps),
        old_checkpoints=len(old),
        messages=len(messages),
        step_ids=len(step_ids),
        files=len(files),
        blobs=len(blobs),
    )
    yield encode_line(
        {
            "t": "archive",
            "format": ARCHIVE_FORMAT,
            "v": ARCHIVE_VERSION,
            # The package's, not acode.__version__: the package imports every layer.
            "acode": version("acode"),
            "schema": schema_version(),
            "session": stored.id,
            "key_id": key_id,
            "counts": counts,
        }
    )
    yield _line(
        {
            "t": "session",
            "id": stored.id,
            "title": stored.title,
            "state": stored.state,
            "workspace": stored.workspace if workspace is None else workspace,
            "parent_id": stored.parent_id,
            "kind": stored.kind,
            "config": stored.config,
            "config_hash": stored.config_hash,
            "created_at": stored.created_at,
            "updated_at": stored.updated_at,
            "archived": stored.archived,
            "chain": stored.chain,
            "key_id": stored.key_id,
        }
    )
    sync = store.sync_state(sid)
    if sync != type(sync)():
        yield _line({"t": "sync", **sync._asdict()})
    for e in stored_events(store, sid):
        yield _line(
            {
                "t": "event",
                "seq": e.seq,
                "event_id": e.event_id,
                "ts": e.ts,
                "type": e.type,
                "payload": e.payload,
                "hash": e.hash.hex(),
                "checkpoint": e.checkpoint,
                "signature": None if e.signature is None else e.signature.hex(),
            }
        )
    for s in steps:
        yield _line(
            {
                "t": "step",
                "position": s.position,
                "step_id": s.step_id,
                "task_id": s.task_id,
                "kind": s.kind,
                "status": s.status.value,
                "attempt": s.attempt,
                "input_hash": s.input_hash,
                "event_seq": s.event_seq,
            }
        )
    for slot, c in old:
        yield _line(
            {
                "t": "old_checkpoint",
                "slot": slot,
                "id": c.id,
                "seq": c.seq,
                "summary": c.summary,
                "head": bytes(c.head).hex(),
                "signature": c.signature,
                "created_at": c.created_at,
            }
        )
    for m in messages:
        yield _line({"t": "message", **m._asdict()})
    for step_id in step_ids:
        yield _line({"t": "step_id", "step_id": step_id})
    for f in files:
        yield _line({"t": "file", **f._asdict()})
    for sha in blobs:
        data = store.blob(sha)  # checked against its hash: a damaged image is refused
        yield _line({"t": "blob", "sha256": sha, "size": len(data)})
        for first in range(0, len(data), CHUNK_BYTES):
            chunk = base64.b64encode(data[first : first + CHUNK_BYTES]).decode("ascii")
            yield _line({"t": "chunk", "data": chunk})


def stored_events(store: EventStore, sid: int) -> Iterator[ArchivedEvent]:
    """Every event of session ``sid`` as stored, read a page at a time."""
    after = 0
    while page := store.stored_events(sid, after, _PAGE):
        yield from page
        after = page[-1].seq


def _line(record: dict[str, Any]) -> bytes:
    line = encode_line(record)
    if len(line) > MAX_LINE:
        raise StorageError(
            f"a {record['t']} row of the session is {len(line) >> 20} MiB as a line of an "
            f"archive, more than an import reads ({MAX_LINE >> 20} MiB)",
            hint="this session cannot be archived; keep the database file instead",
        )
    return line
