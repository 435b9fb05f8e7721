"""read_user_file: a file a person names is read only when it is a regular file, and only
up to the limit."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from acode.system.user_files import UnfitFile, read_user_file


def test_a_regular_file_is_read_whole_up_to_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_user_file(path, limit=100) == b"x" * 100
    with pytest.raises(UnfitFile, match="larger than 99 bytes"):
        read_user_file(path, limit=99)


def test_a_symlink_to_a_regular_file_is_followed(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    assert read_user_file(tmp_path / "link") == b"data"


def test_a_fifo_with_no_writer_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(UnfitFile, match="a FIFO") as info:
        read_user_file(fifo)
    assert time.monotonic() - started < 1
    assert info.value.filename == str(fifo)


@pytest.mark.parametrize(
    ("path", "kind"), [("/dev/zero", "a character device"), (".", "a directory")]
)
def test_what_is_no_regular_file_is_refused(path: str, kind: str) -> None:
    with pytest.raises(UnfitFile, match=f"it is {kind}, not a regular file"):
        read_user_file(Path(path))


def test_a_missing_file_is_the_usual_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_user_file(tmp_path / "nope")
