"""Running an engine's turn for a work session: which adapter, which directory, and the
environment that lets the engine call back into acode with its cookie (and, the key being
kept from it, through the turn's breadcrumb inbox: acode.work.inbox)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from acode.domain.config import EngineConfig
from acode.domain.work import WorkSession
from acode.engine.lifecycle import Workspace
from acode.errors import ConfigError
from acode.work.engine_output import EngineTurn
from acode.work.engines import check_settings, resume_turn, start_turn
from acode.work.inbox import INBOX_ENV, breadcrumb_inbox
from acode.work.sessions import COOKIE_ENV, TurnRunner

__all__ = ["ACODE_COMMAND", "turn_runner"]

# How an engine calls acode back (breadcrumbs): this interpreter, so the same acode.
ACODE_COMMAND = (sys.executable, "-m", "acode")
_AGENT_TIMEOUT_SECONDS = 3600.0


def turn_runner(ws: Workspace) -> TurnRunner:
    return _Runner(ws)


class _Runner:
    """The engines as the workspace's .agent/config.yml sets them up."""

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws

    def check(self, engine: str) -> None:
        if engine != "agent":  # acode's own loop needs no engines.agent entry
            check_settings(engine, _settings(self._ws, engine))

    def __call__(
        self, engine: str, prompt: str, resume: str | None, wsession: WorkSession
    ) -> EngineTurn:
        ws = self._ws
        settings = None if engine == "agent" else _settings(ws, engine)
        with breadcrumb_inbox(ws, wsession.id) as inbox:
            env = {**_engine_env(wsession), INBOX_ENV: inbox}
            if settings is None:
                return _agent_turn(ws, prompt, resume, env)
            return _engine_turn(ws, engine, settings, prompt, resume, wsession, env)


def _engine_turn(
    ws: Workspace,
    engine: str,
    settings: EngineConfig,
    prompt: str,
    resume: str | None,
    wsession: WorkSession,
    env: dict[str, str],
) -> EngineTurn:
    history = ws.paths.state_dir / "work" / wsession.id / "aider.chat.history.md"
    history.parent.mkdir(parents=True, exist_ok=True)
    cwd = Path(wsession.cwd)
    if resume is None:
        return start_turn(
            engine,
            settings,
            prompt=prompt,
            cwd=cwd,
            history_file=history,
            new_session_id=str(uuid.uuid4()),
            extra_env=env,
        )
    return resume_turn(
        engine,
        settings,
        session_id=resume,
        prompt=prompt,
        cwd=cwd,
        history_file=history,
        extra_env=env,
    )


def _settings(ws: Workspace, engine: str) -> EngineConfig:
    # Only `command` can be missing: the others have defaults (domain.config.DEFAULT_ENGINES).
    config: EngineConfig | None = ws.config.engines.get(engine)
    if config is None:
        raise ConfigError(
            f"engines.{engine}.command is not set: acode has no command to run the "
            f"{engine} engine with",
            hint=f"set it in .agent/config.yml, e.g. engines: {{{engine}: "
            '{command: "my-agent --session {session_id} --prompt {prompt}"}}',
        )
    return config


def _engine_env(wsession: WorkSession) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    return {
        COOKIE_ENV: wsession.id,
        # `acode` on PATH is this installation's, whatever the engine's shell finds first.
        "PATH": f"{bin_dir}{os.pathsep}{path}" if path else bin_dir,
    }


def _agent_turn(ws: Workspace, prompt: str, resume: str | None, env: dict[str, str]) -> EngineTurn:
    """acode's own agent loop as the engine: its session id is the engine's. A finished
    agent session takes no new prompt, so resuming one counts as forgotten."""
    if resume is None:
        argv = [*ACODE_COMMAND, "run", prompt, "--json", "--workspace", str(ws.root)]
    else:
        argv = [*ACODE_COMMAND, "resume", resume, "--mode", "autopilot", "--json"]
        argv += ["--workspace", str(ws.root)]
    try:
        done = subprocess.run(
            argv,
            # acode itself, which signs its own session with the key: the one child that
            # gets the caller's whole environment. Its steps and commands do not.
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_AGENT_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return EngineTurn(
            session_id=resume,
            ok=False,
            forgotten=False,
            text="",
            detail="the agent did not finish in time",
        )
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    started = next((r["id"] for r in records if r.get("event") == "started"), None)
    last = records[-1] if records else {}
    text = str(last.get("message") or done.stderr.strip())[-4000:]
    if resume is not None and done.returncode in (14, 15):
        return EngineTurn(
            session_id=None,
            ok=False,
            forgotten=True,
            text=text,
            detail=f"agent session {resume} cannot continue",
        )
    session = started or resume
    if session is None:  # `acode run` stopped before its session began: its error says why
        why = text.splitlines()[0] if text else "no output"
        detail = f"acode run failed (exit {done.returncode}): {why.removeprefix('error ')}"
    else:
        detail = f"acode agent session {session}: exit {done.returncode}"
    return EngineTurn(
        session_id=session, ok=done.returncode == 0, forgotten=False, text=text, detail=detail
    )
