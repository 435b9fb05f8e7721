"""Starting and resuming an engine's own session: one turn of a real engine CLI.

Each engine is one record of a table (how to start, how to resume, how to read what it
printed, how to install it); there is no class per engine. An engine runs in the work
session's directory with stdin closed (Codex reads a non-terminal stdin to its end) and
the caller's environment, which holds the engine's own settings (CODEX_HOME,
ANTHROPIC_BASE_URL, HOME, ...), less acode's own secrets (the checkpoint key, the remote's
URL: acode.security.child_env). acode adds only what keeps a turn from hanging:

- codex: ``-c features.unbounded_connection_retries=false``. By default codex retries a
  dead server forever; with this it gives up after 5 retries. The ``-c`` form
  is used rather than ``--disable``, which fails on a codex that no longer knows the feature.
  Per-provider retry counts (``model_providers.<id>.request_max_retries``) are the user's to
  set: acode does not know the provider's id, and a built-in provider cannot be overridden.
- claude: ``CLAUDE_CODE_MAX_RETRIES=2`` unless the caller set it (the default retries a
  dead server for minutes; 2 give up in seconds).
- aider: ``COLUMNS`` wide, so that its answer is printed unwrapped. It retries a dead server
  for over a minute and then exits 0, which only its output gives away
  (engine_output.parse_aider); ``timeout_seconds`` bounds it. Aider has no session id: its
  session is ``history_file`` (resume_turn ignores ``session_id``), and a resume whose
  history file is gone is forgotten without running aider.

A turn that outlives ``timeout_seconds`` has its whole process group killed, and the
processes it started that left the group. An engine gets SIGTERM when the process that
started it dies (Linux), so a killed acode leaves no engine writing into a session that a
resume is about to continue.

How long each engine took to give up is in docs/benchmarks.md, "Figures behind design choices".
"""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from acode.domain.config import ENGINE_CLIS, EngineConfig
from acode.errors import ConfigError, EnvironmentValidationError, UsageError
from acode.security.child_env import child_environment
from acode.system.process import die_with_parent_hook
from acode.work.engine_output import (
    EngineTurn,
    parse_aider,
    parse_claude,
    parse_codex,
    parse_command,
)

if TYPE_CHECKING:
    import subprocess

__all__ = [
    "EngineTurn",
    "check_settings",
    "resume_turn",
    "start_turn",
]


# Placeholders in an argv template; "{args}" (a whole word) expands to EngineConfig.args.
_ARGS, _PROMPT, _ID, _HISTORY = "{args}", "{prompt}", "{session_id}", "{history}"
_PLACEHOLDER = re.compile(r"\{(prompt|session_id|history|cwd)\}")
_Parse = Callable[[str, str, int, str | None], EngineTurn]


@dataclass(frozen=True)
class _Engine:
    start: tuple[str, ...]
    resume: tuple[str, ...]
    parse: _Parse
    env_defaults: Mapping[str, str]  # set unless the caller's environment has them
    env_forced: Mapping[str, str]  # always set: the parser depends on them
    install: str  # how a person gets the executable
    session_in_history: bool = False  # the session is the history file (aider)


_CODEX_COMMON = (
    "--json",
    "--skip-git-repo-check",
    "-c",
    "features.unbounded_connection_retries=false",
)
_CLAUDE_COMMON = ("-p", "--output-format", "json")
_AIDER_COMMON = (
    "--yes-always",
    "--no-git",
    "--no-check-update",
    "--no-analytics",
    "--no-show-model-warnings",
    "--no-pretty",
    "--no-show-release-notes",
    "--no-stream",
    "--chat-history-file",
    _HISTORY,
    # Else aider writes .aider.input.history into the work tree (its git root).
    "--input-history-file",
    _HISTORY + ".input",
)

