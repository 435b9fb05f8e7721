"""The public API is small, explicit and pinned; `import acode` stays cheap."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import acode

EXPECTED = {
    "AcodeConfig",
    "AcodeError",
    "ApprovalPending",
    "ApprovalRequest",
    "CommandResult",
    "NonDeterminismError",
    "PauseRequested",
    "ResumableSession",
    "ResumePreview",
    "Session",
    "SessionState",
    "StepContext",
    "StepFailedError",
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
        "acode.runtime.git",
        "acode.runtime.snapshot",
        "acode.runtime.process",
        "acode.runtime.model_client",
        "acode.runtime.steps.file_steps",
        "acode.runtime.steps.run_step",
        "acode.domain.plan",
        "acode.domain.continuation",
    )
    assert _loaded("import acode; acode.resume_session; acode.open_session", unused) == []


def test_the_resume_command_loads_the_step_engine_only_to_run_steps() -> None:
    engine = ("acode.runtime.session", "acode.runtime.plan_runner", "acode.cli.driver")
    assert _loaded("import acode.cli.resume_command", engine) == []


def test_every_error_has_a_code_and_an_exit_status() -> None:
    from acode import errors

    for name in errors.__all__:
        value = getattr(errors, name)
        if isinstance(value, type) and issubclass(value, errors.AcodeError):
            assert value.code.value.startswith("ACODE-")
            assert isinstance(value.exit_code, int)
