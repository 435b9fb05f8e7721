"""`make demo-agent`: an agent session against a real model, interrupted and resumed.

Starts llama.cpp's OpenAI-compatible server with Gemma 3 270M (from the environment
`make demo-agent` builds, .venv-llm) on a free port, makes a scratch git repository with
a small ``src/login.py`` in a temporary directory, and there:

1. runs ``acode run "Add email validation to src/login.py"`` to the end;
2. runs it again in a fresh copy, presses Ctrl+C (SIGINT) once the first model answer is
   recorded, and continues with ``acode resume``;
3. shows ``acode status`` and ``acode session history`` of the resumed session.

The model is tiny and not instruction-tuned: it shows the machinery (planning, tool calls,
recording, resume), not good code. A task it fails is a legal end (exit status 1).

    python examples/run_demo_agent.py
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

try:
    from acode.errors import EXIT_INTERRUPTED
except ModuleNotFoundError:  # run with a Python that does not have acode installed
    raise SystemExit(
        "acode is not installed here: run `make demo-agent`, which installs it"
    ) from None

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
ACODE = Path(sys.executable).parent / "acode"
TASK = "Add email validation to src/login.py"
# Both are legal ends of a session: done, or a task the model could not finish.
ENDS = (0, 1)
# One answer can take minutes on a busy machine: llama.cpp's chatml-function-calling
# ignores max_tokens when the model may choose between a message and tool calls.
SERVER_WAIT = 900.0

LOGIN_PY = '''\
"""Logging users in."""


def login(email: str, password: str) -> bool:
    """True when the credentials are accepted."""
    if not password:
        return False
    return True
'''

CONFIG_TEMPLATE = """\
# Written by examples/run_demo_agent.py: llama.cpp's server with Gemma 3 270M, started by
# the demo. For real work point base_url and name at Ollama (http://localhost:11434/v1,
# `ollama pull llama3.2`), vLLM, LM Studio or a hosted endpoint (see docs/configuration.md).
model:
  base_url: {base_url}
  name: {name}
  temperature: 0
  seed: 42
  max_tokens: 256
  context_tokens: 2048
agent:
  max_turns: 3
  max_tasks: 3
  max_steps: 4
"""


def say(text: str = "") -> None:
    print(f"==> {text}" if text else "", flush=True)


def note(text: str) -> None:
    print(f"    {text}", flush=True)


# -- the model server ------------------------------------------------------------------------


def load_llama_server() -> ModuleType:
    """tests/support/llama_server.py, the model server helper the tests use too; the repository
    goes on the path, since it imports its neighbours in tests/support."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module("tests.support.llama_server")


# -- the workspace ---------------------------------------------------------------------------


def git(workspace: Path, *args: str) -> None:
    env = dict(os.environ)
    for role in ("AUTHOR", "COMMITTER"):  # whatever identity the person has, or none
        env.setdefault(f"GIT_{role}_NAME", "acode demo")
        env.setdefault(f"GIT_{role}_EMAIL", "demo@acode.invalid")
    done = subprocess.run(
        ["git", *args], cwd=workspace, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed in {workspace}:\n{done.stderr.strip()}")


def new_workspace(root: Path, name: str, base_url: str, model: str) -> Path:
    # One repository name for both runs: the model's prompt names it, and the two runs
    # are to ask the same questions.
    workspace = root / name / "shop"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "login.py").write_text(LOGIN_PY, encoding="utf-8")
    config = workspace / ".agent" / "config.yml"
    config.parent.mkdir()
    config.write_text(CONFIG_TEMPLATE.format(base_url=base_url, name=model), encoding="utf-8")
    git(workspace, "init", "-q")
    git(workspace, "add", "-A")
    git(workspace, "-c", "commit.gpgsign=false", "commit", "-q", "-m", "A login module")
    return workspace


# -- running acode ---------------------------------------------------------------------------


def acode(workspace: Path, *args: str) -> int:
    """Run acode in the workspace with this terminal attached; its exit status."""
    say(f"$ acode {' '.join(_quoted(args))}")
    return subprocess.run(
        [str(ACODE), *args], cwd=workspace, env=acode_env(), stdin=subprocess.DEVNULL, check=False
    ).returncode


def acode_env() -> dict[str, str]:
    env = dict(os.environ)
    # The model's run_command `python3` is then the Python acode runs on, whatever PATH holds.
    env["PATH"] = f"{ACODE.parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _quoted(args: Sequence[str]) -> list[str]:
    return [f'"{arg}"' if " " in arg else arg for arg in args]


