"""The engine knows the store contract, not a backend: above ``acode/store/`` nothing
imports ``acode.store.sqlite`` but the translation of a damaged SQLite file into its
error, which the workspace's check of an empty file and the CLI's last resort make."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "acode"
# (module, name): what may be imported from the SQLite backend above the store.
ALLOWED = {
    ("acode.store.sqlite.connection", "damaged_database"),
    ("acode.store.sqlite.connection", "database_damaged"),
}


def test_nothing_above_the_store_imports_its_backend() -> None:
    found: list[str] = []
    for module in sorted(PACKAGE.rglob("*.py")):
        if module.is_relative_to(PACKAGE / "store"):
            continue
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [(node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [(alias.name, "") for alias in node.names]
            else:
                continue
            found += [
                f"{module.relative_to(PACKAGE)}: {name} {what}"
                for name, what in names
                if name.startswith("acode.store.sqlite") and (name, what) not in ALLOWED
            ]
    assert found == []
