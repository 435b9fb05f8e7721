"""Threat 5 (TOCTOU): a directory of the workspace swapped for a symlink to an outside
directory, over and over, while a session writes, edits and reads files in it.

A real thread exchanges the directory and the symlink atomically (renameat2 with
RENAME_EXCHANGE, so that the name always exists), as fast as it can, while the session
runs its steps. Whatever instant a swap lands at, nothing may appear or change outside the
workspace and no read may return what is outside: each step either works on the real
directory or is refused. ``ACODE_RACE_ITERATIONS`` (default 300) sets how many rounds of
write, edit and read the session runs; set it to thousands for a longer hunt.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

import acode
from acode.errors import StepFailedError, StorageError
from tests.cli.conftest import Background, Cli

OUTSIDE_MARK = "OUTSIDE"
# Read at import: the autouse fixture clears every ACODE_* variable before a test runs.
ITERATIONS = int(os.environ.get("ACODE_RACE_ITERATIONS", "300"))
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchanger() -> Callable[[Path, Path], None]:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        pytest.skip("this C library has no renameat2")

    def exchange(a: Path, b: Path) -> None:
        if renameat2(_AT_FDCWD, bytes(a), _AT_FDCWD, bytes(b), _RENAME_EXCHANGE) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(a))

    return exchange


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes() if path.is_file() else b"<dir>"
        for path in sorted(root.rglob("*"))
    }


@pytest.fixture
def swapping(tmp_path: Path) -> Iterator[tuple[Path, Path, Callable[[], int]]]:
    """(workspace, outside, stop): ``workspace/d`` keeps turning into a symlink to
    ``outside`` and back until ``stop()``, which puts the real directory back and
    returns how many swaps there were."""
    exchange = _exchanger()
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    (workspace / "d").mkdir(parents=True)
    outside.mkdir()
    for name in ("r.txt", "e.txt", "f0.txt"):
        (outside / name).write_text(f"{OUTSIDE_MARK} {name} <<\n")
    (workspace / "d" / "r.txt").write_text("inside r\n")
    (workspace / "d" / "e.txt").write_text("inside e <<\n")
    link = workspace / "d-link"
    link.symlink_to(outside)
    try:
        exchange(workspace / "d", link)
        exchange(workspace / "d", link)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOSYS):
            pytest.skip(f"this file system cannot exchange names atomically: {exc}")
        raise
    stop = threading.Event()
    swaps = [0]

    def swap() -> None:
        while not stop.is_set():
            exchange(workspace / "d", link)
            swaps[0] += 1

    def stop_swapping() -> int:
        stop.set()
        thread.join(timeout=10)
        if (workspace / "d").is_symlink():
            exchange(workspace / "d", link)
        return swaps[0]

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    try:
        yield workspace, outside, stop_swapping
    finally:
        stop_swapping()


def test_a_directory_swapped_for_an_outside_symlink_never_lets_a_step_out(
    swapping: tuple[Path, Path, Callable[[], int]], capsys: pytest.CaptureFixture[str]
) -> None:
    workspace, outside, stop_swapping = swapping
    before = _tree(outside)
    (workspace / ".agent").mkdir()
    (workspace / ".agent" / "config.yml").write_text("durability: normal\n")
    read: list[str] = []
    refused = 0
    with acode.open_session("race", workspace=workspace) as session:
        for i in range(ITERATIONS):
            for attempt in (
                partial(session.write, f"w{i}", f"d/f{i % 3}.txt", f"inside {i} <<\n"),
                partial(session.edit, f"e{i}", "d/e.txt", "<<", "<<."),
                partial(session.read, f"r{i}", "d/r.txt"),
            ):
                try:
                    result = attempt()
                except StepFailedError:
                    refused += 1  # the path led outside at that instant: refused
                    continue
                if isinstance(result, str):
                    read.append(result)
    swaps = stop_swapping()
    with capsys.disabled():
        print(f"\n[race] {3 * ITERATIONS} steps, {refused} refused, {swaps} swaps")
    assert swaps > 0

    assert _tree(outside) == before, "a step wrote outside the workspace"
    leaked = [text for text in read if OUTSIDE_MARK in text]
    assert not leaked, f"{len(leaked)} reads returned a file outside the workspace"
    inside = _tree(workspace / "d")
    assert not [name for name, data in inside.items() if OUTSIDE_MARK.encode() in data]
    assert read, f"every read was refused ({refused} refusals)"


def test_a_staging_directory_linked_outside_gets_nothing(tmp_path: Path) -> None:
    # acode stages each write in .agent/state/tmp/<session>: a link put there must not
    # make it create its directory and temporary files outside.
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    (workspace / ".agent" / "state").mkdir(parents=True)
    outside.mkdir()
    (workspace / ".agent" / "state" / "tmp").symlink_to(outside)
    with acode.open_session("staging", workspace=workspace) as session:
        with pytest.raises(StorageError, match="is a symbolic link") as refused:
            session.write("w", "f.txt", "data")
    assert list(outside.iterdir()) == []
    assert not (workspace / "f.txt").exists()
    assert f"mv {workspace / '.agent' / 'state' / 'tmp'}" in (refused.value.hint or "")


def test_task_files_are_not_written_through_a_link_out(
    workspace: Path, cli_env: dict[str, str], background: Background, tmp_path: Path
) -> None:
    # docs/acode/tasks is meant to be committed: a link put there must not have acode
    # write its task files wherever it points.
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "docs" / "acode").mkdir(parents=True)
    (workspace / "docs" / "acode" / "tasks").symlink_to(outside)
    acode = Cli(workspace, cli_env, background)

    result = acode("task", "add", "Sneaky", expect=None)

    assert result.code != 0
    assert "outside the workspace" in result.flat_err
    assert list(outside.iterdir()) == []
