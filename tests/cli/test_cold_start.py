"""What the commands a script runs most load and build before they answer: `acode session
list` reads the store and nothing more (in a pipe neither Typer nor Rich: its table is
the one Rich would draw), `acode resume --dry-run` runs no step and, read without the
parser, prints what the parser's would (into a pipe without Rich), and any other command
line builds only the command it names (Typer builds each registered command from its
signature at every start). How long they take is `make bench`'s (bench/coldstart.py);
what is held here is what it depends on, in a real process on a real workspace."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acode.cli import console
from acode.cli.console import console_width, plain_output, plain_table, print_lines
from acode.cli.views import session_table
from acode.security.redaction import redact
from tests.cli.conftest import Cli, OpenTerminal, plan_yaml

__all__: list[str] = []

# What `session list` into a pipe has no use for: the parser, the renderer, the remote,
# the journal that verifies a history, the key, the configuration (and YAML to read it),
# the resume service, the process table.
NOT_FOR_LISTING = (
    "typer",
    "rich",
    "yaml",
    "psycopg",
    "psutil",
    "acode.sync",
    "acode.domain.config",
    "acode.engine.journal",
    "acode.engine.catalog",
    "acode.security.signing",
    "acode.resume",
    "acode.cli.app",
    "acode.cli.sync_command",
)
LIMITS = (None, None, None, 24, None)  # AT STEP is cut beyond 24 characters
# What only running steps needs: a dry run runs none (and the process table serves only
# the preview of a rollback, of which this session has none).
NOT_FOR_A_DRY_RUN = (
    "psycopg",
    "psutil",
    "rich.prompt",
    "rich.live",
    "acode.cli.driver",
    "acode.cli.progress",
    "acode.cli.work_app",
    "acode.engine.session",
    "acode.engine.steps",
    "acode.system.git",
    "acode.system.process",
    "acode.system.model_client",
)
# What a dry run read without the parser has no use for either: the parser, the renderer
# (into a pipe), the prompts of an interactive resume, what only writing a progress file
# or taking a lock needs, and YAML where there is no configuration file to read.
NOT_FOR_A_PLAIN_DRY_RUN = (
    *NOT_FOR_A_DRY_RUN,
    "typer",
    "rich",
    "yaml",
    "acode.cli.app",
    "acode.resume.listing",
    "acode.system.orphans",
    "acode.engine.marks",
    "acode.domain.usage",
    "acode.sync",
)


def _probe(env: dict[str, str], *args: str, expect: int = 0) -> dict[str, list[str]]:
    """The modules loaded by ``acode ARGS`` (its output a pipe) run to its end (exit
    status ``expect``), and the commands its command line built, if it was parsed."""
    probe = (
        "import atexit, json, sys\n"
        "from acode.cli.entry import main\n"
        "def report():\n"
        "    cli = sys.modules.get('acode.cli.app')\n"
        "    built = {'modules': sorted(sys.modules)}\n"
        "    if cli is not None:\n"
        "        built['acode'] = [c.callback.__name__ for c in cli.app.registered_commands]\n"
        "        built['acode'] += [g.name for g in cli.app.registered_groups]\n"
        "        built['session'] = [c.name for c in cli.session_app.registered_commands]\n"
        "    print(json.dumps(built), file=sys.stderr)\n"
        "atexit.register(report)\n"
        f"sys.argv = ['acode', *{list(args)!r}]\n"
        "main()\n"
    )
    # Not measured by coverage, which imports modules of its own at start-up.
    env = {k: v for k, v in env.items() if k != "COVERAGE_PROCESS_CONFIG"}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == expect, done.stderr
    built: dict[str, list[str]] = json.loads(done.stderr.splitlines()[-1])
    return built


def _loaded(modules: list[str], unwanted: tuple[str, ...]) -> list[str]:
    return [m for m in modules if m in unwanted or m.startswith(tuple(u + "." for u in unwanted))]


def _waiting_session(acode: Cli) -> None:
    """A plan session stopped at its approval (no terminal to ask on): resumable."""
    acode.write("a.txt", "alpha\n")
    acode.write("plan.yml", plan_yaml("Cold", "{id: r, read: a.txt}", "{id: ok, approve: Go?}"))
    acode("run", "plan.yml", expect=20)


def test_session_list_reads_the_store_and_loads_nothing_more(acode: Cli) -> None:
    _waiting_session(acode)
    where = str(acode.workspace)
    for args in (["-w", where], [f"--workspace={where}", "--all"], ["--json", "-w", where]):
        built = _probe(dict(acode.env), "session", "list", *args)
        assert _loaded(built["modules"], NOT_FOR_LISTING) == [], args
        assert "acode.store.sqlite.store" in built["modules"]  # it did read the store
    # Which sessions are resumable the catalog says, with what it needs.
    built = _probe(dict(acode.env), "session", "list", "--resumable", "-w", where)
    assert _loaded(built["modules"], ("typer", "rich", "acode.cli.app", "acode.resume")) == []


def test_a_listing_read_without_the_parser_is_the_parsers() -> None:
    """What the entry point reads of a `session list` command line is what the parser
    would pass on (run for real in tests/cli/test_sessions.py); any other command line,
    and any it is not sure of, goes to the parser."""
    from acode.cli.entry import _listing

    where = Path("ws")
    assert _listing(["session", "list"]) == (None, False, False, False)
    assert _listing(["session", "list", "-w", "ws", "--json"]) == (where, False, False, True)
    assert _listing(["session", "list", "-wws", "--all"]) == (where, False, True, False)
    assert _listing(["session", "list", "--workspace=x", "--workspace", "ws"]) == (
        where,
        False,
        False,
        False,
    )
    assert _listing(["session", "list", "--resumable", "--resumable"]) == (
        None,
        True,
        False,
        False,
    )
    for parsers in (
        ["session", "show", "x"],
        ["session", "list", "--remote"],
        ["session", "list", "--help"],
        ["session", "list", "-w"],
        ["session", "list", "-w", ""],
        ["session", "list", "-w", "--json"],
        ["session", "list", "--json=1"],
        ["session", "list", "extra"],
        ["session", "list", "--"],
        ["--help", "session", "list"],
        ["status"],
    ):
        assert _listing(parsers) is None, parsers


def test_resume_dry_run_runs_no_step_and_builds_only_resume(acode: Cli) -> None:
    _waiting_session(acode)
    where = str(acode.workspace)
    # An option the entry point leaves to the parser: only `resume` is built.
    built = _probe(dict(acode.env), "resume", "--dry-run", "--mode", "autopilot", "-w", where)
    assert _loaded(built["modules"], NOT_FOR_A_DRY_RUN) == []
    assert "acode.resume.service" in built["modules"]  # it did look at the session
    assert built["acode"] == ["resume"]


def test_a_plain_dry_run_loads_neither_the_parser_nor_rich(acode: Cli) -> None:
    _waiting_session(acode)
    short = acode("session", "list", "--json").json()[0]["short_id"]
    where = str(acode.workspace)
    for args in (
        ["--dry-run", "-w", where],
        [short, "--dry-run", f"--workspace={where}"],
        ["--json", "--dry-run", "-w", where],
        ["--dry-run", "--verify", short, "-w", where],
    ):
        built = _probe(dict(acode.env), "resume", *args)
        assert "acode" not in built, args  # the parser was not loaded
        assert _loaded(built["modules"], NOT_FOR_A_PLAIN_DRY_RUN) == [], args
        assert "acode.resume.service" in built["modules"]


def test_a_dry_run_without_an_id_opens_the_store_once(acode: Cli) -> None:
    """It finds the most recent session and previews it in one opening of the database
    (it opened it twice: once to choose, once to preview); with an id, once too."""
    _waiting_session(acode)
    probe = (
        "import atexit, sqlite3, sys\n"
        "opened = []\n"
        "connect = sqlite3.connect\n"
        "def counted(*args, **kwargs):\n"
        "    opened.append(str(args[0]))\n"
        "    return connect(*args, **kwargs)\n"
        "sqlite3.connect = counted\n"
        "atexit.register(lambda: print(len(opened), file=sys.stderr))\n"
        "from acode.cli.entry import main\n"
        "sys.argv = ['acode', *sys.argv[1:]]\n"
        "main()\n"
    )
    short = acode("session", "list", "--json").json()[0]["short_id"]
    for args in (
        ["resume", "--dry-run"],
        ["resume", "--dry-run", "--json"],
        ["resume", short, "--dry-run"],
    ):
        done = subprocess.run(
            [sys.executable, "-c", probe, *args],
            env=acode.env,
            cwd=acode.workspace,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines()[-1] == "1", args


def _parsed(env: dict[str, str], cwd: Path, *args: str) -> tuple[int, str, str]:
    """``acode ARGS`` with the command line read by the parser, as if the entry point did
    not know it: exit status, standard output and error."""
    probe = (
        "import sys\n"
        "from acode.cli import entry\n"
        "entry._dry_run = lambda args: None\n"
        f"sys.argv = ['acode', *{list(args)!r}]\n"
        "entry.main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def _same_json(text: str) -> object:
    """A dry run's JSON without what the clock changes between two runs."""
    data = json.loads(text)
    data.pop("interrupted_seconds", None)
    data.get("environment", {}).pop("seconds", None)
    return data


