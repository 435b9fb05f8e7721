"""The crash tests' workload: a demo-style plan, the git workspace it runs in, the
environment of the acode processes, and what is compared after a run.

Every step that executes code logs one line to ``effects.log`` in the workspace before
doing anything else: ``<step id> <idempotency key without its attempt> <attempt>
<time in µs> <pid>``. Comparing those times with the ``step_completed`` events of the
session history shows whether a completed step ever ran again (invariant 1).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "EFFECTS_LOG",
    "EFFECT_EVENT",
    "EFFECT_STEPS",
    "HOLD_PLAN",
    "MAIN_PLAN",
    "TEMP_PREFIX",
    "WRITE_COMMIT_PLAN",
    "ACodeCli",
    "Effect",
    "GitState",
    "acode_bin",
    "base_env",
    "build_template",
    "install_hook",
    "plan_step_ids",
    "read_effects",
    "workspace_files",
    "write_plan",
]

EFFECTS_LOG = "effects.log"
# What acode names its temporary files (acode.system.files.TEMP_PREFIX, repeated here so
# that a renamed constant cannot silently make a leftover invisible to these tests).
TEMP_PREFIX = ".acode-tmp-"
_SECRET = "crash-tests-checkpoint-secret"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "acode crash tests",
    "GIT_AUTHOR_EMAIL": "crash@acode.invalid",
    "GIT_COMMITTER_NAME": "acode crash tests",
    "GIT_COMMITTER_EMAIL": "crash@acode.invalid",
}
# Raised by the python steps right after they logged their execution: an audit hook can
# kill there, after the effect and before its completion is recorded.
EFFECT_EVENT = "crashtest.effect_logged"
STEP_PAUSE = 0.05

_STEPS_PY = f'''"""Python steps of the crash-test workload."""

import os
import sys
import time
from pathlib import Path


def _log(ctx):
    prefix, _, attempt = ctx.idempotency_key.rpartition(":")
    line = f"{{ctx.step_id}} {{prefix}} {{attempt}} {{time.time_ns() // 1000}} {{os.getpid()}}\\n"
    with open(Path(ctx.workspace) / "{EFFECTS_LOG}", "a", encoding="utf-8") as log:
        log.write(line)
    sys.audit("{EFFECT_EVENT}", ctx.step_id)


def prepare(ctx):
    _log(ctx)
    time.sleep({STEP_PAUSE})
    out = Path(ctx.workspace) / "generated" / "prepared.txt"
    out.parent.mkdir(exist_ok=True)
    out.write_text("prepared for " + ctx.step_id + "\\n", encoding="utf-8")
    return {{"prepared": True}}


def slow(ctx):
    _log(ctx)
    time.sleep({STEP_PAUSE})
    time.sleep({STEP_PAUSE})
    return {{"slept": 2 * {STEP_PAUSE}}}


def finish(ctx):
    _log(ctx)
    lines = (Path(ctx.workspace) / "out.txt").read_text(encoding="utf-8").splitlines()
    (Path(ctx.workspace) / "summary.txt").write_text(f"{{len(lines)}} lines\\n", encoding="utf-8")
    time.sleep({STEP_PAUSE})
    return {{"lines": len(lines)}}
'''

_APP_PY = """def greet(name):
    return "Hello " + name


def main():
    print(greet("world"))
