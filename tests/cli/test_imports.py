"""The command line is a tree: the entry point loads the parser (``acode.cli.app``), which
loads the modules of its commands. None of them reaches back up to the parser, not even
inside a function, so that each can be read, loaded and tested without it: what commands
share (their options) lives in ``acode.cli.options``."""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parents[2] / "acode" / "cli"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_only_the_entry_point_imports_the_parser() -> None:
    importers = sorted(path.name for path in CLI.glob("*.py") if "acode.cli.app" in _imports(path))
    assert importers == ["entry.py"]


def _declared_options(path: Path) -> set[str]:
    """The option names ``typer.Option(...)`` declares in ``path``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "typer.Option":
            found.update(
                arg.value
                for arg in node.args
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            )
    return found


def test_the_options_commands_share_are_declared_once() -> None:
    declared = {path.name: _declared_options(path) for path in CLI.glob("*.py")}
    shared = {"--workspace", "--json"}
    assert sorted(name for name, options in declared.items() if options & shared) == ["options.py"]
