"""Trees with more directories than a process may hold open: a `run` step that declares
every file of them, and the resume that checks them all, under a low limit of open files
(the usual limit is 1,024; a big repository has thousands of directories)."""

from __future__ import annotations

import subprocess

from tests.cli.conftest import ACODE, Cli, Result, plan_yaml

__all__: list[str] = []

_DIRECTORIES = 300
_OPEN_FILES = 200


def _limited(acode: Cli, *args: str) -> Result:
    """`acode ARGS` with at most _OPEN_FILES descriptors open at once."""
    done = subprocess.run(
        ["sh", "-c", f'ulimit -n {_OPEN_FILES} && exec "$0" "$@"', ACODE, *args],
        cwd=acode.workspace,
        env=acode.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    result = Result(tuple(args), done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in result.err, result.describe()
    return result


def test_a_run_step_over_every_directory_and_its_resume_check(acode: Cli) -> None:
    for d in range(_DIRECTORIES):
        acode.write(f"pkg{d:03d}/mod.py", f"VALUE = {d}\n")
    acode.write(
        "plan.yml",
        plan_yaml(
            "Big tree",
            "{id: touch, run: 'true', paths: ['pkg*/**']}",
            "{id: wait, approve: Go on?}",
        ),
    )

    ran = _limited(acode, "run", "plan.yml")

    assert ran.code == 20, ran.describe()  # done with the run step, waiting at the approval
    acode.write("pkg150/mod.py", "VALUE = 'changed'\n")
    preview = _limited(acode, "resume", "--dry-run", "--json")
    assert preview.code == 0, preview.describe()
    environment = preview.json()["environment"]
    assert environment["files_checked"] == _DIRECTORIES
    assert [c["path"] for c in environment["changed_files"]] == ["pkg150/mod.py"]