_ENGINES: dict[str, _Engine] = {
    # "--" keeps a prompt that starts with "-" from being read as an option.
    "codex": _Engine(
        start=("exec", *_CODEX_COMMON, _ARGS, "--", _PROMPT),
        resume=("exec", "resume", *_CODEX_COMMON, _ARGS, "--", _ID, _PROMPT),
        parse=lambda out, err, rc, asked: parse_codex(out, err, rc, asked=asked),
        env_defaults={},
        env_forced={},
        install="npm i -g @openai/codex",
    ),
    "claude": _Engine(
        start=(*_CLAUDE_COMMON, "--session-id", _ID, _ARGS, "--", _PROMPT),
        resume=(*_CLAUDE_COMMON, "--resume", _ID, _ARGS, "--", _PROMPT),
        parse=lambda out, err, rc, asked: parse_claude(out, err, rc, asked=asked),
        env_defaults={"CLAUDE_CODE_MAX_RETRIES": "2"},
        env_forced={},
        install="npm i -g @anthropic-ai/claude-code",
    ),
    # --message=PROMPT: argparse would take a prompt starting with "-" for an option.
    "aider": _Engine(
        start=(*_AIDER_COMMON, _ARGS, "--message=" + _PROMPT),
        resume=(*_AIDER_COMMON, "--restore-chat-history", _ARGS, "--message=" + _PROMPT),
        parse=lambda out, err, rc, asked: parse_aider(out, err, rc, asked=asked),
        env_defaults={},
        # Aider prints through Rich, which wraps at 80 columns when stdout is no terminal:
        # the answer is read back from stdout, so it must come out unwrapped.
        env_forced={"COLUMNS": "100000"},
        install="pipx install aider-chat",
        session_in_history=True,
    ),
}


def start_turn(
    engine: str,
    settings: EngineConfig,
    *,
    prompt: str,
    cwd: Path,
    history_file: Path,
    new_session_id: str,
    extra_env: Mapping[str, str] | None = None,
) -> EngineTurn:
    """Start a new engine session with ``prompt`` and run its first turn.

    ``new_session_id`` is the id acode chose: claude is told to use it (so a turn killed
    midway still has a known id) and ``command`` gets it; codex picks its own; aider has none.
    """
    _check_name(engine)
    if engine == "command":
        return _command_turn(
            settings, prompt, cwd, given_id="", session_id=new_session_id, extra_env=extra_env
        )
    spec = _ENGINES[engine]
    argv = _fill(spec.start, settings, prompt, new_session_id, history_file)
    return _turn(engine, settings, spec, argv, cwd, asked=None, extra_env=extra_env)


def resume_turn(
    engine: str,
    settings: EngineConfig,
    *,
    session_id: str,
    prompt: str,
    cwd: Path,
    history_file: Path,
    extra_env: Mapping[str, str] | None = None,
) -> EngineTurn:
    """Continue the engine's session ``session_id`` with ``prompt``.

    ``EngineTurn.forgotten`` says that the engine does not know the session (any more, or
    from this directory): the caller then starts a new one with the context rebuilt.
    """
    _check_name(engine)
    if engine == "command":
        return _command_turn(
            settings, prompt, cwd, given_id=session_id, session_id=session_id, extra_env=extra_env
        )
    spec = _ENGINES[engine]
    if spec.session_in_history and not _has_content(history_file):
        detail = f"{engine}: its chat history {history_file} is missing or empty"
        return EngineTurn(session_id=None, ok=False, forgotten=True, text=detail, detail=detail)
    argv = _fill(spec.resume, settings, prompt, session_id, history_file)
    return _turn(engine, settings, spec, argv, cwd, asked=session_id, extra_env=extra_env)


def check_settings(engine: str, settings: EngineConfig) -> None:
    """Refuse what no turn of ``engine`` could run with: an unknown engine, a ``command``
    template that is no command line. A missing executable is found by the turn, like
    any other reason it cannot start."""
    _check_name(engine)
    if engine == "command":
        _command_words(settings)


# -- running -----------------------------------------------------------------------------------


def _check_name(engine: str) -> None:
    if engine not in ENGINE_CLIS:
        raise UsageError(
            f"unknown engine {engine!r}",
            hint=f"use one of: {', '.join(ENGINE_CLIS)} (or 'agent', acode's own loop)",
        )


