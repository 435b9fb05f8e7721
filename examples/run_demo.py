"""`make demo`: run the example session of examples/demo in a scratch copy.

Copies examples/demo to ``scratch/demo-<timestamp>/``, makes it a git repository, starts a
stand-in model server for the plan's ``model`` step, and runs ``acode run plan.yaml`` there
with this terminal attached. Press Ctrl+C during a run to pause it; the script then prints
the command that resumes it.

    python examples/run_demo.py                    # a new demo session
    python examples/run_demo.py --resume DIR       # continue a paused one in DIR

Without a terminal (CI, a pipe) acode cannot ask for the approval and stops with exit
status 20; the script then approves on the command line and resumes, as a reviewer would.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

try:
    from acode.errors import EXIT_APPROVAL_PENDING, EXIT_INTERRUPTED
except ModuleNotFoundError:  # run with a Python that does not have acode installed
    raise SystemExit("acode is not installed here: run `make demo`, which installs it") from None

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo"
SCRATCH = REPO / "scratch"
ACODE = Path(sys.executable).parent / "acode"
MODEL_NAME = "stand-in"
MODEL_STEP = "summary"

CONFIG_TEMPLATE = """\
# Written by examples/run_demo.py. base_url is the demo's stand-in model server, which
# answers every prompt with "echo: <the prompt>". For a real local model, run Ollama
# (`ollama pull llama3.2`) and set: base_url: http://localhost:11434/v1, name: llama3.2
# Every setting: docs/configuration.md
model:
  base_url: http://127.0.0.1:{port}/v1
  name: {name}
"""


def say(text: str = "") -> None:
    print(f"==> {text}" if text else "", flush=True)


def note(text: str) -> None:
    print(f"    {text}", flush=True)


def shown(path: Path) -> str:
    """A path as short as it can be from where the person stands."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def acode_for(workspace: Path) -> str:
    """How a person runs acode after `cd workspace`."""
    found = shutil.which("acode")
    if found and Path(found).resolve() == ACODE.resolve():
        return "acode"
    return os.path.relpath(ACODE, workspace)


# -- the stand-in model server -----------------------------------------------------------


def load_fake_openai() -> ModuleType:
    """tests/support/fake_openai.py, the stand-in model server the tests use too; the repository
    goes on the path, since it imports its neighbours in tests/support."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module("tests.support.fake_openai")


@contextmanager
def model_server(port: int = 0) -> Iterator[int]:
    fake = load_fake_openai().FakeOpenAI(models=(MODEL_NAME,), port=port)
    try:
        fake.start()
    except OSError as exc:
        raise SystemExit(f"cannot start the stand-in model server on port {port}: {exc}") from exc
    try:
        say(f"Stand-in model server on http://127.0.0.1:{fake.port}/v1 (not a real model:")
        note('it answers every prompt with "echo: <the prompt>", so runs are repeatable).')
        note("For a real one, run Ollama and point model.base_url in .agent/config.yml at")
        note("http://localhost:11434/v1 (see docs/configuration.md).")
        yield int(fake.port)
    finally:
        fake.stop()


def recorded_port(workspace: Path) -> int:
    import yaml

    config = yaml.safe_load((workspace / ".agent" / "config.yml").read_text(encoding="utf-8"))
    url = str(config["model"]["base_url"])
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


# -- the workspace ---------------------------------------------------------------------------


def new_workspace() -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    workspace = SCRATCH / f"demo-{stamp}"
    suffix = 1
    while workspace.exists():
        suffix += 1
        workspace = SCRATCH / f"demo-{stamp}-{suffix}"
    shutil.copytree(DEMO, workspace, ignore=shutil.ignore_patterns("__pycache__"))
    return workspace


def git(workspace: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=workspace, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed in {workspace}:\n{done.stderr.strip()}")
    return done.stdout


def init_repository(workspace: Path) -> None:
    if shutil.which("git") is None:
        raise SystemExit("the demo needs git: install it and run `make demo` again")
    git(workspace, "init", "-q")
    env = dict(os.environ)
    probe = subprocess.run(
        ["git", "config", "user.email"], cwd=workspace, capture_output=True, check=False
    )
    if probe.returncode != 0:  # no identity configured: lend one to this commit only
        for role in ("AUTHOR", "COMMITTER"):
            env[f"GIT_{role}_NAME"] = "acode demo"
            env[f"GIT_{role}_EMAIL"] = "demo@acode.invalid"
    git(workspace, "add", "-A")
    git(workspace, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "Demo project", env=env)


# -- running acode ---------------------------------------------------------------------------


def acode(workspace: Path, *args: str) -> int:
    """Run acode in the workspace with this terminal attached; its exit status."""
    env = dict(os.environ)
    # The plan's `python3` is then the Python acode runs on, whatever PATH holds.
    env["PATH"] = f"{ACODE.parent}{os.pathsep}{env.get('PATH', '')}"
    # Ctrl+C reaches acode too (same process group); acode pauses and reports, and this
    # script must live on to say how to resume.
    previous = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        return subprocess.run([str(ACODE), *args], cwd=workspace, env=env, check=False).returncode
    finally:
        signal.signal(signal.SIGINT, previous)


def acode_json(workspace: Path, *args: str) -> Any:
    done = subprocess.run(
        [str(ACODE), *args, "--json"], cwd=workspace, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"acode {' '.join(args)} failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout)


def latest_session(workspace: Path) -> dict[str, Any]:
    sessions: list[dict[str, Any]] = acode_json(workspace, "session", "list")
    if not sessions:
        raise SystemExit(f"acode recorded no session in {workspace}")
    return sessions[0]


def step_done(workspace: Path, session: str, step: str) -> bool:
    shown_session: dict[str, Any] = acode_json(workspace, "session", "show", session)
    return any(
        s["step"] == step and s["status"] == "completed" for s in shown_session.get("steps", [])
    )


def follow(workspace: Path, code: int) -> int:
    """Carry the session on from acode's exit status until it ends or is paused."""
    while code == EXIT_APPROVAL_PENDING:
        short = latest_session(workspace)["short_id"]
        say("No terminal to ask on (stdin is not a TTY), so acode stopped and the session")
        note("waits for the approval. Approving on the command line, as a reviewer would:")
        note(f"acode approve {short}")
        approved = acode(workspace, "approve", short)
        if approved != 0:
            return approved
        say(f"Continuing the session: acode resume {short}")
        code = acode(workspace, "resume", short)
    if code == EXIT_INTERRUPTED:
        explain_pause(workspace)
    elif code == 1 and latest_session(workspace)["state"] == "CANCELLED":
        say("The approval was denied, so the session is cancelled: nothing was committed.")
    elif code != 0:
        say(f"acode stopped with exit status {code}; the message above says why.")
    return code