"""

# A run step's own log line: the key without its attempt, then the attempt.
_LOG = (
    'echo "$ACODE_STEP_ID ${ACODE_IDEMPOTENCY_KEY%:*} ${ACODE_IDEMPOTENCY_KEY##*:} '
    f'$(date +%s%6N) $$" >> {EFFECTS_LOG}'
)
# Large enough that writing and fsyncing it takes a moment a kill can land in.
_TABLE = "".join(f"row {i:05d} {'x' * (i % 61)}\n" for i in range(3000))

MAIN_PLAN: dict[str, Any] = {
    "title": "Crash-test workload",
    "tasks": [
        {
            "id": "setup",
            "title": "Prepare the workspace",
            "steps": [
                {"id": "read-app", "read": "src/app.py"},
                {
                    "id": "write-config",
                    "write": "config/settings.ini",
                    "content": "[app]\nlevel = 1\nname = demo\n",
                },
                {"id": "py-prepare", "python": "steps:prepare"},
                {
                    "id": "log-start",
                    "run": f"{_LOG}; sleep 0.05; echo start >> out.txt",
                    "paths": ["out.txt"],
                },
                {"id": "commit-setup", "commit": "Set up configuration"},
            ],
        },
        {
            "id": "implement",
            "title": "Implement the change",
            "steps": [
                {
                    "id": "edit-app",
                    "edit": "src/app.py",
                    "old": "def greet(name):",
                    "new": "def greet(name: str) -> str:",
                },
                {"id": "write-table", "write": "data/table.txt", "content": _TABLE},
                {"id": "py-slow", "python": "steps:slow"},
                {
                    "id": "build",
                    "run": f"{_LOG}; sleep 0.03; printf 'v1\\n' > build.txt",
                    "check": "grep -qx v1 build.txt",
                },
                {
                    "id": "count",
                    "run": f"{_LOG}; echo x >> out.txt; sleep 0.05; echo y >> out.txt",
                    "paths": ["out.txt"],
                },
                {
                    "id": "stamp",
                    "run": f"{_LOG}; echo stamped > stamp.txt",
                    "idempotent": True,
                },
                {
                    "id": "edit-config",
                    "edit": "config/settings.ini",
                    "old": "level = 1",
                    "new": "level = 2",
                },
            ],
        },
        {
            "id": "finish",
            "title": "Wrap up",
            "steps": [
                {"id": "read-out", "read": "out.txt"},
                {
                    "id": "edit-app-2",
                    "edit": "src/app.py",
                    "old": 'print(greet("world"))',
                    "new": 'print(greet("crash-proof world"))',
                },
                {"id": "py-finish", "python": "steps:finish"},
                {"id": "commit-final", "commit": "Implement the change"},
            ],
        },
    ],
}

# The steps whose executions are logged: python steps and run steps.
EFFECT_STEPS = frozenset(
    step["id"]
    for task in MAIN_PLAN["tasks"]
    for step in task["steps"]
    if "python" in step or "run" in step
)

# A run step whose child waits, while $CRASHTEST_HOLD names a file that does not exist
# yet, before it appends to out.txt: the child can be left running, orphaned, for as long
# as a test needs, and its effect released on cue.
HOLD_PLAN: dict[str, Any] = {
    "title": "Orphaned child",
    "tasks": [
        {
            "id": "only",
            "title": "Hold a child",
            "steps": [
                {"id": "before", "write": "before.txt", "content": "before\n"},
                {
                    "id": "hold",
                    "run": 'if [ -n "$CRASHTEST_HOLD" ]; then touch "$CRASHTEST_HOLD.entered"; '
                    'while [ ! -e "$CRASHTEST_HOLD" ]; do sleep 0.01; done; fi; '
                    "echo x >> out.txt",
                    "paths": ["out.txt"],
                },
                {"id": "after", "write": "after.txt", "content": "after\n"},
                {"id": "save", "commit": "Hold and release"},
            ],
        }
    ],
}

WRITE_COMMIT_PLAN: dict[str, Any] = {
    "title": "Write then commit",
    "tasks": [
        {
            "id": "only",
            "title": "Write a file and commit it",
            "steps": [
                {"id": "settings", "write": "settings.ini", "content": "[app]\nlevel = 3\n"},
                {"id": "save", "commit": "Add settings"},
            ],
        }
    ],
}


def plan_step_ids(plan: dict[str, Any]) -> list[str]:
    return [step["id"] for task in plan["tasks"] for step in task["steps"]]


def write_plan(plan: dict[str, Any], path: Path) -> Path:
    """The plan file, kept outside the workspace so that commits do not pick it up."""
    path.write_text(yaml.safe_dump(plan, sort_keys=False), encoding="utf-8")
    return path


def acode_bin() -> Path:
    """The `acode` script of the environment running the tests."""
    found = Path(sys.executable).with_name("acode")
    if not found.exists():
        raise AssertionError(f"{found} does not exist; install acode with `make` first")
    return found


def base_env(config_home: Path, hook_dir: Path) -> dict[str, str]:
    """The environment of every process the crash tests start: nothing of the caller's
    acode, git or hook settings; a git identity; the checkpoint secret; the audit hook."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("ACODE_", "CRASHTEST_", "GIT_", "PYTHON"))
    }
    env.update(_IDENTITY)
    env.update(
        {
            "ACODE_CHECKPOINT_SECRET": _SECRET,
            "XDG_CONFIG_HOME": str(config_home),
            # The user's git configuration (signing, hooks) must not change the commits.
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CONFIG_NOSYSTEM": "1",
            # __pycache__ in the workspace would end up in the commits.
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": str(hook_dir),
            "COLUMNS": "200",
        }
    )
    return env


