"""Dependencies point downwards: cli -> resume, agent -> runtime -> sync -> store -> domain.

Checked from the source with `ast`, so a layering mistake fails the suite before it
can grow into a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "acode"

# What each layer may import from acode (besides itself, acode.errors and acode.domain).
ALLOWED: dict[str, set[str]] = {
    "domain": set(),
    "security": set(),
    "store": set(),
    # The remote mirror sits below runtime so that a library session can run its worker;
    # it reports back through callbacks instead of importing runtime.
    "sync": {"store", "security"},
    "runtime": {"store", "security", "sync"},
    "resume": {"runtime", "store", "security", "sync"},
    # The agent loop is a program over a session, like a library user's.
    "agent": {"runtime", "store", "security", "sync"},
    # Work sessions drive engines (acode's own agent among them) over ledger sessions.
    "work": {"runtime", "store", "security", "sync", "agent"},
    "cli": {"runtime", "store", "security", "resume", "sync", "agent", "work"},
}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_lies_below(layer: str) -> None:
    allowed = ALLOWED[layer] | {layer, "domain"}
    for module in sorted((PACKAGE / layer).rglob("*.py")):
        for name in _imports(module):
            parts = name.split(".")
            if parts[0] != "acode" or len(parts) < 2 or parts[1] == "errors":
                continue
            assert parts[1] in allowed, f"{module.relative_to(PACKAGE)} imports {name}"


def _top_level_imports(path: Path) -> set[str]:
    """Modules imported when ``path`` is imported: not those inside functions, nor
    those only for type checking."""
    found: set[str] = set()

    def visit(nodes: Iterable[ast.AST]) -> None:
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            visit(ast.iter_child_nodes(node))

    visit(ast.parse(path.read_text()).body)
    return found


def test_only_sync_imports_psycopg_and_only_inside_functions() -> None:
    for module in PACKAGE.rglob("*.py"):
        names = {n.split(".")[0] for n in _imports(module)}
        if "psycopg" in names:
            assert module.parent.name == "sync", module
        assert "psycopg" not in {n.split(".")[0] for n in _top_level_imports(module)}, module


def test_runtime_and_resume_import_sync_only_when_a_remote_is_configured() -> None:
    for layer in ("runtime", "resume"):
        for module in (PACKAGE / layer).rglob("*.py"):
            assert not any(n.startswith("acode.sync") for n in _top_level_imports(module)), module


def test_only_the_cli_imports_typer_and_rich() -> None:
    for module in PACKAGE.rglob("*.py"):
        if module.parent.name == "cli":
            continue
        names = {n.split(".")[0] for n in _imports(module)}
        assert not names & {"typer", "rich"}, module
