"""Hostile input, given as a person (or a model, or a damaged disk) gives it: each is
refused with its ACODE code and exit status, before anything runs or is written; never a
hang, an exhausted memory, an "internal error", or a write over acode's own state.

Every test here failed on the code before the fix (see each docstring for how).
Commands run as real `acode` processes with at most 1 GiB of address space, so that a
reader of /dev/zero dies of it quickly instead of taking the machine's memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sqlite3
import subprocess
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from acode.agent.loop import run_agent
from acode.domain.config import AcodeConfig, ModelSettings
from acode.domain.states import SessionState
from acode.engine.lifecycle import start_session
from tests.agent.scenario import TASK, rules, start_repository
from tests.cli.conftest import ACODE, Background, Cli, Result, plan_yaml
from tests.support.drip_server import MODEL as DRIP_MODEL
from tests.support.drip_server import DripServer
from tests.support.fake_openai import FakeOpenAI

MEMORY_LIMIT = 1 << 30


@pytest.fixture
def acode(workspace: Path, cli_env: dict[str, str], background: Background) -> Cli:
    return Cli(workspace, cli_env, background)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(acode: Cli, *args: str | bytes, expect: int, timeout: float = 20) -> Result:
    """`acode ARGS` with bounded memory and time; arguments may be bytes (not UTF-8)."""
    done = subprocess.run(
        [ACODE, *args],
        cwd=acode.workspace,
        env=acode.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        preexec_fn=_limit_memory,
        check=False,
    )
    shown = tuple(a if isinstance(a, str) else repr(a) for a in args)
    out, err = (stream.decode(errors="replace") for stream in (done.stdout, done.stderr))
    result = Result(shown, done.returncode, out, err)
    for stream in (result.out, result.err):
        assert "Traceback" not in stream, result.describe()
        assert "internal error" not in stream, result.describe()
    assert result.code == expect, result.describe()
    return result


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- files a person names: plans, the settings, task files ------------------------------


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _huge(path: Path) -> None:
    path.write_text("# padding\n" * 110_000, encoding="utf-8")  # 1.1 MB of comments


NOT_REGULAR = [
    pytest.param(_fifo, "it is a FIFO (named pipe), not a regular file", id="fifo"),
    pytest.param(_zero, "it is a character device, not a regular file", id="dev-zero"),
    pytest.param(_huge, "it is larger than 1 MiB", id="over-1-MiB"),
]


@pytest.mark.parametrize(("make", "problem"), NOT_REGULAR)
def test_a_plan_that_is_no_regular_file_is_refused(
    acode: Cli, make: Callable[[Path], None], problem: str
) -> None:
    """Before: a FIFO blocked `acode run` for ever; /dev/zero read until memory ran out."""
    make(acode.workspace / "plan.yml")
    refused = run(acode, "run", "plan.yml", expect=2)
    assert "ACODE-PLAN-001" in refused.err
    assert f"plan.yml is not a plan file: {problem}" in refused.flat_err
    assert not (acode.workspace / ".agent").exists()


@pytest.mark.parametrize(("make", "problem"), NOT_REGULAR)
def test_a_config_file_that_is_no_regular_file_is_refused(
    acode: Cli, make: Callable[[Path], None], problem: str
) -> None:
    """Before: `acode status` waited for ever on a FIFO and read /dev/zero to the end."""
    (acode.workspace / ".agent").mkdir()
    make(acode.workspace / ".agent/config.yml")
    refused = run(acode, "status", expect=2)
    assert "ACODE-CONFIG-001" in refused.err
    assert f".agent/config.yml: cannot read the configuration: {problem}" in refused.flat_err


@pytest.mark.parametrize(("make", "problem"), NOT_REGULAR)
def test_a_task_file_that_is_no_regular_file_is_refused(
    acode: Cli, make: Callable[[Path], None], problem: str
) -> None:
    """Before: `acode task list` blocked on a FIFO and read /dev/zero to the end."""
    acode("task", "add", "A real task")
    make(acode.workspace / "docs/acode/tasks/task-002.json")
    refused = run(acode, "task", "list", expect=2)
    assert f"docs/acode/tasks/task-002.json: not a readable JSON task: {problem}" in (
        refused.flat_err
    )


BILLION_LAUGHS = "".join(
    f"l{n}: &l{n} [{', '.join([f'*l{n - 1}' if n else 'lol'] * 9)}]\n" for n in range(9)
)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("model: " + "[" * 600 + "]" * 600 + "\n", "nested too deeply"),
        (BILLION_LAUGHS, "unknown"),
    ],
    ids=["nested-600-deep", "billion-laughs"],
)
def test_a_config_file_built_to_exhaust_the_parser_is_refused(
    acode: Cli, text: str, problem: str
) -> None:
    """Before: nesting gave an internal error (RecursionError); nine lists of nine aliases
    made the duplicate-key check walk 9^9 paths (it never ended)."""
    acode.write(".agent/config.yml", text)
    refused = run(acode, "status", expect=2)
    assert "ACODE-CONFIG-001" in refused.err
    assert problem in refused.flat_err


def test_a_plan_nested_deeper_than_python_recurses_is_refused(acode: Cli) -> None:
    """Before: 990 levels (libyaml stops at 1,000) gave an internal error (RecursionError)."""
    acode.write("plan.yml", "title: t\ntasks: " + "[" * 990 + "]" * 990 + "\n")
    refused = run(acode, "run", "plan.yml", expect=2)
    assert "ACODE-PLAN-001" in refused.err
    assert "plan.yml: lists or mappings nested too deeply" in refused.flat_err


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[" * 30_000 + "]" * 30_000, "nested more than 100 levels deep"),
        (
            '{"id": "task-002", "title": "x", "status": ["done"]}',
            "status: expected one of todo, in_progress, done, got a JSON list",
        ),
        ('{"id": "task-002", "title": "a\\ud800b"}', "half a UTF-16 surrogate pair"),
        ('{"id": "task-002", "title": "a\\u001b[2Jb"}', "contains the control character U+001B"),
    ],
    ids=["nested-30000-deep", "status-a-list", "lone-surrogate", "terminal-escape"],
)
def test_a_task_file_acode_cannot_keep_is_refused_by_name(
    acode: Cli, content: str, problem: str
) -> None:
    """Before: nesting and a list as status were internal errors (RecursionError,
    TypeError); a lone surrogate failed when the task was written back; an escape
    sequence was printed to the terminal by `task list`."""
    acode("task", "add", "A real task")
    acode.write("docs/acode/tasks/task-002.json", content)
    refused = run(acode, "task", "list", expect=2)
    assert "docs/acode/tasks/task-002.json:" in refused.flat_err
    assert problem in refused.flat_err


def _not_utf8(path: Path) -> None:
    path.write_bytes(b"\xff\xfe")


@pytest.mark.parametrize("replace", [_fifo, _not_utf8], ids=["fifo", "not-utf8"])
def test_a_file_acode_writes_that_a_person_replaced_is_written_again(
    acode: Cli, replace: Callable[[Path], None]
) -> None:
    """Before: a FIFO in place of .agent/state/.gitignore, or of a work-session document,
    blocked every command that opens the workspace or lists work sessions for ever; bytes
    that are not UTF-8 in the document were an internal error (UnicodeDecodeError)."""
    acode("settings", "set", "ai_stacking_mode", "handsoff")
    acode("task", "add", "T")
    cookie = str(acode("work", "task", "task-001", "--json").json()["cookie"])
    ignore = acode.workspace / ".agent/state/.gitignore"
    document = acode.workspace / f"docs/acode/work_sessions/{cookie}.json"
    for path in (ignore, document):
        path.unlink()
        replace(path)
    run(acode, "work", "list", expect=0)
    assert ignore.read_bytes() == b"*\n"
    assert json.loads(document.read_text(encoding="utf-8"))["id"] == cookie


# -- paths and commands in plans ---------------------------------------------------------

BAD_STEPS = [
    pytest.param(r'{id: bad, write: "a\0b", content: x}', "contains a NUL byte", id="nul"),
    pytest.param(
        r'{id: bad, write: "a\eb.txt", content: x}',
        "contains the control character U+001B",
        id="escape",
    ),
    pytest.param(
        r'{id: bad, write: "invoice\u202Etxt.exe", content: x}',
        "contains U+202E, a bidirectional control",
        id="bidi-override",
    ),
    pytest.param(
        r'{id: bad, read: "\u2066a.txt"}',
        "contains U+2066, a bidirectional control",
        id="bidi-isolate",
    ),
    pytest.param(
        "{id: bad, edit: " + "n" * 300 + ", old: a, new: b}",
        "has a name of 300 bytes; file systems take at most 255",
        id="name-300-bytes",
    ),
    pytest.param(
        "{id: bad, write: " + "a" * 5000 + ", content: x}",
        "is 5000 bytes long; file systems take at most 4095",
        id="path-5000-chars",
    ),
    pytest.param(
        "{id: bad, write: " + "d/" * 2100 + "f, content: x}",
        "is 4201 bytes long; file systems take at most 4095",
        id="path-over-PATH_MAX",
    ),
    pytest.param(
        r'{id: bad, run: "true", paths: ["out\0"]}', "contains a NUL byte", id="run-paths-nul"
    ),
    pytest.param(r'{id: bad, run: "echo \0"}', "the command contains a NUL byte", id="command-nul"),
    pytest.param(
        r'{id: bad, commit: "fix\0"}', "the message contains a NUL byte", id="commit-message-nul"
    ),
]


@pytest.mark.parametrize(("step", "problem"), BAD_STEPS)
def test_a_path_or_command_no_system_takes_is_refused_before_any_step_runs(
    acode: Cli, step: str, problem: str
) -> None:
    """Before: a NUL, a long name or a long path failed mid-run (the first step done, the
    session FAILED); control and bidirectional characters were written as they are, a
    file name that shows another name than it has."""
    acode.write("plan.yml", plan_yaml("Hostile", "{id: first, write: first.txt, content: x}", step))
    refused = run(acode, "run", "plan.yml", expect=2)
    assert "ACODE-PLAN-001" in refused.err
    assert "plan.yml:7: step 'bad': " in refused.flat_err
    assert problem in refused.flat_err
    assert not (acode.workspace / "first.txt").exists()
    assert not (acode.workspace / ".agent").exists()


# -- the model's tool calls --------------------------------------------------------------

BAD_TOOL_PATHS = {
    "a\0b.txt": "contains a NUL byte",
    "n" * 300: "has a name of 300 bytes",
    "d/" * 2100 + "f": "is 4201 bytes long",
    "evil\u202etxt.py": "contains U+202E, a bidirectional control",
    "a\x1b[2Jb": "contains the control character U+001B",
    "a\ud800b": "is not valid UTF-8 text",
}


def test_a_path_from_the_model_no_system_takes_is_an_error_result_never_a_crash(
    workspace: Path,
) -> None:
    """Before: a lone surrogate crashed the run (UnicodeEncodeError); control and
    bidirectional characters were written as they are; names too long reached the file
    system, to come back as "raised OSError: [Errno 36]"."""
    start_repository(workspace)
    calls = [
        {"id": f"c{n}", "name": tool, "arguments": {"path": path, **extra}}
        for n, path in enumerate(BAD_TOOL_PATHS)
        for tool, extra in (
            ("write_file", {"content": "x"}),
            ("read_file", {}),
            ("edit_file", {"old": "a", "new": "b"}),
        )
    ]
    with FakeOpenAI() as fake:
        fake.converse(
            [
                rules()[0],
                {"match": "Now do task t1:", "replies": [{"tool_calls": calls}, "done"]},
                {"match": "Now do task t2:", "replies": ["nothing to do"]},
            ]
        )
        config = AcodeConfig(model=ModelSettings(base_url=fake.base_url, name="fake-model"))
        before = [*(p.name for p in workspace.iterdir()), ".agent"]
        with start_session("agent", workspace, config, agent_task=TASK) as session:
            assert run_agent(session, TASK) is SessionState.COMPLETED
        answered = [m for m in fake.chat_requests[-2]["body"]["messages"] if m["role"] == "tool"]
    assert sorted(p.name for p in workspace.iterdir()) == sorted(before)  # nothing written
    assert len(answered) == len(calls)
    problems = [problem for problem in BAD_TOOL_PATHS.values() for _ in range(3)]
    for answer, problem in zip(answered, problems, strict=True):
        assert answer["content"].startswith("error: path "), answer
        assert problem in answer["content"], answer


# -- a model server that never finishes ---------------------------------------------------


def test_a_model_server_that_drips_its_answers_pauses_the_run_at_the_deadline(
    acode: Cli,
) -> None:
    """Before: each byte came within the socket time-out, so `acode run` waited as long as
    the server dripped (some 35 s an answer here, three plan attempts), and `acode resume`
    the same again."""
    start_repository(acode.workspace)
    # The list of models comes whole: one that drips fails the availability check
    # (tests/system/test_model_client.py), and the chat request is never sent.
    with DripServer(interval=0.05, models_at_once=True) as server:
        acode.write(
            ".agent/config.yml",
            f"model:\n  base_url: {server.base_url}\n  name: {DRIP_MODEL}\n"
            "  timeout_seconds: 2\n  retries: 0\nresume:\n  validation_timeout_seconds: 1\n",
        )
        started = time.monotonic()
        paused = run(acode, "run", TASK, expect=1)
        took = time.monotonic() - started
        assert "no complete answer from the model server" in paused.flat_err
        assert "within 2 s (model.timeout_seconds)" in paused.flat_err
        assert acode.only_session()["state"] == "PAUSED"
        started = time.monotonic()
        run(acode, "resume", expect=1)
        took_again = time.monotonic() - started
    assert took < 10, f"the run took {took:.1f} s"  # 1 s for the check, 2 s for the answer
    assert took_again < 10, f"the resume took {took_again:.1f} s"
    # The availability check before the run, and the resume's (its preview's too), each
    # before the one request sent.
    models, chat = "GET /v1/models", "POST /v1/chat/completions"
    assert server.requests in ([models, chat, models, chat], [models, chat, models, models, chat])


# -- session export ----------------------------------------------------------------------


@pytest.fixture
def recorded(acode: Cli) -> str:
    acode.write("plan.yml", plan_yaml("Recorded", "{id: w, write: a.txt, content: x}"))
    acode("run", "plan.yml")
    return str(acode.only_session()["id"])


@pytest.mark.parametrize(
    "target", [".agent/state/acode.db", ".agent/state/locks/x.lock", "state-link/acode.db"]
)
def test_an_export_is_never_written_into_acodes_state(
    acode: Cli, recorded: str, target: str
) -> None:
    """Before: `-o .agent/state/acode.db` replaced the database by the export."""
    (acode.workspace / "state-link").symlink_to(acode.workspace / ".agent/state")
    database = acode.workspace / ".agent/state/acode.db"
    before = _digest(database)
    refused = run(acode, "session", "export", recorded, "-o", target, "--force", expect=2)
    assert "it is inside acode's state directory" in refused.flat_err
    assert _digest(database) == before
    assert acode.only_session()["id"] == recorded


def test_an_export_replaces_an_existing_file_only_with_force(acode: Cli, recorded: str) -> None:
    """Before: any existing file was replaced without a word."""
    kept = acode.write("notes.md", "my own notes\n")
    refused = run(acode, "session", "export", recorded, "-o", "notes.md", expect=2)
    assert "--output notes.md: the file exists" in refused.flat_err
    assert "--force" in refused.flat_err
    assert kept.read_text() == "my own notes\n"
    run(acode, "session", "export", recorded, "-o", "notes.md", "--force", expect=0)
    assert "Recorded" in kept.read_text()


@pytest.mark.parametrize(
    ("target", "problem"),
    [(".", "it is a directory"), ("x" * 300, "File name too long")],
    ids=["a-directory", "name-too-long"],
)
def test_an_export_to_a_path_that_cannot_be_a_file_is_a_usage_error(
    acode: Cli, recorded: str, target: str, problem: str
) -> None:
    """Before: both were internal errors (IsADirectoryError, OSError ENAMETOOLONG)."""
    refused = run(acode, "session", "export", recorded, "-o", target, expect=2)
    assert "ACODE-USAGE-001" in refused.err
    assert problem in refused.flat_err


# -- a damaged database ------------------------------------------------------------------


@pytest.fixture
def damaged(acode: Cli, recorded: str) -> Path:
    """The database of a workspace with one recorded session, its WAL checkpointed."""
    database = acode.workspace / ".agent/state/acode.db"
    for extra in ("-wal", "-shm"):
        assert not database.with_name(database.name + extra).exists()
    return database


@pytest.mark.parametrize(
    "command",
    [("session", "list"), ("status",), ("run", "plan.yml"), ("resume",)],
    ids=["session-list", "status", "run", "resume"],
)
def test_an_empty_database_beside_recorded_sessions_is_damage_not_a_fresh_start(
    acode: Cli, damaged: Path, command: tuple[str, ...]
) -> None:
    """Before: a truncated acode.db read as "no sessions here yet", and the command wrote
    a fresh, empty database over it."""
    damaged.write_bytes(b"")
    refused = run(acode, *command, expect=1)
    assert "ACODE-DB-003" in refused.err
    assert "is damaged: it is empty (0 bytes)" in refused.flat_err
    assert "1 session folder" in refused.flat_err
    assert "hint:" in refused.err
    assert damaged.stat().st_size == 0  # nothing written over it


def _garbage(database: Path) -> str:
    database.write_bytes(os.urandom(8192))
    return "SQLite says: file is not a database"


def _truncated(database: Path) -> str:
    with database.open("r+b") as handle:
        handle.truncate(database.stat().st_size // 2)
    return "SQLite says: database disk image is malformed"


@pytest.mark.parametrize("damage", [_garbage, _truncated], ids=["garbage", "truncated"])
def test_a_database_overwritten_or_cut_short_is_reported_as_damaged(
    acode: Cli, damaged: Path, damage: Callable[[Path], str]
) -> None:
    """Before: ACODE-DB-001, "check that the file is readable and writable and the disk
    is not full", which sends a person looking for the wrong cause."""
    problem = damage(damaged)
    before = _digest(damaged)
    refused = run(acode, "session", "list", expect=1)
    assert "ACODE-DB-003" in refused.err
    assert problem in refused.flat_err
    assert "restore it from a backup" in refused.flat_err
    assert _digest(damaged) == before