def explain_pause(workspace: Path) -> None:
    short = latest_session(workspace)["short_id"]
    resume = f"cd {shown(workspace)} && {acode_for(workspace)} resume {short}"
    say("Paused. Every step that finished is recorded; continue exactly where it stopped:")
    if step_done(workspace, short, MODEL_STEP):
        note(resume)
        return
    # acode checks that the model answers before it resumes a session that still needs it,
    # and the stand-in stopped with this script.
    note(f"{shown(Path(sys.executable))} {shown(Path(__file__))} --resume {shown(workspace)}")
    note("It restarts the stand-in model server (the model step is still to come) and runs:")
    note(resume)


def goodbye(workspace: Path) -> None:
    short = latest_session(workspace)["short_id"]
    say(f"The demo workspace is {shown(workspace)}. Look around:")
    note(f"cd {shown(workspace)}")
    note(f"{acode_for(workspace)} session list")
    note(f"{acode_for(workspace)} session history {short}")
    note("git log --stat")


# -- entry point ---------------------------------------------------------------------------


def start(workspace: Path | None) -> int:
    if workspace is None:
        workspace = new_workspace()
        with model_server() as port:
            config = workspace / ".agent" / "config.yml"
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(CONFIG_TEMPLATE.format(port=port, name=MODEL_NAME), "utf-8")
            init_repository(workspace)
            say(f"Copied examples/demo to {shown(workspace)}, a new git repository.")
            say("Running: acode run plan.yaml  (Ctrl+C pauses it; acode resume continues it)")
            code = follow(workspace, acode(workspace, "run", "plan.yaml"))
    else:
        if not (workspace / ".agent" / "config.yml").is_file():
            raise SystemExit(f"{workspace} is not a demo workspace (no .agent/config.yml)")
        with model_server(recorded_port(workspace)):
            say(f"Resuming in {shown(workspace)}: acode resume")
            code = follow(workspace, acode(workspace, "resume"))
    if code != EXIT_INTERRUPTED:
        goodbye(workspace)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run_demo.py", description="Run the acode demo session.")
    parser.add_argument(
        "--resume",
        type=Path,
        metavar="DIR",
        help="continue the paused demo session in DIR (restarts the stand-in model server)",
    )
    args = parser.parse_args(argv)
    workspace = args.resume.resolve() if args.resume else None
    try:
        return start(workspace)
    except KeyboardInterrupt:
        say("Stopped.")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
