"""The archive file (docs/archive.md): one session, whole and signed, as gzip'd JSON lines.

A line is one JSON object whose ``t`` says what it is, keys sorted, ASCII only, so the
same session always gives the same bytes. In order: the header (``archive``: format,
version, acode's version, the schema, the session id, the key's id, the counts), the
session's row (``session``), its sync bookkeeping (``sync``, only when it was mirrored),
then its rows table by table (``event``, ``step``, ``old_checkpoint``, ``message``,
``step_id``, ``file``), the file images it references (``blob``, its bytes in ``chunk``
lines of at most 1 MiB), and last the ``mac``: the HMAC-SHA256, under the user's key,
of the SHA-256 of every byte before it. One line at a time is written and read, so an
archive of any length costs the memory of its longest line (at most ``MAX_LINE``).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from acode.errors import ArchiveError, ErrorCode

__all__ = [
    "ARCHIVE_FORMAT",
    "ARCHIVE_VERSION",
    "CHUNK_BYTES",
    "MAX_LINE",
    "ArchiveReader",
    "Header",
    "base64_bytes",
    "encode_line",
    "field",
    "hex_bytes",
    "mac_message",
    "open_archive",
    "optional",
]

ARCHIVE_FORMAT = "acode-archive"
ARCHIVE_VERSION = 1
CHUNK_BYTES = 1 << 20
# The longest line an import reads: a file whose lines are longer is refused unread, so
# a hostile one (a line of gigabytes, a gzip bomb) costs no more memory than this.
MAX_LINE = 64 << 20
_TAG = b"acode-archive:v1\n"


def encode_line(record: dict[str, Any]) -> bytes:
    return (
        json.dumps(record, ensure_ascii=True, separators=(",", ":"), sort_keys=True).encode("ascii")
        + b"\n"
    )


def mac_message(content_sha256: bytes) -> bytes:
    """What the archive's MAC covers: the digest of every byte before its line."""
    return _TAG + content_sha256


class Header(NamedTuple):
    session_id: str
    key_id: str
    acode: str
    schema: int
    counts: dict[str, int]