def test_a_dry_run_read_without_the_parser_prints_what_the_parsers_does(acode: Cli) -> None:
    """The same command lines, read by the entry point and by the parser: the same
    output, errors and exit statuses, into a pipe (the entry point's plain text) and
    after a mistake."""
    _waiting_session(acode)
    short = acode("session", "list", "--json").json()[0]["short_id"]
    acode.write("done.yml", plan_yaml("Done", "{id: r, read: a.txt}"))
    finished = acode("run", "done.yml", "--json").json_lines()[0]["id"][:13]
    empty = acode.workspace / "empty"
    empty.mkdir()
    cases = [
        ["resume", "--dry-run"],
        ["resume", short, "--dry-run"],
        ["resume", "--dry-run", "--verify", "-w", str(acode.workspace)],
        ["resume", "--dry-run", "--json"],
        ["resume", finished, "--dry-run"],  # a terminal state: exit 15
        ["resume", "ffffffff", "--dry-run"],  # no such session: exit 14
        ["resume", "not-hex!", "--dry-run"],  # not an id: exit 2
        ["resume", "--dry-run", "-w", str(empty)],  # nothing recorded there: exit 14
    ]
    for args in cases:
        fast = acode(*args, expect=None)
        code, out, err = _parsed(acode.env, acode.workspace, *args)
        assert (fast.code, fast.err) == (code, err), args
        if "--json" in args:
            assert _same_json(fast.out) == _same_json(out), args
        else:
            assert fast.out == out, args
    assert "Would resume session" in acode("resume", "--dry-run").out


