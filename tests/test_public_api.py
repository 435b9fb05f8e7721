"""The public API is small, explicit and pinned; `import acode` stays cheap."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import acode
from acode import errors

ROOT = Path(__file__).resolve().parents[1]

EXPECTED = {
    "AcodeConfig",
    "AcodeError",
    "ApprovalPending",
    "ApprovalRequest",
    "CheckpointError",
    "CommandResult",
    "EnvironmentValidationError",
    "ModelError",
    "NonDeterminismError",
    "NothingToResumeError",
    "PauseRequested",
    "ResumableSession",
    "ResumePreview",
    "Session",
    "SessionLockedError",
    "SessionNotFoundError",
    "SessionState",
    "StepContext",
    "StepFailedError",
    "StorageError",
    "TerminalStateError",
    "UsageError",
    "__version__",
    "list_resumable",
    "open_session",
    "preview_resume",
    "python_step",
    "resume_session",
}


def test_all_is_pinned() -> None:
    assert set(acode.__all__) == EXPECTED


def test_every_exported_name_resolves() -> None:
    for name in acode.__all__:
        assert getattr(acode, name) is not None


def test_open_session_takes_what_a_library_caller_passes() -> None:
    """What acode's own commands record besides (a plan, an agent's task, a mode, a clock)
    goes through ``acode.engine.lifecycle.start_session``, not the library's entry point;
    docs/library.md shows the same signature."""
    import inspect

    parameters = inspect.signature(acode.open_session).parameters.values()
    assert [p.name for p in parameters] == ["title", "workspace", "config", "observer", "approver"]
    assert [p.name for p in parameters if p.kind is p.KEYWORD_ONLY] == ["observer", "approver"]
    documented = (
        '`acode.open_session(title, workspace=".", config=None, *, observer=None, approver=None)`'
    )
    assert documented in (ROOT / "docs" / "library.md").read_text(encoding="utf-8")


def test_exported_names_read_as_acode_names() -> None:
    """A traceback, a repr and a pickle name them as callers do: ``acode.StepFailedError``."""
    for name in acode.__all__:
        if name != "__version__":
            assert getattr(acode, name).__module__ == "acode", name


def test_the_imports_for_type_checkers_are_the_exports() -> None:
    """``acode/__init__.py`` lists its exports once; the ``TYPE_CHECKING`` imports that give
    them their types must say the same, name for name and module for module."""
    tree = ast.parse((ROOT / "acode" / "__init__.py").read_text(encoding="utf-8"))
    static = {
        alias.name: node.module
        for block in tree.body
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    exports = dict(acode._EXPORTS)
    assert static == exports


def test_every_error_library_docs_name_is_exported() -> None:
    """What docs/library.md tells a caller to catch, a caller can name: ``acode.X``."""
    text = (ROOT / "docs" / "library.md").read_text(encoding="utf-8")
    named = set(re.findall(r"\b([A-Z][A-Za-z]+(?:Error|Pending|Requested))\b", text))
    assert named
    assert sorted(named - set(acode.__all__)) == []


def _drawn_parents() -> dict[str, str | None]:
    """The tree in ``acode.errors``'s docstring: each class drawn, and the one it hangs from."""
    parents: dict[str, str | None] = {}
    above: list[str] = []  # the classes on the path to the current line, by depth
    for match in re.finditer(
        r"^    ((?:[│ ]   )*)(?:[├└]── )?([A-Z]\w+)", errors.__doc__ or "", flags=re.M
    ):
        indent, name = match.groups()
        depth = len(indent) // 4 + (1 if "──" in match.group(0) else 0)
        del above[depth:]
        assert name not in parents, f"{name} is drawn twice"
        parents[name] = above[-1] if above else None
        above.append(name)
    return parents


def _subclasses(root: type[Exception]) -> set[type[Exception]]:
    found = {root}
    for sub in root.__subclasses__():
        found |= _subclasses(sub)
    return found


def test_the_error_tree_draws_every_error_class() -> None:
    """Every error class of the package (all of it is imported first, so that one defined
    elsewhere would be found) is drawn in the tree of errors.py's docstring under its base
    class, is defined in ``acode.errors`` and listed in its ``__all__``."""
    import importlib
    import pkgutil

    for module in pkgutil.walk_packages(acode.__path__, "acode."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    classes = {cls for cls in _subclasses(errors.AcodeError) if cls.__module__.startswith("acode")}

    drawn = _drawn_parents()
    assert drawn == {
        cls.__name__: None if cls is errors.AcodeError else cls.__mro__[1].__name__
        for cls in classes
    }
    for cls in classes:
        assert cls.__name__ in errors.__all__, cls
        assert getattr(errors, cls.__name__) is cls, f"{cls} is not defined in acode.errors"


def _python(code: str) -> str:
    """The output of ``python -c code``. Not measured by `make test`'s coverage: coverage
    imports sqlite3 and socket at start-up, which would pass for acode's."""
    env = {k: v for k, v in os.environ.items() if k != "COVERAGE_PROCESS_CONFIG"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return done.stdout


def test_import_acode_loads_no_heavy_module() -> None:
    code = (
        "import sys, acode; heavy = [m for m in ('sqlite3', 'yaml', 'typer', 'rich',"
        " 'urllib.request', 'psycopg') if m in sys.modules]; print(heavy)"
    )
    assert _python(code).strip() == "[]"


def _loaded(statement: str, modules: tuple[str, ...]) -> list[str]:
    code = (
        f"import json, sys; {statement}; "
        f"print(json.dumps([m for m in {modules!r} if m in sys.modules]))"
    )
    loaded: list[str] = json.loads(_python(code))
    return loaded


def test_resuming_loads_only_what_a_library_caller_runs() -> None:
    """A library caller resumes and replays python steps: what the other step kinds, the
    plan and the model need loads with their first use (recovery is timed from the
    process's start)."""
    unused = (
        "subprocess",
        "socket",
        "difflib",
        "importlib.resources",
        "acode.system.git",
        "acode.system.snapshot",
        "acode.system.process",
        "acode.system.model_client",
        "acode.engine.steps.file_steps",
        "acode.engine.steps.run_step",
        "acode.domain.plan",
        "acode.domain.continuation",
    )
    assert _loaded("import acode; acode.resume_session; acode.open_session", unused) == []


def test_the_resume_command_loads_the_step_engine_only_to_run_steps() -> None:
    engine = ("acode.engine.session", "acode.engine.plan_runner", "acode.cli.driver")
    assert _loaded("import acode.cli.resume_command", engine) == []


def test_every_error_has_a_code_and_an_exit_status() -> None:
    for name in errors.__all__:
        value = getattr(errors, name)
        if isinstance(value, type) and issubclass(value, errors.AcodeError):
            assert value.code.value.startswith("ACODE-")
            assert isinstance(value.exit_code, int)
