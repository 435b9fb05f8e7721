"""The public API is small, explicit and pinned; `import acode` stays cheap."""

from __future__ import annotations

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
    "Session",
    "SessionState",
    "StepContext",
    "StepFailedError",
    "__version__",
    "open_session",
    "python_step",
    "resume_session",
}


def test_all_is_pinned() -> None:
    assert set(acode.__all__) == EXPECTED


def test_every_exported_name_resolves() -> None:
    for name in acode.__all__:
        assert getattr(acode, name) is not None


def test_import_acode_loads_no_heavy_module() -> None:
    code = (
        "import sys, acode; heavy = [m for m in ('sqlite3', 'yaml', 'typer', 'rich',"
        " 'urllib.request', 'psycopg') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_error_has_a_code_and_an_exit_status() -> None:
    from acode import errors

    for name in errors.__all__:
        value = getattr(errors, name)
        if isinstance(value, type) and issubclass(value, errors.AcodeError):
            assert value.code.value.startswith("ACODE-")
            assert isinstance(value.exit_code, int)
