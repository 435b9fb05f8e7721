"""What the commands a script runs most load and build before they answer: `acode session
list` reads the store and nothing more, `acode resume --dry-run` runs no step, and a
command line builds only the command it names (Typer builds each registered command from
its signature at every start). How long they take is `make bench`'s (bench/coldstart.py);
what is held here is what it depends on, in a real process on a real workspace."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.cli.conftest import Cli, plan_yaml

__all__: list[str] = []

# What `session list` has no use for: the remote, the journal that verifies a history,
# the key, the configuration (and YAML to read it), the resume service, the work commands,
# Rich's emoji names (its table reads no markup).
NOT_FOR_LISTING = (
    "yaml",
    "psycopg",
    "acode.sync",
    "acode.domain.config",
    "acode.runtime.journal",
    "acode.runtime.catalog",
    "acode.security.signing",
    "acode.resume",
    "acode.cli.sync_command",
    "acode.cli.work_app",
    "rich._emoji_codes",
)
# What only running steps needs: a dry run runs none.
NOT_FOR_A_DRY_RUN = (
    "psycopg",
    "rich.prompt",
    "rich.live",
    "acode.cli.driver",
    "acode.cli.progress",
    "acode.cli.work_app",
    "acode.runtime.session",
    "acode.runtime.steps",
    "acode.runtime.git",
    "acode.runtime.process",
    "acode.runtime.model_client",
)


def _probe(env: dict[str, str], *args: str, expect: int = 0) -> dict[str, list[str]]:
    """The modules loaded by ``acode ARGS`` run to its end (exit status ``expect``), and
    the commands its command line built."""
    probe = (
        "import atexit, json, sys\n"
        "from acode.cli import app as cli\n"
        "def report():\n"
        "    built = {\n"
        "        'acode': [c.callback.__name__ for c in cli.app.registered_commands]\n"
        "        + [g.name for g in cli.app.registered_groups],\n"
        "        'session': [c.name for c in cli.session_app.registered_commands],\n"
        "        'modules': sorted(sys.modules),\n"
        "    }\n"
        "    print(json.dumps(built), file=sys.stderr)\n"
        "atexit.register(report)\n"
        f"sys.argv = ['acode', *{list(args)!r}]\n"
        "cli.main()\n"
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
    built = _probe(dict(acode.env), "session", "list", "-w", str(acode.workspace))
    assert _loaded(built["modules"], NOT_FOR_LISTING) == []
    assert "acode.store.sqlite_store" in built["modules"]  # it did read the store
    assert (built["acode"], built["session"]) == (["session"], ["list"])


def test_resume_dry_run_runs_no_step_and_builds_only_resume(acode: Cli) -> None:
    _waiting_session(acode)
    built = _probe(dict(acode.env), "resume", "--dry-run", "-w", str(acode.workspace))
    assert _loaded(built["modules"], NOT_FOR_A_DRY_RUN) == []
    assert "acode.resume.service" in built["modules"]  # it did look at the session
    assert built["acode"] == ["resume"]


def test_help_and_a_mistyped_command_build_every_command_they_name(
    cli_env: dict[str, str],
) -> None:
    """The list in a help, and the names close to a typo, are of all the commands."""
    everything = ["run", "resume", "status", "sync", "approve", "session"]
    everything += ["task", "work", "wsession", "settings"]
    cases = (
        (["--help"], 0, everything),
        (["sesion", "list"], 2, everything),
        (["session", "--help"], 0, ["session"]),
        (["session", "lst"], 2, ["session"]),
    )
    for args, expect, top in cases:
        built = _probe(cli_env, *args, expect=expect)
        assert (built["acode"], len(built["session"])) == (top, 7), args
