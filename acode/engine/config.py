"""Reading ``.agent/config.yml`` from a workspace, with environment overrides.

Environment variables (an empty value counts as unset):

``ACODE_MODEL_BASE_URL``
    replaces ``model.base_url``, e.g. to point one run at another server.
``ACODE_MODEL_NAME``
    replaces ``model.name``.
``ACODE_SYNC_DSN``
    replaces ``sync.remote``: the PostgreSQL URL of the mirror (it may hold a password,
    which is better kept out of a file).
``ACODE_FLEET_URL``
    replaces ``fleet.url``: the PostgreSQL URL of the work queue (`acode queue`, `acode worker`).
``ACODE_STORE_URL``
    replaces ``store.url``: the PostgreSQL database that stores the sessions (its password
    too is better kept out of a file).
``ACODE_STORE_WORKSPACE``
    replaces ``store.workspace``: the workspace's name in that database.
``ACODE_HANDOFF_REMOTE``
    replaces ``handoff.remote``: the git remote a session's work tree is pushed to. A fleet
    worker sets both for its sessions, whose clones' files are the repository's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from acode.domain.config import AcodeConfig, override, parse_config
from acode.errors import ConfigError

__all__ = [
    "CONFIG_RELATIVE",
    "ENV_OVERRIDES",
    "SETTABLE",
    "load_config",
    "set_setting",
    "write_default_config",
]

CONFIG_RELATIVE = Path(".agent/config.yml")

# environment variable -> (section, key) it replaces
ENV_OVERRIDES: Mapping[str, tuple[str, str]] = {
    "ACODE_MODEL_BASE_URL": ("model", "base_url"),
    "ACODE_MODEL_NAME": ("model", "name"),
    "ACODE_SYNC_DSN": ("sync", "remote"),
    "ACODE_FLEET_URL": ("fleet", "url"),
    "ACODE_STORE_URL": ("store", "url"),
    "ACODE_STORE_WORKSPACE": ("store", "workspace"),
    "ACODE_HANDOFF_REMOTE": ("handoff", "remote"),
    "ACODE_FLEET_LEASE_SECONDS": ("fleet", "lease_seconds"),
}

# Every key with its default, so that a person sees what can be changed. A test keeps it
# equal to AcodeConfig().
_DEFAULT_CONFIG = """\
# acode settings for this workspace. Every key is optional; deleting one restores its
# default. Reference: docs/configuration.md

model:
  # Any OpenAI-compatible server (Ollama, llama.cpp, vLLM, OpenAI, ...).
  base_url: http://localhost:11434/v1   # env ACODE_MODEL_BASE_URL overrides
  name: llama3.2                        # env ACODE_MODEL_NAME overrides
  temperature: 0.0                      # 0..2; 0 keeps runs reproducible
  max_tokens: 1024
  api_key_env: null                     # NAME of the variable holding the key, e.g. OPENAI_API_KEY
  timeout_seconds: 120
  seed: null                            # a whole number asks the server for repeatable sampling
  context_tokens: 8192                  # context window; longer conversations are compacted
  retries: 3                            # times a request turned away as busy (429, 503) is resent

agent:                                  # `acode run "task"`
  max_turns: 12                         # model calls per task before the task fails
  plan_attempts: 3                      # invalid plans are sent back this many times at most
  max_tasks: 12                         # a plan with more tasks is refused
  max_steps: 8                          # ... or with a task of more steps
  approve_plan: false                   # ask before executing the plan (also --approve-plan)

pricing: {}                             # USD per million tokens, per model name, e.g.
                                        #   gpt-4o: {input: 2.5, output: 10}

engines:                                # AI engine CLIs of `acode work` (docs/work-sessions.md)
  claude: {command: claude, args: [], timeout_seconds: 1800}
  codex: {command: codex, args: [], timeout_seconds: 1800}
  aider: {command: aider, args: [], timeout_seconds: 1800}