def install_hook(hook_dir: Path) -> Path:
    hook_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(__file__).with_name("autokill.py"), hook_dir / "sitecustomize.py")
    return hook_dir


def _git(ws: Path, env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        ["git", *args], cwd=ws, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed in {ws}: {result.stderr}")
    return result.stdout


def build_template(ws: Path, env: dict[str, str]) -> Path:
    """A git repository with one commit holding the sources and the python steps."""
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "app.py").write_text(_APP_PY, encoding="utf-8")
    (ws / "steps.py").write_text(_STEPS_PY, encoding="utf-8")
    (ws / "README.md").write_text("# Crash-test workspace\n", encoding="utf-8")
    (ws / ".gitignore").write_text(f"{EFFECTS_LOG}\n__pycache__/\n", encoding="utf-8")
    _git(ws, env, "init", "--quiet")
    _git(ws, env, "add", "--all")
    _git(ws, env, "commit", "--quiet", "--message", "Initial commit")
    return ws


def workspace_files(ws: Path) -> dict[str, bytes]:
    """Every file of the workspace but acode's state, git's and the side-effect log."""
    files: dict[str, bytes] = {}
    for path in sorted(ws.rglob("*")):
        rel = path.relative_to(ws)
        if rel.parts[0] in (".agent", ".git") or not path.is_file():
            continue
        if rel.as_posix() == EFFECTS_LOG:
            continue
        files[rel.as_posix()] = path.read_bytes()
    return files


@dataclass(frozen=True)
class GitState:
    log: str  # subject and tree of every commit, newest first
    status: str

    @classmethod
    def of(cls, ws: Path, env: dict[str, str]) -> GitState:
        return cls(
            _git(ws, env, "log", "--format=%s%n%T", "HEAD"),
            _git(ws, env, "status", "--porcelain", "--untracked-files=all"),
        )


@dataclass(frozen=True)
class Effect:
    """One logged execution of a step."""

    step: str
    key_prefix: str
    attempt: int
    ts_us: int
    pid: int


def read_effects(ws: Path) -> list[Effect]:
    path = ws / EFFECTS_LOG
    if not path.exists():
        return []
    effects = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        # Each line is one write(2), which a kill cannot tear: anything else is a bug.
        if len(fields) != 5 or not all(f.isdigit() for f in fields[2:]):
            raise AssertionError(f"malformed line in {path}: {line!r}")
        effects.append(Effect(fields[0], fields[1], int(fields[2]), int(fields[3]), int(fields[4])))
    return effects


@dataclass(frozen=True)
class ACodeCli:
    """Runs `acode` commands that are not killed, in one workspace."""

    ws: Path
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(acode_bin()), *args, "--workspace", str(self.ws)],
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def json(self, *args: str) -> Any:
        result = self.run(*args, "--json")
        if result.returncode != 0:
            raise AssertionError(
                f"acode {' '.join(args)} exited {result.returncode}: {result.stderr}"
            )
        return json.loads(result.stdout)