def test_a_dry_run_on_a_terminal_shows_what_it_prints_into_a_pipe(
    acode: Cli, terminal: OpenTerminal
) -> None:
    """On a terminal Rich prints the report; into a pipe the entry point writes it
    without Rich: the same lines."""
    _waiting_session(acode)
    piped = acode("resume", "--dry-run").out
    shown = terminal("resume", "--dry-run").finish(expect=0)
    assert shown.replace("\r\n", "\n") == piped
    assert piped.startswith("Would resume session ")


def test_a_dry_run_read_without_the_parser_is_the_parsers() -> None:
    """What the entry point reads of a `resume --dry-run` command line is what the
    parser would pass on; any other command line goes to the parser."""
    from acode.cli.entry import _dry_run

    where = Path("ws")
    assert _dry_run(["resume", "--dry-run"]) == (None, None, False, False)
    assert _dry_run(["resume", "01a2", "--dry-run", "-w", "ws"]) == (where, "01a2", False, False)
    assert _dry_run(["resume", "--json", "--verify", "--dry-run", "-wws", "01a2"]) == (
        where,
        "01a2",
        True,
        True,
    )
    assert _dry_run(["resume", "--dry-run", "--workspace=x", "--workspace", "ws"]) == (
        where,
        None,
        False,
        False,
    )
    for parsers in (
        ["resume"],  # no dry run
        ["resume", "01a2"],
        ["resume", "--dry-run", "--mode", "autopilot"],
        ["resume", "--dry-run", "--strategy", "retry"],
        ["resume", "--dry-run", "--force"],
        ["resume", "--dry-run", "--help"],
        ["resume", "--dry-run", "a", "b"],  # two ids: the parser's error
        ["resume", "--dry-run", "--"],
        ["resume", "--dry-run", ""],
        ["resume", "--dry-run", "-w"],
        ["resume", "--dry-run", "-w", "--json"],
        ["resume", "--dry-run=1"],
        ["--help", "resume", "--dry-run"],
        ["status", "--dry-run"],
    ):
        assert _dry_run(parsers) is None, parsers


def test_help_and_a_mistyped_command_build_every_command_they_name(
    cli_env: dict[str, str],
) -> None:
    """The list in a help, and the names close to a typo, are of all the commands."""
    everything = ["run", "resume", "status", "sync", "doctor", "approve", "session"]
    everything += ["task", "work", "wsession", "settings"]
    cases = (
        (["--help"], 0, everything),
        (["sesion", "list"], 2, everything),
        (["session", "--help"], 0, ["session"]),
        (["session", "lst"], 2, ["session"]),
    )
    for args, expect, top in cases:
        built = _probe(cli_env, *args, expect=expect)
        assert (built["acode"], len(built["session"])) == (top, 10), args