ai_stacking_mode: managed               # managed: acode starts and resumes the engines
                                        # handsoff: acode records, you run the engine
work_engine: agent                      # engine of `acode work task` without --engine

resume:
  in_progress_strategy: rollback        # rollback | retry | prompt
  changed_files_action: prompt          # prompt | continue | abort
  validate_environment: true
  validation_timeout_seconds: 2         # the whole check, model server included

run:
  default_timeout_seconds: 600          # for `run` steps without their own timeout
  max_output_bytes: 65536               # output kept per `run` step

sync:
  remote: null                          # PostgreSQL URL of the team mirror; null = local only
                                        # (env ACODE_SYNC_DSN overrides)

fleet:                                  # `acode queue` and `acode worker` (docs/fleet.md)
  url: null                             # PostgreSQL URL of the queue; null = store.url,
                                        # else sync.remote
                                        # (env ACODE_FLEET_URL overrides)
  lease_seconds: 30                     # a worker that stops renewing loses its items after this,
                                        # and a session on store.url its lease

store:
  url: null                             # postgresql://USER@HOST:PORT/DATABASE keeps the
                                        # sessions there (docs/fleet.md); null = the SQLite
                                        # file .agent/state/acode.db
                                        # (env ACODE_STORE_URL overrides)
  workspace: null                       # this workspace's name in that database, the same
                                        # in every clone of the repository (hand-off to
                                        # another machine); null = its absolute path

handoff:                                # the work tree travels by git (docs/fleet.md)
  remote: null                          # a git remote of the workspace, e.g. origin; null = off
  push: true                            # false: pushed only by `acode sync`

log:                                    # the JSON log, .agent/state/logs/acode.jsonl
  max_bytes: 10485760                   # a file's size before it rotates
  keep: 5                               # rotated files kept (acode.jsonl.1 ...)

retention:                              # applied as sessions end; `acode session prune` too
  completed_days: null                  # completed sessions older than this many days
  failed_days: null                     # failed ones
  cancelled_days: null                  # cancelled and discarded ones
  max_state_bytes: null                 # prune the oldest until the state fits (bytes)
                                        # null everywhere: nothing is pruned (the default)

durability: full                        # full: fsync every commit | normal: faster, may lose
                                        # the last steps on power loss (never on a crash)
"""


def load_config(workspace: Path, *, environ: Mapping[str, str] | None = None) -> AcodeConfig:
    """The workspace's settings: the file (defaults when absent), then the environment."""
    path = workspace / CONFIG_RELATIVE
    text = _read(path)
    cfg = AcodeConfig() if text is None else parse_config(_load_yaml(text, str(path)), str(path))
    return _apply_environment(cfg, os.environ if environ is None else environ)


def _read(path: Path) -> str | None:
    """The text of the config file; None when there is none."""
    from acode.system.user_files import read_user_file

    try:
        return read_user_file(path).decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else exc
        raise ConfigError(
            f"{path}: cannot read the configuration: {reason}",
            hint=f"make {path} a readable UTF-8 text file of at most 1 MiB, or delete it "
            "to use the defaults",
        ) from exc


def write_default_config(workspace: Path) -> Path:
    """Write the commented default settings unless a config file already exists."""
    path = workspace / CONFIG_RELATIVE
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written aside and linked into place: a crash never leaves a half-written config, and
    # a file that appeared meanwhile is never overwritten (link refuses an existing target).
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("w", encoding="utf-8") as handle:
            handle.write(_DEFAULT_CONFIG)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(temporary, path)
    except FileExistsError:
        pass
    finally:
        temporary.unlink(missing_ok=True)
    return path