def acode_json(workspace: Path, *args: str) -> Any:
    done = subprocess.run(
        [str(ACODE), *args, "--json"], cwd=workspace, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"acode {' '.join(args)} failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout)


def latest_session(workspace: Path) -> dict[str, Any] | None:
    sessions: list[dict[str, Any]] = acode_json(workspace, "session", "list")
    return sessions[0] if sessions else None


def completed_steps(workspace: Path, session: str) -> int:
    shown: dict[str, Any] = acode_json(workspace, "session", "show", session)
    return sum(1 for step in shown.get("steps", []) if step.get("status") == "completed")


def interrupt_after_first_answer(workspace: Path) -> int:
    """Start `acode run TASK`, send it SIGINT (as Ctrl+C does) once a step is recorded as
    completed, and return its exit status."""
    say(f'$ acode run "{TASK}"   (Ctrl+C comes once the first model answer is recorded)')
    # Its own process group: the SIGINT is for acode alone, not for this script.
    proc = subprocess.Popen(
        [str(ACODE), "run", TASK],
        cwd=workspace,
        env=acode_env(),
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + SERVER_WAIT
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            session = latest_session(workspace)
            if session is not None and completed_steps(workspace, session["short_id"]) > 0:
                say("Ctrl+C (SIGINT to acode)")
                proc.send_signal(signal.SIGINT)
                break
            time.sleep(1.0)  # each look starts two acode processes: keep the cores free
        return proc.wait(SERVER_WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_until_idle(base_url: str) -> None:
    """llama.cpp's server finishes the answer the paused run no longer waits for, and
    answers nothing else meanwhile (GET /models included, which acode resume checks)."""
    import urllib.request

    say("Waiting for the model server to finish the answer the paused run left behind...")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    started = time.monotonic()
    try:
        with opener.open(f"{base_url}/models", timeout=SERVER_WAIT):
            pass
    except OSError as exc:
        raise SystemExit(f"the model server at {base_url} stopped answering: {exc}") from None
    note(f"idle after {time.monotonic() - started:.1f} s")


def login_py(workspace: Path) -> str:
    return (workspace / "src" / "login.py").read_text(encoding="utf-8")


# -- the stages ------------------------------------------------------------------------------


def uninterrupted(root: Path, base_url: str, model: str) -> tuple[int, Path]:
    workspace = new_workspace(root, "uninterrupted", base_url, model)
    say(f"1. An uninterrupted session in {workspace} (a git repository with src/login.py)")
    return acode(workspace, "run", TASK), workspace


def interrupted(root: Path, base_url: str, model: str) -> tuple[int, Path]:
    workspace = new_workspace(root, "interrupted", base_url, model)
    say(f"2. The same task in a fresh copy, {workspace}, interrupted and resumed")
    code = interrupt_after_first_answer(workspace)
    session = latest_session(workspace)
    if code == EXIT_INTERRUPTED and session is not None:
        say("Paused (exit status 130). Every model answer and tool call that finished is")
        note("recorded; acode resume continues without asking the model anything again.")
        wait_until_idle(base_url)
        code = acode(workspace, "resume", session["short_id"])
    elif code in ENDS:
        say(f"The session ended (exit status {code}) before the Ctrl+C landed: nothing to resume.")
    return code, workspace


def model_answers(workspace: Path, session: str) -> list[object]:
    """What the model answered each recorded call of the session, in order: its text and
    its tool calls by name and arguments (their ids are the server's random choice)."""
    events: list[dict[str, Any]] = acode_json(workspace, "session", "history", session)
    answers: list[object] = []
    for event in events:
        if event["type"] != "step_completed" or event["payload"].get("kind") != "model":
            continue
        result = event["payload"]["result"]
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in result["tool_calls"]]
        answers.append((result["content"], calls))
    return answers


def report(workspace: Path, reference: Path) -> int:
    session, first = latest_session(workspace), latest_session(reference)
    if session is None or first is None:
        raise SystemExit(f"acode recorded no session in {workspace} or {reference}")
    short = session["short_id"]
    say("3. What was recorded")
    codes = [acode(workspace, "status", short), acode(workspace, "session", "history", short)]
    answers = model_answers(workspace, short)
    if answers == model_answers(reference, first["short_id"]):
        say(f"The model gave the interrupted session the same {len(answers)} answers as the")
        note("uninterrupted one: after the resume it was asked what it would have been asked.")
    else:
        say("The model answered the two sessions differently: llama.cpp reuses its cache")
        note("across requests, which can tip a tiny model's choice even at temperature 0.")
        note("That no answered request is ever sent again is what tests/agent/")
        note("test_real_model.py checks; compare `acode session history <id> --json`.")
    same = login_py(workspace) == login_py(reference)
    say(f"src/login.py {'equals' if same else 'DIFFERS from'} the uninterrupted session's.")
    say(f"The demo workspaces stay in {workspace.parent.parent}. Look around:")
    note(f"cd {workspace}")
    note(f"{ACODE} session history {short}")
    note("git log --stat")
    return max(codes)


def main(argv: Sequence[str] | None = None) -> int:
    if argv:
        raise SystemExit("usage: python examples/run_demo_agent.py  (no arguments)")
    if shutil.which("git") is None:
        raise SystemExit("the demo needs git: install it and run `make demo-agent` again")
    llama = load_llama_server()
    reason = llama.unavailable_reason()
    if reason is not None:
        raise SystemExit(reason)
    root = Path(tempfile.mkdtemp(prefix="acode-agent-demo-"))
    say("Starting llama.cpp's server with Gemma 3 270M (a tiny base model: it shows the")
    note("machinery, not good code; a task it fails ends the session with exit status 1)")
    try:
        with llama.LlamaServer() as server:
            note(f"serving {server.model} at {server.base_url}")
            first, reference = uninterrupted(root, server.base_url, server.model)
            second, workspace = interrupted(root, server.base_url, server.model)
            shown = report(workspace, reference)
    except RuntimeError as exc:  # the server would not start: its output says why
        raise SystemExit(str(exc)) from None
    except KeyboardInterrupt:
        say("Stopped.")
        return EXIT_INTERRUPTED
    say("Stopped the model server.")
    if first in ENDS and second in ENDS and shown == 0:
        return 0
    say(f"Unexpected exit statuses: run {first}, resumed run {second}, status/history {shown}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