class ArchiveReader:
    """An archive read line by line, each checked as it is read; every failure is an
    ArchiveError naming the file and line. ``content`` hashes every byte before the MAC's
    line, ``body`` those after the header (what two archives of one session share)."""

    def __init__(self, path: Path, stream: gzip.GzipFile) -> None:
        self.path = path
        self._stream = stream
        self.content = hashlib.sha256()
        self.body = hashlib.sha256()
        self.number = 0
        self._peeked: dict[str, Any] | None = None

    def header(self) -> Header:
        first = self._read()
        if first is None or first.get("t") != "archive" or first.get("format") != ARCHIVE_FORMAT:
            raise self.invalid("it does not start with an acode archive's header")
        version = first.get("v")
        if not isinstance(version, int) or isinstance(version, bool):
            raise self.invalid("its header has no format version")
        if version > ARCHIVE_VERSION:
            raise ArchiveError(
                f"{self.path} is an acode archive of format version {version}, made by a "
                f"newer acode (acode {first.get('acode')!s:.20}); this one reads version "
                f"{ARCHIVE_VERSION}",
                hint="upgrade acode here (pip install -U acode), then import it again",
                code=ErrorCode.ARCHIVE_TOO_NEW,
            )
        if version != ARCHIVE_VERSION:
            raise self.invalid(f"its format version {version} is not one acode wrote")
        counts = field(self, first, "counts", dict)
        return Header(
            session_id=field(self, first, "session", str),
            key_id=field(self, first, "key_id", str),
            acode=field(self, first, "acode", str),
            schema=field(self, first, "schema", int),
            counts={str(k): v for k, v in counts.items() if isinstance(v, int)},
        )

    def peek(self) -> dict[str, Any] | None:
        """The next line, not taken; None at the end of the file."""
        if self._peeked is None:
            self._peeked = self._read()
        return self._peeked

    def take(self, kind: str) -> dict[str, Any]:
        line = self.peek()
        if line is None:
            raise self.invalid("it ends too early: the file was cut short")
        if line.get("t") != kind:
            raise self.invalid(f"a line of kind {kind!r} was expected here")
        self._peeked = None
        return line

    def each(self, kind: str) -> Iterator[dict[str, Any]]:
        """The lines of ``kind`` from here on, while they last."""
        while (line := self.peek()) is not None and line.get("t") == kind:
            self._peeked = None
            yield line

    def skim(self) -> tuple[bytes, str]:
        """After the header: every line hashed, none parsed but the last, which must be
        the MAC's: (the digest of everything before the MAC, the MAC). What a file is
        checked by before any of its rows is read, at the memory of one line."""
        last = b""
        while raw := self._line():
            self.content.update(last)
            last = raw
        try:
            record = json.loads(last) if last else None
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict) or record.get("t") != "mac":
            raise self.invalid("it does not end with its MAC: the file was cut short")
        return self.content.digest(), field(self, record, "mac", str)

    def finish(self) -> tuple[bytes, str]:
        """After the last row: (the digest of everything before the MAC, the MAC); the
        file must end there."""
        if self._peeked is not None and self._peeked.get("t") != "mac":
            raise self.invalid(f"a line of kind {self._peeked.get('t')!s:.20} is out of place")
        content = self.content.digest()
        mac = field(self, self.take("mac"), "mac", str)
        if self._readline(1):
            raise self.invalid("there is more after its MAC")
        return content, mac

    def invalid(self, problem: str) -> ArchiveError:
        where = f" (line {self.number})" if self.number > 1 else ""
        return ArchiveError(
            f"{self.path} is not an acode archive acode can import: {problem}{where}",
            hint="give the file `acode session archive ID -o FILE` wrote, whole; "
            "nothing was imported",
            code=ErrorCode.ARCHIVE_INVALID,
        )

    def _readline(self, limit: int) -> bytes:
        try:
            return self._stream.readline(limit)
        except (OSError, EOFError, zlib.error) as exc:
            # gzip's own: a truncated stream (EOFError), a damaged one (BadGzipFile, CRC).
            raise self.invalid(f"it is not a whole gzip file ({exc})") from None

    def _line(self) -> bytes:
        """The next whole line, b"" at the end of the file."""
        raw = self._readline(MAX_LINE + 1)
        if not raw:
            return raw
        self.number += 1
        if not raw.endswith(b"\n"):
            if len(raw) > MAX_LINE:
                raise self.invalid(f"a line is longer than {MAX_LINE >> 20} MiB")
            raise self.invalid("it ends in the middle of a line: the file was cut short")
        return raw

    def _read(self) -> dict[str, Any] | None:
        raw = self._line()
        if not raw:
            return None
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            raise self.invalid("a line is not JSON") from None
        if not isinstance(record, dict):
            raise self.invalid("a line is not a JSON object")
        if record.get("t") != "mac":
            self.content.update(raw)
            if self.number > 1:
                self.body.update(raw)
        return record


def field(reader: ArchiveReader, record: dict[str, Any], name: str, kind: type[Any]) -> Any:
    """``record[name]``, which must be of type ``kind`` (None where ``kind`` is None)."""
    value = record.get(name)
    ok = value is None if kind is type(None) else isinstance(value, kind)
    if kind is int and isinstance(value, bool):
        ok = False
    if not ok:
        raise reader.invalid(f"the field {name!r} of a {record.get('t')!s:.20} line is wrong")
    return value


def optional(reader: ArchiveReader, record: dict[str, Any], name: str, kind: type[Any]) -> Any:
    return None if record.get(name) is None else field(reader, record, name, kind)


def hex_bytes(reader: ArchiveReader, record: dict[str, Any], name: str) -> bytes:
    try:
        return bytes.fromhex(field(reader, record, name, str))
    except ValueError:
        raise reader.invalid(f"the field {name!r} is not hexadecimal") from None


def base64_bytes(reader: ArchiveReader, record: dict[str, Any], name: str) -> bytes:
    try:
        return base64.b64decode(field(reader, record, name, str), validate=True)
    except (ValueError, binascii.Error):
        raise reader.invalid(f"the field {name!r} is not base64") from None


def open_archive(path: Path) -> gzip.GzipFile:
    """The archive's decompressed bytes (``gzip.open`` reports damage as it reads)."""
    try:
        return gzip.GzipFile(filename=path, mode="rb")
    except OSError as exc:
        raise ArchiveError(
            f"cannot read {path}: {exc.strerror or exc}",
            hint="name the archive file `acode session archive` wrote",
            code=ErrorCode.ARCHIVE_INVALID,
        ) from None
