"""Marked checkpoints from the library: `Session.checkpoint(label)` in a real program that
is killed and run again, the progress file's line, and the history still verifying."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import acode
from acode.domain.events import EventType
from acode.domain.marks import MAX_LABEL_LENGTH, Mark, check_label
from acode.engine.journal import verify_history
from acode.engine.marks import session_marks
from acode.engine.progress_file import SHOWN_MARKS, ProgressFile, iso_time
from acode.engine.session import journal_of
from acode.errors import UsageError
from acode.security.signing import load_signer
from acode.store.base import open_store
from acode.system.workspace import StatePaths

SECRET = "marks-tests"

# Marks a point after its first step, then runs a step that waits until `go` exists: the
# first run is killed there; the second run (a resume) calls the same code again.
PROGRAM = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import acode

    ws = Path(sys.argv[1])
    known = ws / "session-id"
    if known.exists():
        s = acode.resume_session(known.read_text(), workspace=ws)
    else:
        s = acode.open_session("Marked work", workspace=ws)
        known.write_text(s.id)
    with s:
        s.write("one", "a.txt", "1\\n")
        mark = s.checkpoint("after one")
        print(f"mark {mark.seq} {mark.label}", flush=True)
        s.run("wait", "while [ ! -e go ]; do sleep 0.05; done", idempotent=True)
        s.checkpoint("  all done  ")
    """
)


@pytest.fixture(autouse=True)
def signing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACODE_CHECKPOINT_SECRET", SECRET)


def _program(workspace: Path) -> subprocess.Popen[str]:
    script = workspace.parent / "marked_program.py"
    script.write_text(PROGRAM)
    env = {**os.environ, "ACODE_CHECKPOINT_SECRET": SECRET}
    return subprocess.Popen(
        [sys.executable, str(script), str(workspace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def test_a_program_killed_and_run_again_marks_each_label_once(workspace: Path) -> None:
    first = _program(workspace)
    assert first.stdout is not None
    line = first.stdout.readline()  # printed after the mark is committed
    os.killpg(first.pid, signal.SIGKILL)
    first.communicate(timeout=10)
    assert line.startswith("mark "), line
    assert line.endswith(" after one\n"), line
    first_seq = int(line.split()[1])

    (workspace / "go").touch()
    second = _program(workspace)
    out, err = second.communicate(timeout=60)

    assert second.returncode == 0, err
    assert out == f"mark {first_seq} after one\n"  # the recorded mark, not a new one
    store = open_store(StatePaths(workspace).db)
    try:
        (row,) = store.sessions()
        marks = session_marks(store, row)
        summary = verify_history(store, row, load_signer())
        checkpoints = {cp.seq for cp in store.checkpoints(row)}
    finally:
        store.close()
    assert [(m.label, m.seq) for m in marks] == [
        ("after one", first_seq),
        ("all done", marks[1].seq),
    ]
    assert summary.state is acode.SessionState.COMPLETED
    assert marks[1].seq in checkpoints  # a mark is a signed checkpoint of its own
    progress = (StatePaths(workspace).session_dir(row.id) / "progress.md").read_text()
    assert (
        f'- **Marked Checkpoints**: "after one" (event {first_seq}, '
        f'{iso_time(marks[0].ts_us)}), "all done" (event {marks[1].seq}, '
        f"{iso_time(marks[1].ts_us)})\n"
    ) in progress


def test_the_progress_file_names_the_newest_marks_and_counts_the_rest(workspace: Path) -> None:
    with acode.open_session("Many marks", workspace) as s:
        for i in range(SHOWN_MARKS + 3):
            s.step(f"s{i}", lambda ctx: None)
            s.checkpoint(f"point {i}")
        journal = journal_of(s)
        assert journal.summary is not None
        target = ProgressFile(StatePaths(workspace)).update(journal, final=True)
    assert target is not None
    (line,) = [x for x in target.read_text().splitlines() if "Marked Checkpoints" in x]
    assert line.startswith('- **Marked Checkpoints**: 3 earlier, then "point 3" (event ')
    assert line.count("(event ") == SHOWN_MARKS
    assert '"point 12"' in line


def test_a_closed_or_finished_session_takes_no_mark(workspace: Path) -> None:
    s = acode.open_session("Closed", workspace)
    s.step("a", lambda ctx: None)
    s.complete()
    with pytest.raises(UsageError, match="is COMPLETED"):
        s.checkpoint("late")
    s.close()
    with pytest.raises(UsageError, match="is closed"):
        s.checkpoint("later")


@pytest.mark.parametrize(
    ("label", "problem"),
    [
        ("", "cannot be empty"),
        ("   ", "cannot be empty"),
        ("two\nlines", "one line of printable text"),
        ("tab\there", "one line of printable text"),
        ("\x1b[31mred", "one line of printable text"),
        ("x" * (MAX_LABEL_LENGTH + 1), f"at most {MAX_LABEL_LENGTH} characters"),
    ],
)
def test_labels_are_one_short_printable_line(label: str, problem: str) -> None:
    with pytest.raises(UsageError, match=problem) as raised:
        check_label(label)
    assert raised.value.exit_code == 2
    assert raised.value.hint is not None
    assert "--label" in raised.value.hint


def test_a_label_keeps_its_text_but_not_surrounding_blanks() -> None:
    assert check_label("  tests green ") == "tests green"
    assert check_label("x" * MAX_LABEL_LENGTH) == "x" * MAX_LABEL_LENGTH
    assert check_label("vérifié ✓") == "vérifié ✓"


def test_a_mark_is_an_event_of_its_own_type(workspace: Path) -> None:
    with acode.open_session("Typed", workspace) as s:
        mark = s.checkpoint("start")
        events = journal_of(s).store.events_of_type(journal_of(s).row, EventType.CHECKPOINT_MARKED)
    assert [e.seq for e in events] == [mark.seq]
    assert Mark.from_event(events[0].seq, events[0].ts_us, events[0].payload) == mark
    assert mark.by  # the user name of the process
