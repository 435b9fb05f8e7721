"""Dependencies point downwards: cli -> resume -> runtime -> store -> domain.

Checked from the source with `ast`, so a layering mistake fails the suite before it
can grow into a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "acode"

# What each layer may import from acode (besides itself, acode.errors and acode.domain).
ALLOWED: dict[str, set[str]] = {
    "domain": set(),
    "security": set(),
    "store": set(),
    "runtime": {"store", "security"},
    "resume": {"runtime", "store", "security"},
    "cli": {"runtime", "store", "security", "resume"},
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


def test_only_the_cli_imports_typer_and_rich() -> None:
    for module in PACKAGE.rglob("*.py"):
        if module.parent.name == "cli":
            continue
        names = {n.split(".")[0] for n in _imports(module)}
        assert not names & {"typer", "rich"}, module