def test_a_corrupt_page_met_by_a_query_is_reported_as_damage(acode: Cli, damaged: Path) -> None:
    """Before: `acode status` met the damaged page of the event log in a query: an internal
    error ("this is a bug in acode; your session is safe")."""
    with closing(sqlite3.connect(damaged)) as db:
        (page,) = db.execute("SELECT max(pageno) FROM dbstat WHERE name = 'events'").fetchone()
        (size,) = db.execute("PRAGMA page_size").fetchone()
    with damaged.open("r+b") as handle:
        handle.seek((page - 1) * size)
        handle.write(bytes(size))
    refused = run(acode, "status", expect=1)
    assert "ACODE-DB-003" in refused.err
    assert "database disk image is malformed" in refused.flat_err


# -- breadcrumbs and arguments -----------------------------------------------------------


@pytest.fixture
def cookie(acode: Cli) -> str:
    acode("settings", "set", "ai_stacking_mode", "handsoff")
    acode("task", "add", "T")
    return str(acode("work", "task", "task-001", "--json").json()["cookie"])


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ('{"message": "m", "data": ' + "[" * 30_000 + "]" * 30_000 + "}", "at most 16000"),
        ('{"message": "m", "data": ' + "[" * 5_000 + "]" * 5_000 + "}", "nested more than"),
        ('{"message": "m", "data": NaN}', "NaN is not a JSON number"),
        ('{"message": "m", "data": Infinity}', "Infinity is not a JSON number"),
        ('{"message": "m", "data": 1e400}', "the number 1e400 is out of range"),
        ('{"message": "a\\ud800b"}', "half a UTF-16 surrogate pair"),
        ('{"message": "m", "files": ["a\\u0000b"]}', "contains a NUL byte"),
        ('{"message": "a\\u202eb"}', "must be printable text"),
        ("plain text \u202e reversed", "a bidirectional control"),
    ],
    ids=[
        "30000-deep",
        "5000-deep",
        "nan",
        "infinity",
        "1e400",
        "surrogate",
        "nul-file",
        "bidi",
        "bidi-text",
    ],
)
def test_a_breadcrumb_acode_cannot_keep_is_a_contract_error(
    acode: Cli, cookie: str, message: str, problem: str
) -> None:
    """Before: nesting, NaN, infinities and surrogates were internal errors (whose text
    said a session was safe where none was running); NUL paths and bidirectional
    controls were written into the committed work-session file."""
    document = acode.workspace / f"docs/acode/work_sessions/{cookie}.json"
    before = _digest(document)
    refused = run(
        acode, "wsession", "breadcrumb", "add", "--cookie", cookie, "--message", message, expect=2
    )
    assert "ACODE-WORK-002" in refused.err
    assert problem in refused.flat_err
    assert "nothing was written" in refused.flat_err
    assert _digest(document) == before


@pytest.mark.parametrize(
    "args",
    [
        (b"task", b"add", b"caf\xe9"),
        (b"run", b"fix caf\xe9 bug"),
        (b"wsession", b"breadcrumb", b"add", b"--cookie", b"C", b"--message", b"\xff"),
    ],
    ids=["task-title", "agent-task", "breadcrumb"],
)
def test_an_argument_that_is_not_utf8_is_a_usage_error(acode: Cli, args: tuple[bytes, ...]) -> None:
    """Before: Latin-1 bytes in a task title were an internal error (UnicodeEncodeError)
    when the task was written."""
    refused = run(acode, *args, expect=2)
    assert "ACODE-USAGE-001" in refused.err
    assert "is not UTF-8 text" in refused.flat_err


def test_a_model_url_python_cannot_parse_is_a_config_error(acode: Cli) -> None:
    """Before: `http://[::1` (an unclosed bracket) was an internal error (ValueError)."""
    acode.write(".agent/config.yml", 'model:\n  base_url: "http://[::1/v1"\n')
    refused = run(acode, "run", "Add a test", expect=2)
    assert "ACODE-CONFIG-001" in refused.err
    assert "model.base_url: expected an http:// or https:// URL" in refused.flat_err
