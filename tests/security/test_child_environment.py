"""The checkpoint key and the remote's URL never reach a process acode starts.

Every kind of child prints what it can see: its own environment and that of each of its
ancestors as the kernel shows it (/proc/PID/environ, the environment a process started
with, which any process of the same user can read). The key and the remote's password
appear in none of them: not for a `run` step, a command the model runs, a `check:`
command, an engine CLI, nor a git hook run by a `commit` step.
"""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import Background, Cli, plan_yaml, wait_for
from tests.support.fake_openai import FakeOpenAI

# Writes what the process can see of secrets to the file named by its first argument.
DUMP = r"""
import os, sys
seen = [f"{k}={v}" for k, v in os.environ.items()]
pid = os.getppid()
while pid > 1:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            seen.append(f.read().replace(b"\0", b"\n").decode(errors="replace"))
        with open(f"/proc/{pid}/stat", "rb") as f:
            pid = int(f.read().rsplit(b")", 1)[1].split()[1])
    except OSError:
        break
with open(sys.argv[1], "w") as f:
    f.write("\n".join(seen))
"""


class Secrets:
    def __init__(self) -> None:
        self.key = f"checkpoint-key-{uuid.uuid4().hex}"
        self.password = f"pw{uuid.uuid4().hex}"
        # A remote that refuses at once: the run goes on, degraded.
        self.dsn = f"postgresql://acode:{self.password}@127.0.0.1:9/acode"

    def assert_absent(self, path: Path) -> None:
        seen = path.read_text()
        assert self.key not in seen, f"{path.name} holds the checkpoint key"
        assert self.password not in seen, f"{path.name} holds the remote's password"


@pytest.fixture
def secrets() -> Secrets:
    return Secrets()


@pytest.fixture
def acode(
    workspace: Path, cli_env: dict[str, str], background: Background, secrets: Secrets
) -> Cli:
    env = {**cli_env, "ACODE_CHECKPOINT_SECRET": secrets.key, "ACODE_SYNC_DSN": secrets.dsn}
    cli = Cli(workspace, env, background)
    cli.write("dump.py", DUMP)
    return cli


def _dump(name: str) -> str:
    return f"{sys.executable} dump.py {name}"


def test_a_run_step_sees_no_secret(acode: Cli, secrets: Secrets) -> None:
    acode.write("plan.yml", plan_yaml("Dump", f"{{id: dump, run: '{_dump('run.env')}'}}"))
    acode("run", "plan.yml")
    secrets.assert_absent(acode.workspace / "run.env")


def test_a_check_command_sees_no_secret(acode: Cli, secrets: Secrets) -> None:
    # Paused in its first run; on resume, the check decides whether it must run again.
    command = "test -e started || { touch started; sleep 30; }"
    check = f"{_dump('check.env')}; false"
    acode.write("plan.yml", plan_yaml("Check", f"{{id: slow, run: '{command}', check: '{check}'}}"))
    run = acode.start("run", "plan.yml")
    wait_for("the step to start", (acode.workspace / "started").exists)
    run.proc.send_signal(signal.SIGTERM)
    acode.finish(run, expect=130)
    acode("resume", "--mode", "autopilot")
    secrets.assert_absent(acode.workspace / "check.env")


def test_a_git_hook_run_by_a_commit_step_sees_no_secret(acode: Cli, secrets: Secrets) -> None:
    ws = acode.workspace
    acode.write(".gitignore", ".agent/\n")
    subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
    hook = ws / ".git/hooks/pre-commit"
    hook.write_text(f"#!/bin/sh\n{_dump(str(ws / 'hook.env'))}\n")
    hook.chmod(0o755)
    acode.write("plan.yml", plan_yaml("Commit", "{id: save, commit: Save}"))
    acode("run", "plan.yml")
    secrets.assert_absent(ws / "hook.env")


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def test_a_command_the_model_runs_sees_no_secret(
    acode: Cli, secrets: Secrets, fake: FakeOpenAI
) -> None:
    plan = {"tasks": [{"title": "Look", "steps": [{"title": "dump"}]}]}
    fake.converse(
        [
            {
                "tool": "submit_plan",
                "replies": [{"tool_calls": [{"name": "submit_plan", "arguments": plan}]}],
            },
            {
                "match": "Now do task t1:",
                "replies": [
                    {
                        "tool_calls": [
                            {"name": "run_command", "arguments": {"command": _dump("agent.env")}}
                        ]
                    },
                    "Done.",
                ],
            },
        ]
    )
    acode.write(".agent/config.yml", f"model:\n  base_url: {fake.base_url}\n  name: fake-model\n")
    acode("run", "Look around", timeout=60)
    secrets.assert_absent(acode.workspace / "agent.env")


def test_an_engine_cli_sees_no_secret_and_still_records_breadcrumbs(
    acode: Cli, secrets: Secrets
) -> None:
    # The engine records a breadcrumb with its cookie: the acode running its turn signs it.
    engine = acode.write(
        "engine.py",
        DUMP
        + "import subprocess\n"
        + "subprocess.run([sys.executable, '-m', 'acode', 'wsession', 'breadcrumb', 'add',"
        + " '--cookie', os.environ['ACODE_WORK_COOKIE'], '--message', 'found it'], check=True)\n"
        + "print('done')\n",
    )
    template = f"{sys.executable} {engine} {acode.workspace / 'engine.env'}"
    acode.write(".agent/config.yml", f"engines:\n  command: {{command: '{template}'}}\n")
    acode("task", "add", "Investigate")
    started = acode("work", "task", "task-001", "--engine", "command", "--json", timeout=60).json()
    assert started["turns"][0]["ok"], started
    secrets.assert_absent(acode.workspace / "engine.env")
    shown = acode("work", "show", started["cookie"], "--json").json()
    assert [b["message"] for b in shown["breadcrumbs"]] == ["found it"]


def test_an_acode_run_by_a_step_says_the_key_is_withheld(
    acode: Cli, cli_env: dict[str, str]
) -> None:
    """It never makes a key of its own: there is no key file, and none is created."""
    acode.write("inner/plan.yml", plan_yaml("Inner", "{id: r, read: plan.yml}"))
    inner = f"{sys.executable} -m acode run inner/plan.yml --workspace inner > inner.out 2>&1; true"
    acode.write("plan.yml", plan_yaml("Outer", f"{{id: nest, run: '{inner}'}}"))
    acode("run", "plan.yml")
    out = (acode.workspace / "inner.out").read_text()
    assert "ACODE-KEY-001" in out, out
    key_file = Path(cli_env["XDG_CONFIG_HOME"]) / "acode" / "checkpoint.key"
    assert not key_file.exists()


def test_every_process_acode_starts_gets_an_explicit_environment() -> None:
    """A spawn without ``env=`` would hand the child this process's whole environment."""
    package = Path(__file__).resolve().parents[2] / "acode"
    spawns = []
    for module in package.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"run", "Popen", "call", "check_output", "check_call"}
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "subprocess"
            ):
                spawns.append((module.relative_to(package).as_posix(), node))
    assert spawns
    for name, call in spawns:
        env = next((k.value for k in call.keywords if k.arg == "env"), None)
        assert env is not None, f"{name}:{call.lineno} starts a process without env="
        # acode itself as a work session's engine, or as a fleet worker's session, is
        # the one exception (it signs).
        assert "os.environ" not in ast.unparse(env) or name in (
            "work/runner.py",
            "fleet/worker.py",
        ), f"{name}:{call.lineno} passes os.environ: use child_environment()"
