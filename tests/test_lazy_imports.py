"""Imports that must wait until a function needs them: the rules of the layers that
import-linter cannot say, since it does not tell an import at a module's top from one inside
a function. The layers themselves are import-linter contracts (`[tool.importlinter]` in
pyproject.toml, checked by `make lint`).

Checked from the source with `ast`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "acode"


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


def test_psycopg_is_imported_only_inside_functions() -> None:
    for module in PACKAGE.rglob("*.py"):
        assert "psycopg" not in {n.split(".")[0] for n in _top_level_imports(module)}, module


def test_psutil_is_imported_only_inside_functions() -> None:
    for module in PACKAGE.rglob("*.py"):
        assert "psutil" not in {n.split(".")[0] for n in _top_level_imports(module)}, module


def test_the_engine_and_resume_import_sync_only_when_a_remote_is_configured() -> None:
    for layer in ("engine", "system", "operations", "resume"):
        for module in (PACKAGE / layer).rglob("*.py"):
            assert not any(n.startswith("acode.sync") for n in _top_level_imports(module)), module


def test_the_top_level_finder_skips_functions_and_type_checking(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import json\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import psycopg\nelse:\n    import os\n"
        "def f():\n    import acode.sync.worker\n"
        "class C:\n    from acode.sync import dsn\n"
    )
    assert _top_level_imports(source) == {"json", "typing", "os", "acode.sync"}


def test_the_postgresql_store_is_imported_only_when_one_is_opened() -> None:
    for module in PACKAGE.rglob("*.py"):
        if "postgres" not in module.parts:
            imported = _top_level_imports(module)
            assert not any(n.startswith("acode.store.postgres") for n in imported), module


def test_reading_a_sqlite_workspace_loads_no_settings_parser(tmp_path: Path) -> None:
    # `acode session list` asks which store the workspace uses at every start: a config
    # file that names no PostgreSQL store is not parsed, and the settings are not loaded.
    import subprocess
    import sys

    (tmp_path / ".agent").mkdir()
    (tmp_path / ".agent/config.yml").write_text("model:\n  name: x  # postgres in a comment\n")
    probe = (
        "import sys; from pathlib import Path;"
        "from acode.operations.inspection import read_store;"
        f"ctx = read_store(Path({str(tmp_path)!r})); ctx.__enter__();"
        "print(sorted(m for m in sys.modules if m in ('yaml', 'acode.domain.config',"
        " 'acode.engine.config', 'psycopg')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