def _has_content(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def _fill(
    template: tuple[str, ...],
    settings: EngineConfig,
    prompt: str,
    session_id: str,
    history_file: Path,
) -> list[str]:
    values = {"prompt": prompt, "session_id": session_id, "history": str(history_file.resolve())}
    argv = [settings.command]
    for token in template:
        if token == _ARGS:
            argv.extend(settings.args)
        else:
            argv.append(_substitute(token, values))
    return argv


def _substitute(word: str, values: Mapping[str, str]) -> str:
    """Fill the placeholders of ``word`` in one pass, so that a prompt which itself
    contains "{session_id}" stays as it was written."""
    return _PLACEHOLDER.sub(lambda match: values.get(match.group(1), match.group(0)), word)


def _turn(
    engine: str,
    settings: EngineConfig,
    spec: _Engine,
    argv: list[str],
    cwd: Path,
    *,
    asked: str | None,
    extra_env: Mapping[str, str] | None,
) -> EngineTurn:
    argv[0] = _executable(engine, settings.command, spec.install)
    env = _environment(extra_env)
    for name, value in spec.env_defaults.items():
        env.setdefault(name, value)
    env.update(spec.env_forced)
    outcome = _run(argv, cwd, env, settings.timeout_seconds)
    if isinstance(outcome, str):
        return EngineTurn(
            session_id=None,
            ok=False,
            forgotten=False,
            text=f"{engine}: {outcome}",
            detail=f"{engine} {outcome}",
        )
    stdout, stderr, returncode = outcome
    return spec.parse(stdout, stderr, returncode, asked)


def _environment(extra_env: Mapping[str, str] | None) -> dict[str, str]:
    """This process's environment with the caller's additions (a work session's cookie),
    without acode's secrets."""
    return child_environment(extra_env)


def _command_turn(
    settings: EngineConfig,
    prompt: str,
    cwd: Path,
    *,
    given_id: str,
    session_id: str,
    extra_env: Mapping[str, str] | None,
) -> EngineTurn:
    # Placeholders are filled in per word after splitting, so a prompt stays one argument
    # whatever it contains: no shell ever sees it.
    values = {"prompt": prompt, "session_id": given_id, "cwd": str(cwd)}
    argv = [_substitute(word, values) for word in _command_words(settings)]
    argv[0] = _executable("command", argv[0], "a program on PATH, or a path to one")
    outcome = _run([*argv, *settings.args], cwd, _environment(extra_env), settings.timeout_seconds)
    if isinstance(outcome, str):
        return EngineTurn(
            session_id=None,
            ok=False,
            forgotten=False,
            text=f"command: {outcome}",
            detail=f"command {outcome}",
        )
    stdout, stderr, returncode = outcome
    # A timeout or a program that cannot start (above) is no forgotten session: a new one
    # would fail the same way.
    asked = given_id or None
    return parse_command(stdout, stderr, returncode, session_id=session_id, asked=asked)


def _command_words(settings: EngineConfig) -> list[str]:
    try:
        words = shlex.split(settings.command)
    except ValueError as exc:
        raise ConfigError(
            f"engines.command.command is not a valid command line: {exc}",
            hint="quote it in .agent/config.yml as a shell would, e.g. 'my-agent --ask {prompt}'",
        ) from exc
    if not words:
        raise ConfigError(
            "engines.command.command is empty",
            hint="set engines.command.command in .agent/config.yml, e.g. 'my-agent --ask {prompt}'",
        )
    return words


def _executable(engine: str, command: str, install: str) -> str:
    found = shutil.which(command)
    if found is None:
        raise EnvironmentValidationError(
            f"engine {engine!r}: the command {command!r} is not installed or not executable",
            hint=f"install it ({install}), or set engines.{engine}.command in "
            ".agent/config.yml to its path",
        )
    return found


def _run(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float
) -> tuple[str, str, int] | str:
    """Run one engine process in its own process group: (stdout, stderr, exit status),
    or why it did not start or finish."""
    import subprocess

    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            start_new_session=True,  # one killpg reaches the engine's own children too
            # The hook is one pre-resolved prctl call with no Python lock to take, the case
            # where a preexec_fn in a threaded process is safe.
            preexec_fn=die_with_parent_hook(),  # noqa: PLW1509
        )
    except OSError as exc:  # exec refused it (no #! line, another CPU), or cwd is gone
        return f"could not be started: {exc.strerror} ({exc.filename or argv[0]})"
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return f"timed out after {timeout:g} s; its process group was killed"
    except BaseException:  # Ctrl+C, SIGTERM's pause: the engine must not run on unattended
        _kill(proc)
        raise
    return stdout, stderr, proc.returncode


def _kill(proc: subprocess.Popen[str]) -> None:
    """Kill the engine's process group and its descendants that left the group (an
    engine's tool runner or language server in a session of its own)."""
    import subprocess

    from acode.system.process_table import kill_tree

    kill_tree(proc.pid)
    # A process that is no longer its descendant (a daemon, adopted by init) may still
    # hold the pipes: do not wait for it.
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=5)
