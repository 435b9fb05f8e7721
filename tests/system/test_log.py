"""The JSON log rotates by size, and two processes rotating it at once lose no line."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

from acode.domain.config import LogSettings
from acode.system.log import LOG_NAME, log_event, set_log_limits
from acode.system.workspace import StatePaths

# A process of the workspace that logs `count` lines tagged `writer`, then exits.
_WRITER = """
import sys
from pathlib import Path
from acode.domain.config import LogSettings
from acode.system.log import log_event, set_log_limits
from acode.system.workspace import StatePaths

paths = StatePaths(Path(sys.argv[1]))
set_log_limits(paths, LogSettings(max_bytes=int(sys.argv[4]), keep=int(sys.argv[5])))
for n in range(int(sys.argv[3])):
    log_event(paths, "line", writer=sys.argv[2], n=n, pad="x" * (n % 97))
"""


def _files(paths: StatePaths) -> list[Path]:
    return sorted(paths.logs.glob(f"{LOG_NAME}*"))


def _records(paths: StatePaths) -> list[dict[str, object]]:
    records = []
    for path in _files(paths):
        data = path.read_bytes()
        assert data.endswith(b"\n")
        records += [json.loads(line) for line in data.splitlines()]  # never a torn line
    return records


def test_the_log_rotates_by_size_keeping_a_bounded_number_of_files(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path)
    set_log_limits(paths, LogSettings(max_bytes=1000, keep=3))
    for n in range(500):
        log_event(paths, "line", n=n)

    names = [path.name for path in _files(paths)]
    assert names == [LOG_NAME, f"{LOG_NAME}.1", f"{LOG_NAME}.2", f"{LOG_NAME}.3"]
    for path in _files(paths):
        assert path.stat().st_size <= 1000
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # The newest lines, in order from the oldest file kept to the current one.
    kept = []
    for name in reversed(names):
        kept += [json.loads(line)["n"] for line in (paths.logs / name).read_text().splitlines()]
    assert kept == list(range(500 - len(kept), 500))


def test_a_line_longer_than_the_limit_is_written_whole(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path)
    set_log_limits(paths, LogSettings(max_bytes=100, keep=2))
    log_event(paths, "first")
    log_event(paths, "long", text="y" * 500)
    log_event(paths, "after")

    # acode.jsonl, .1, .2: the newest first, each line whole in a file of its own.
    assert [r["event"] for r in _records(paths)] == ["after", "long", "first"]


def test_two_processes_rotating_at_once_lose_no_line(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path)
    count = 250  # each rotation renames every file before it: the cost grows as its square
    # Enough files that none is dropped: every line of both writers must be there.
    limits = ["2000", "100000"]
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), name, str(count), *limits])
        for name in ("a", "b")
    ]
    for writer in writers:
        assert writer.wait(timeout=300) == 0

    records = _records(paths)
    assert len(_files(paths)) > 20  # they did rotate, many times, while both were writing
    for name in ("a", "b"):
        numbers = sorted(int(str(r["n"])) for r in records if r["writer"] == name)
        assert numbers == list(range(count))  # none lost, none written twice


def test_two_processes_rotating_a_short_log_keep_only_whole_lines(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path)
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), name, "1500", "2000", "2"])
        for name in ("a", "b")
    ]
    for writer in writers:
        assert writer.wait(timeout=300) == 0

    assert [path.name for path in _files(paths)] == [LOG_NAME, f"{LOG_NAME}.1", f"{LOG_NAME}.2"]
    records = _records(paths)  # old files went, by design; every line kept parses
    for name in ("a", "b"):  # and none is there twice
        numbers = [int(str(r["n"])) for r in records if r["writer"] == name]
        assert len(numbers) == len(set(numbers))


def test_a_rotation_that_cannot_rename_keeps_the_line(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path)
    set_log_limits(paths, LogSettings(max_bytes=100, keep=1))
    log_event(paths, "first", text="y" * 80)
    (paths.logs / f"{LOG_NAME}.1").mkdir()
    (paths.logs / f"{LOG_NAME}.1" / "x").write_bytes(b"")  # a folder a rename cannot replace
    log_event(paths, "second", text="y" * 80)

    lines = (paths.logs / LOG_NAME).read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["first", "second"]