def _load_yaml(text: str, source: str) -> object:
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(node, source)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise ConfigError(
            f"{source}{where}: invalid YAML: {exc.problem or exc.context}",
            hint=f"fix the syntax at that line of {source} (indent with spaces, "
            "quote values containing ': ' or '#'), or delete the file to use the defaults",
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"{source}: invalid YAML: {exc}",
            hint=f"fix the syntax of {source}, or delete the file to use the defaults",
        ) from exc
    except RecursionError as exc:  # the pure-Python parser recurses once per level
        raise ConfigError(
            f"{source}: lists or mappings nested too deeply (the settings need three levels)",
            hint=f"fix {source}, or delete the file to use the defaults",
        ) from exc
    finally:
        loader.dispose()


def _refuse_duplicate_keys(root: Any, source: str) -> None:
    # YAML loaders silently keep the last of two equal keys; a person who wrote both meant one.
    # Each node once: aliases make the tree a graph, and a walk of every path through nine
    # lists of nine aliases ("billion laughs") would never end.
    import yaml

    pending, seen = [root], set()
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            pending.extend(node.value)
        if not isinstance(node, yaml.MappingNode):
            continue
        first: dict[object, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            line = key_node.start_mark.line + 1
            if key is not None and key in first:
                raise ConfigError(
                    f"{source}:{line}: duplicate key {key!r} (first set on line {first[key]})",
                    hint=f"keep one of the two {key!r} entries in {source}",
                )
            if key is not None:
                first[key] = line
            pending.append(value_node)


def _apply_environment(cfg: AcodeConfig, environ: Mapping[str, str]) -> AcodeConfig:
    for variable, (section, key) in ENV_OVERRIDES.items():
        text = environ.get(variable, "")
        if not text:
            continue
        try:  # the same rules as the file, with an error that names the variable
            value = _as_default_type(getattr(getattr(cfg, section), key), text)
            cfg = override(cfg, section, key, value, f"${variable}")
        except ConfigError as exc:
            raise ConfigError(
                exc.message, hint=f"correct or unset the environment variable {variable}"
            ) from exc
    return cfg


def _as_default_type(default: object, text: str) -> object:
    """A variable's text as the number the file would hold where the key is a number
    (``ACODE_FLEET_LEASE_SECONDS=3``); text that is no number stays text, for the key's
    own error."""
    if isinstance(default, bool) or not isinstance(default, int | float):
        return text
    try:
        return float(text) if isinstance(default, float) or "." in text else int(text)
    except ValueError:
        return text


# Settings `acode settings` may change: top-level scalars, one line each in the file.
SETTABLE: Mapping[str, str] = {
    "ai_stacking_mode": "managed: acode starts and resumes engines | handsoff: you run them",
    "work_engine": "engine of `acode work task` without --engine",
    "durability": "full: fsync every commit | normal: faster, may lose the last steps",
}


def set_setting(workspace: Path, key: str, value: str) -> AcodeConfig:
    """Write ``key: value`` into the workspace's config file (keeping every other line and
    comment), after checking that the whole file is still valid."""
    import re

    if key not in SETTABLE:
        raise ConfigError(
            f"{key}: not a setting `acode settings` changes; it changes {', '.join(SETTABLE)}",
            hint="edit .agent/config.yml for the others (docs/configuration.md)",
        )
    try:  # the value alone first: its error names the setting, not the whole file
        parse_config({key: value}, "acode settings set")
    except ConfigError as exc:
        raise ConfigError(
            exc.message, hint="give one of the values named; nothing was written"
        ) from exc
    path = workspace / CONFIG_RELATIVE
    text = _read(path) or ""
    line = f"{key}: {value}"
    pattern = re.compile(rf"^{re.escape(key)}:[^\n]*$", re.MULTILINE)
    if pattern.search(text):
        updated = pattern.sub(line, text, count=1)
    else:
        updated = text + ("" if text.endswith("\n") or not text else "\n") + line + "\n"
    config = parse_config(_load_yaml(updated, str(path)), f"{path} (with {line})")
    from acode.system.files import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, updated.encode("utf-8"))
    return config