_CELL = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40) | st.text(
    max_size=8
)
_ROW = st.tuples(_CELL, _CELL, _CELL, _CELL, _CELL)


@settings(max_examples=400, deadline=None)
@given(rows=st.lists(_ROW, min_size=1, max_size=4), width=st.integers(0, 200))
def test_a_plain_session_table_is_the_one_rich_draws(
    rows: list[tuple[str, str, str, str, str]], width: int
) -> None:
    """Into a pipe, `session list` writes its table without loading Rich when Rich would
    draw it as it is; then it is Rich's table, character for character."""
    from rich.console import Console

    masked = [tuple(redact(cell) for cell in row) for row in rows]
    plain = plain_table(("ID", "STATE", "UPDATED", "AT STEP", "TITLE"), masked, LIMITS, width)
    if plain is None:
        return
    drawn = io.StringIO()
    console = Console(
        file=drawn, width=width, force_terminal=False, highlight=False, soft_wrap=True
    )
    console.print(session_table(rows))
    assert plain == drawn.getvalue()


def test_rich_draws_what_does_not_fit_or_is_not_plain_text() -> None:
    header = ("ID", "STATE", "UPDATED", "AT STEP", "TITLE")
    row = ("01a21a82-3fec", "EXECUTING", "2m ago", "read-999", "budget")
    assert plain_table(header, [row], LIMITS, 80) is not None
    assert plain_table(header, [row], LIMITS, 40) is None  # Rich folds or cuts
    assert plain_table(header, [(*row[:3], "s" * 25, row[4])], LIMITS, 80) is None  # "…"
    for odd in ("Café", "a\tb", "two\nlines", "\x1b[2J"):
        assert plain_table(header, [(*row[:4], odd)], LIMITS, 80) is None


_LINE = st.text(
    st.sampled_from(": \t\n\r\x1b\x07\x85\u2028\u200b✓é-") | st.characters(), max_size=30
)


@settings(max_examples=400, deadline=None)
@given(lines=st.lists(_LINE | st.sampled_from(["Fix :bug: now", "10:30:00", "a: b: c"])))
def test_plain_lines_are_the_lines_rich_prints(lines: list[str]) -> None:
    """Into a pipe, the lines of a report are written without loading Rich when Rich
    would print them as they are written (`print_lines`); either way, what Rich prints,
    character for character, each line masked on its own."""
    with redirect_stdout(io.StringIO()) as plain:
        print_lines(lines)
    with redirect_stdout(io.StringIO()) as drawn:
        for line in lines:
            console.out_console().print(line, markup=False)
    assert plain.getvalue() == drawn.getvalue()


def test_plain_lines_leave_rich_unloaded_and_mask_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused() -> None:
        raise AssertionError("Rich was asked to print plain lines into a pipe")

    secret = "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"
    with monkeypatch.context() as patched:
        patched.setattr(console, "out_console", refused)
        with redirect_stdout(io.StringIO()) as plain:
            print_lines(["Would resume session 01a2: budget", f"  Task: use {secret}", "✓ done"])
    assert secret not in plain.getvalue()
    assert plain.getvalue().startswith("Would resume session 01a2: budget\n  Task: use ")
    for odd in ("Fix :bug:", "a\tb", "two\nlines", "\x1b[2J"):
        assert re.search(console._NOT_AS_WRITTEN, odd)


def test_plain_output_and_width_are_what_rich_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether Rich writes standard output plainly, and how wide it takes the console to
    be, by Rich's own reading of the environment (standard output here is no terminal)."""
    from rich.console import Console

    for name in ("TTY_COMPATIBLE", "FORCE_COLOR", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    cases = [{}, {"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"}, {"TTY_COMPATIBLE": "1"}]
    cases += [{"TTY_COMPATIBLE": "2"}, {"FORCE_COLOR": ""}, {"FORCE_COLOR": "yes"}]
    cases += [{"COLUMNS": "33"}, {"COLUMNS": "0"}, {"COLUMNS": "wide"}, {"COLUMNS": "250"}]
    for env in cases:
        with monkeypatch.context() as patched:
            for name, value in env.items():
                patched.setenv(name, value)
            rich = Console(file=sys.stdout)
            assert (plain_output(), console_width()) == (not rich.is_terminal, rich.width), env
