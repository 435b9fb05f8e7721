"""Python steps of the demo plan.

acode calls each one with a ``ctx`` (an ``acode.StepContext``: session id, step id,
idempotency key, workspace, ...) and records what it returns, so the value must be
JSON-able. On resume, a completed step is not called again: its recorded value is used.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

__all__ = ["inventory", "report"]


def inventory(ctx: Any) -> dict[str, Any]:
    """List the functions of every module under src/: what the session starts from."""
    root = Path(ctx.workspace)
    modules = {}
    for path in sorted((root / "src").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
        modules[path.relative_to(root).as_posix()] = functions
    return {"modules": modules, "step": ctx.step_id}


def report(ctx: Any) -> dict[str, Any]:
    """Summarize the result before it is committed: version, changelog, tests."""
    root = Path(ctx.workspace)
    changelog = (root / "CHANGELOG.md").read_text(encoding="utf-8").splitlines()
    tests = sorted(p.name for p in (root / "tests").glob("test_*.py"))
    return {
        "version": (root / "VERSION").read_text(encoding="utf-8").strip(),
        "changelog_entries": sum(1 for line in changelog if line.startswith("- ")),
        "test_files": tests,
        "idempotency_key": ctx.idempotency_key,
    }
