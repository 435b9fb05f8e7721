"""Every command explains itself (`--help`) and is documented in docs/cli.md, with each of
its options. The command list comes from the executable's own help, so a new command
or option without help text or documentation fails here."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli.conftest import Background, Cli, Result, make_env

__all__: list[str] = []

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
EXIT_CODES = (0, 1, 2, 14, 15, 16, 17, 19, 20, 130)
# Groups that are a command too, run without a subcommand (`acode worker`, and
# `acode worker status`): documented and held to their options as commands are.
RUNNABLE_GROUPS = ("worker",)


def _section(text: str, title: str) -> list[str]:
    """The lines of a click help section ("Commands:", "Options:") up to a blank line."""
    lines = text.splitlines()
    if f"{title}:" not in lines:
        return []
    start = lines.index(f"{title}:") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def _commands(result: Result) -> list[str]:
    return [line.split()[0] for line in _section(result.out, "Commands") if line[2] != " "]


def _options(result: Result) -> set[str]:
    found: set[str] = set()
    for line in _section(result.out, "Options"):
        match = re.match(r"\s{2}((?:-[\w-]+(?:, )?)+)", line)
        if match:
            found.update(name for name in match.group(1).split(", ") if name != "--help")
    return found


@dataclass(frozen=True)
class Helps:
    top: Result
    groups: dict[str, Result]
    commands: dict[str, Result]  # by command path: "run", "session list", ...


@pytest.fixture(scope="module")
def helps(tmp_path_factory: pytest.TempPathFactory) -> Helps:
    acode = Cli(
        tmp_path_factory.mktemp("help"),
        make_env(tmp_path_factory.mktemp("cli-config")),
        Background(),
    )
    top = acode("--help")
    names = _commands(top)
    first = dict(zip(names, acode.many([[n, "--help"] for n in names]), strict=True))
    groups = {name: result for name, result in first.items() if _commands(result)}
    commands = {name: result for name, result in first.items() if name not in groups}
    pending = dict(groups)
    while pending:  # groups hold commands and groups (`wsession breadcrumb add`)
        nested = [f"{g} {sub}" for g, result in pending.items() for sub in _commands(result)]
        helps_of = acode.many([[*path.split(), "--help"] for path in nested])
        results = dict(zip(nested, helps_of, strict=True))
        pending = {path: result for path, result in results.items() if _commands(result)}
        groups.update(pending)
        commands.update({path: r for path, r in results.items() if path not in pending})
    commands.update({name: groups[name] for name in RUNNABLE_GROUPS})
    return Helps(top, groups, commands)


def _description(result: Result) -> str:
    """The paragraph between the usage line and the first section."""
    lines = result.out.splitlines()
    assert lines[0].startswith("Usage: acode"), result.describe()
    text = []
    for line in lines[1:]:
        if line.endswith(":") and not line.startswith(" "):
            break
        text.append(line.strip())
    return " ".join(t for t in text if t)


def test_the_command_set_is_the_documented_one(helps: Helps) -> None:
    assert sorted(helps.groups) == [
        "queue",
        "session",
        "settings",
        "task",
        "work",
        "worker",
        "wsession",
        "wsession breadcrumb",
    ]
    assert sorted(helps.commands) == [
        "approve",
        "doctor",
        "queue add",
        "queue cancel",
        "queue list",
        "resume",
        "run",
        "session archive",
        "session checkpoint",
        "session discard",
        "session export",
        "session history",
        "session import",
        "session list",
        "session prune",
        "session show",
        "session unlock",
        "settings get",
        "settings list",
        "settings set",
        "status",
        "sync",
        "task add",
        "task done",
        "task list",
        "task show",
        "work close",
        "work list",
        "work resume",
        "work show",
        "work spawn",
        "work task",
        "worker",
        "worker status",
        "wsession breadcrumb add",
        "wsession breadcrumb list",
    ]
    assert "Crash-proof AI coding-agent sessions" in _description(helps.top)


def test_every_command_and_group_has_a_description(helps: Helps) -> None:
    for path, result in {**helps.groups, **helps.commands}.items():
        assert result.out.startswith(f"Usage: acode {path} "), result.describe()
        assert len(_description(result)) >= 20, result.describe()
        assert _section(result.out, "Options"), result.describe()


def test_version_prints_the_version(acode: Cli) -> None:
    """On main `--version` was "No such option" (exit 2)."""
    import acode as library

    shown = acode("--version")

    assert shown.out == f"acode {library.__version__}\n"
    assert shown.err == ""
    assert "--version" in (DOCS.read_text(encoding="utf-8"))


def test_a_bare_group_prints_its_help(acode: Cli) -> None:
    bare, group = acode.many([[], ["session"]], expect=2)

    assert bare.err.startswith("Usage: acode [OPTIONS] COMMAND [ARGS]...")
    assert group.err.startswith("Usage: acode session [OPTIONS] COMMAND [ARGS]...")


def _documented() -> dict[str, str]:
    """docs/cli.md by command: the text under each "## `acode ...`" heading."""
    parts = re.split(r"^## `acode ([a-z ]+)`\n", DOCS.read_text(encoding="utf-8"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_docs_describe_every_command_and_option(helps: Helps) -> None:
    documented = _documented()

    assert sorted(documented) == sorted(helps.commands)
    for path, result in helps.commands.items():
        section = documented[path]
        assert f"acode {path}" in section
        assert "Exit status:" in section, path
        assert "```text" in section, f"{path}: no output example"
        for option in _options(result):
            assert f"`{option}" in section, f"docs/cli.md does not describe {path} {option}"


def test_docs_list_every_exit_status() -> None:
    table = re.findall(r"^\| (\d+) \|", DOCS.read_text(encoding="utf-8"), flags=re.M)

    assert tuple(int(code) for code in table) == EXIT_CODES
