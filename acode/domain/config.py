"""The settings of a workspace (``.agent/config.yml``) as values, and their validation.

Pure: this module sees only the mapping YAML produced. Reading the file and applying
environment overrides happen in ``acode.engine.config``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple

from acode.domain.durations import TIMEOUT_RULE, is_timeout
from acode.errors import ConfigError

__all__ = [
    "DEFAULT_ENGINES",
    "ENGINE_CLIS",
    "ENGINE_NAMES",
    "AcodeConfig",
    "AgentSettings",
    "EngineConfig",
    "FleetSettings",
    "HandoffSettings",
    "LogSettings",
    "ModelSettings",
    "Price",
    "ResumeSettings",
    "RetentionSettings",
    "RunSettings",
    "StoreSettings",
    "SyncSettings",
    "config_dict_hash",
    "config_hash",
    "config_to_dict",
    "mask_credentials",
    "override",
    "parse_config",
    "with_overrides",
]


@dataclass(frozen=True)
class ModelSettings:
    """The OpenAI-compatible chat server and how to call it (``model:``)."""

    base_url: str = "http://localhost:11434/v1"
    name: str = "llama3.2"
    temperature: float = 0.0
    max_tokens: int = 1024
    api_key_env: str | None = None
    timeout_seconds: float = 120.0
    seed: int | None = None
    context_tokens: int = 8192
    retries: int = 3  # a chat request the server turns away as busy (429, 503) is sent again


@dataclass(frozen=True)
class AgentSettings:
    """How `acode run "task"` drives the model."""

    max_turns: int = 12
    plan_attempts: int = 3
    max_tasks: int = 12
    max_steps: int = 8
    approve_plan: bool = False


@dataclass(frozen=True)
class EngineConfig:
    """How to start one AI engine CLI of a work session (``engines.<name>``)."""

    command: str  # the executable ("codex", "claude", "aider", or a path); "command": a template
    args: tuple[str, ...] = ()  # extra arguments, put before the prompt on start and resume
    timeout_seconds: float = 1800.0


# The engines a work session can drive: the CLIs configured under ``engines.<name>``, and
# "agent", acode's own loop, which needs no entry.
ENGINE_NAMES: Final = ("claude", "codex", "aider", "command", "agent")
ENGINE_CLIS: Final = tuple(name for name in ENGINE_NAMES if name != "agent")
DEFAULT_ENGINES: Final[Mapping[str, EngineConfig]] = {
    "claude": EngineConfig("claude"),
    "codex": EngineConfig("codex"),
    "aider": EngineConfig("aider"),
}


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens of one model."""

    input: float
    output: float


@dataclass(frozen=True)
class ResumeSettings:
    """What resume does with an interrupted step and with changed files (``resume:``)."""

    in_progress_strategy: Literal["rollback", "retry", "prompt"] = "rollback"
    changed_files_action: Literal["prompt", "continue", "abort"] = "prompt"
    validate_environment: bool = True
    validation_timeout_seconds: float = 2.0  # the whole check, model included (NFR-002)


@dataclass(frozen=True)
class RunSettings:
    """Limits of ``run`` steps (``run:``)."""

    default_timeout_seconds: float = 600.0
    max_output_bytes: int = 65536


@dataclass(frozen=True)
class SyncSettings:
    """The remote PostgreSQL that mirrors every event (``sync:``); None: none."""

    remote: str | None = None


@dataclass(frozen=True)
class FleetSettings:
    """The PostgreSQL queue of `acode queue` and `acode worker` (``fleet:``); a null
    ``url`` falls back to ``store.url``, then to ``sync.remote``."""

    url: str | None = None
    # A worker that stops renewing loses its items after this; a session on store.url,
    # its lease (acode.engine.leases).
    lease_seconds: float = 30.0


@dataclass(frozen=True)
class StoreSettings:
    """Where the workspace's sessions are stored (``store:``): None, the SQLite file
    .agent/state/acode.db; a ``postgresql://`` URL, that database (docs/fleet.md).
    ``workspace`` names the workspace in a shared store (None: its absolute path), so
    that the clones of one repository on several machines see the same sessions."""

    url: str | None = None
    workspace: str | None = None


@dataclass(frozen=True)
class HandoffSettings:
    """Where a session's work tree travels by git (``handoff:``): the git remote of the
    workspace that ``refs/acode/sessions/<id>`` is pushed to; None: recorded nowhere."""

    remote: str | None = None
    push: bool = True  # false: the ref is recorded, pushed only by `acode sync`


@dataclass(frozen=True)
class LogSettings:
    """The size of `.agent/state/logs/acode.jsonl` and how many old files stay (``log:``)."""

    max_bytes: int = 10 * 1024 * 1024
    keep: int = 5  # acode.jsonl.1 ... acode.jsonl.5; the oldest goes at the next rotation


@dataclass(frozen=True)
class RetentionSettings:
    """How long ended sessions stay, and how large the state may grow (``retention:``);
    None: no limit. What `acode session prune` removes when given no flags."""

    completed_days: int | None = None
    failed_days: int | None = None
    cancelled_days: int | None = None  # discarded sessions too: a person gave them up
    max_state_bytes: int | None = None

    @property
    def configured(self) -> bool:
        return any(
            v is not None
            for v in (
                self.completed_days,
                self.failed_days,
                self.cancelled_days,
                self.max_state_bytes,
            )
        )


@dataclass(frozen=True)
class AcodeConfig:
    """A workspace's settings, ``.agent/config.yml`` checked (docs/configuration.md)."""

    model: ModelSettings = field(default_factory=ModelSettings)
    resume: ResumeSettings = field(default_factory=ResumeSettings)
    run: RunSettings = field(default_factory=RunSettings)
    sync: SyncSettings = field(default_factory=SyncSettings)
    fleet: FleetSettings = field(default_factory=FleetSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    log: LogSettings = field(default_factory=LogSettings)
    handoff: HandoffSettings = field(default_factory=HandoffSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    # model name -> price; a model without an entry has no cost shown
    pricing: Mapping[str, Price] = field(default_factory=dict)
    # engine name -> how to run it; the defaults find each CLI on PATH
    engines: Mapping[str, EngineConfig] = field(default_factory=lambda: dict(DEFAULT_ENGINES))
    durability: Literal["full", "normal"] = "full"
    ai_stacking_mode: Literal["managed", "handsoff"] = "managed"
    work_engine: str = "agent"


# Returned by a rule's parser for a value it refuses (None is a valid value of some keys).
_INVALID: Final = object()


class _Rule(NamedTuple):
    """What one key accepts. ``echo`` is False where a wrong value may be a secret;
    ``mask`` shows a wrong value with what may be a secret in it masked."""

    expected: str
    parse: Callable[[object], object]  # the normalized value, or _INVALID
    echo: bool = True
    mask: Callable[[str], str] | None = None


def _as_int(value: object) -> int | None:
    # bool is a subclass of int, yet `max_tokens: true` is a mistake, not 1.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return number if math.isfinite(number) else None


def _number_between(low: float, high: float) -> _Rule:
    def parse(value: object) -> object:
        number = _as_number(value)
        return number if number is not None and low <= number <= high else _INVALID

    return _Rule(expected=f"a number between {low:g} and {high:g}", parse=parse)


def _timeout() -> _Rule:
    def parse(value: object) -> object:
        return float(value) if is_timeout(value) else _INVALID

    return _Rule(expected=TIMEOUT_RULE, parse=parse)


def _positive_int() -> _Rule:
    def parse(value: object) -> object:
        number = _as_int(value)
        return number if number is not None and number > 0 else _INVALID

    return _Rule(expected="a positive whole number", parse=parse)


def _count() -> _Rule:
    def parse(value: object) -> object:
        number = _as_int(value)
        return number if number is not None and number >= 0 else _INVALID

    return _Rule(expected="a whole number, 0 or more", parse=parse)


def _optional_positive_int() -> _Rule:
    def parse(value: object) -> object:
        number = _as_int(value)
        return value if value is None or (number is not None and number > 0) else _INVALID

    return _Rule(expected="a positive whole number, or null for no limit", parse=parse)


def _optional_int() -> _Rule:
    return _Rule(
        expected="a whole number or null",
        parse=lambda v: v if v is None or _as_int(v) is not None else _INVALID,
    )


def _is_text(value: object) -> bool:
    # Printable: no NUL, control or bidirectional character, no lone surrogate (a value
    # that was not UTF-8, which no record of the settings could hold).
    return isinstance(value, str) and bool(value.strip()) and value.isprintable()


def _text() -> _Rule:
    return _Rule(expected="a non-empty string", parse=lambda v: v if _is_text(v) else _INVALID)


def _optional_text() -> _Rule:
    return _Rule(
        expected="a non-empty string or null",
        parse=lambda v: v if v is None or _is_text(v) else _INVALID,
    )


# An http(s) URL with a host: a name or a bracketed IPv6 address, an optional port.
_HTTP_URL = re.compile(
    r"https?://(?:[^@/\s]*@)?(?:\[[0-9A-Za-z:.%]+\]|[^\[\]:/?#\s@]+)(?::(?P<port>\d{1,5}))?"
    r"(?:[/?#]\S*)?"
)


def _http_url() -> _Rule:
    def parse(value: object) -> object:
        if not isinstance(value, str) or not value.isprintable():
            return _INVALID
        match = _HTTP_URL.fullmatch(value)
        if match is None or (match["port"] is not None and not 0 < int(match["port"]) < 65536):
            return _INVALID
        return value

    return _Rule(expected="an http:// or https:// URL", parse=parse)


_STORE_SCHEMES = ("postgresql://", "postgres://")


def _store_url() -> _Rule:
    def parse(value: object) -> object:
        if value is None:
            return None
        # A "#" would start the URL's fragment, where what follows it is lost (a password
        # holding one writes it %23).
        text = str(value)
        ok = _is_text(value) and text.startswith(_STORE_SCHEMES) and not {" ", "#"} & set(text)
        return value if ok else _INVALID

    # A URL may carry a password: never echoed back into an error message.
    return _Rule(
        expected="a postgresql:// URL (postgresql://USER@HOST:PORT/DATABASE, a # in the "
        "password written %23) or null (null: the SQLite file .agent/state/acode.db)",
        parse=parse,
        echo=False,
    )


# A workspace's name in a shared store: never a path (a workspace without a name is
# known by its absolute path, which a name must not be taken for).
_WORKSPACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")


def _workspace_name() -> _Rule:
    return _Rule(
        expected="a name of letters, digits and . _ : @ - (at most 128, no /), such as "
        "the repository's: acme-api; or null (the workspace's absolute path)",
        parse=lambda v: (
            v if v is None or (_is_text(v) and _WORKSPACE_NAME.fullmatch(str(v))) else _INVALID
        ),
    )


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_var_name() -> _Rule:
    def parse(value: object) -> object:
        ok = value is None or (isinstance(value, str) and _ENV_NAME.fullmatch(value))
        return value if ok else _INVALID

    # People paste the key itself here; never echo it back into an error message.
    return _Rule(
        expected=(
            "the NAME of an environment variable holding the key (e.g. OPENAI_API_KEY), or null"
        ),
        parse=parse,
        echo=False,
    )


def _lease() -> _Rule:
    def parse(value: object) -> object:
        number = _as_number(value)
        return number if number is not None and 1 <= number <= 86400 else _INVALID

    return _Rule(expected="a number of seconds between 1 and 86400", parse=parse)


# A git remote's name as `git remote add` takes it, and nothing git could read as an
# option (`--upload-pack=...`), a URL or a path: the URL, with whatever credentials it
# holds, stays in git's own configuration and never in acode's.
_GIT_REMOTE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]*@")


def mask_credentials(text: str) -> str:
    """``text`` with the user and password of every URL in it masked."""
    return _CREDENTIALS.sub("***@", text)


def _git_remote() -> _Rule:
    def parse(value: object) -> object:
        if value is None:
            return None
        if not isinstance(value, str) or not _GIT_REMOTE.fullmatch(value) or ".." in value:
            return _INVALID
        return _INVALID if value.endswith((".", ".lock")) else value

    return _Rule(
        expected="the name of a git remote of the workspace (such as origin), or null; "
        "for a URL, add it first: git remote add NAME URL",
        parse=parse,
        mask=mask_credentials,
    )


def _boolean() -> _Rule:
    return _Rule(expected="true or false", parse=lambda v: v if isinstance(v, bool) else _INVALID)


def _one_of(*options: str) -> _Rule:
    return _Rule(
        expected="one of " + ", ".join(repr(o) for o in options),
        parse=lambda v: v if isinstance(v, str) and v in options else _INVALID,
    )


_SECTIONS: dict[str, tuple[type[Any], dict[str, _Rule]]] = {
    "model": (
        ModelSettings,
        {
            "base_url": _http_url(),
            "name": _text(),
            "temperature": _number_between(0, 2),
            "max_tokens": _positive_int(),
            "api_key_env": _env_var_name(),
            "timeout_seconds": _timeout(),
            "seed": _optional_int(),
            "context_tokens": _positive_int(),
            "retries": _count(),
        },
    ),
    "agent": (
        AgentSettings,
        {
            "max_turns": _positive_int(),
            "plan_attempts": _positive_int(),
            "max_tasks": _positive_int(),
            "max_steps": _positive_int(),
            "approve_plan": _boolean(),
        },
    ),
    "resume": (
        ResumeSettings,
        {
            "in_progress_strategy": _one_of("rollback", "retry", "prompt"),
            "changed_files_action": _one_of("prompt", "continue", "abort"),
            "validate_environment": _boolean(),
            "validation_timeout_seconds": _timeout(),
        },
    ),
    "run": (
        RunSettings,
        {"default_timeout_seconds": _timeout(), "max_output_bytes": _positive_int()},
    ),
    "sync": (SyncSettings, {"remote": _optional_text()}),
    "fleet": (FleetSettings, {"url": _optional_text(), "lease_seconds": _lease()}),
    "store": (StoreSettings, {"url": _store_url(), "workspace": _workspace_name()}),
    "log": (LogSettings, {"max_bytes": _positive_int(), "keep": _positive_int()}),
    "handoff": (HandoffSettings, {"remote": _git_remote(), "push": _boolean()}),
    "retention": (
        RetentionSettings,
        {
            "completed_days": _optional_positive_int(),
            "failed_days": _optional_positive_int(),
            "cancelled_days": _optional_positive_int(),
            "max_state_bytes": _optional_positive_int(),
        },
    ),
}
_TOP_LEVEL_SCALARS: dict[str, _Rule] = {
    "durability": _one_of("full", "normal"),
    "ai_stacking_mode": _one_of("managed", "handsoff"),
    "work_engine": _one_of(*ENGINE_NAMES),
}


def _show(value: object) -> str:
    """A value as the person wrote it in YAML, kept short."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _unknown_key(key: object, known: list[str]) -> str:
    import difflib  # only a config with a mistake in it needs it

    close = difflib.get_close_matches(str(key), known, n=1) if isinstance(key, str) else []
    suggestion = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown key{suggestion}; known keys: {', '.join(known)}"


def _check(rule: _Rule, value: object, where: str, problems: list[str]) -> object:
    parsed = rule.parse(value)
    if parsed is not _INVALID:
        return parsed
    if rule.mask is not None and isinstance(value, str):
        value = rule.mask(value)
    got = f", got {_show(value)}" if rule.echo else " (value not shown: it may be a secret)"
    problems.append(f"{where}: expected {rule.expected}{got}")
    return None


def _parse_section(name: str, data: object, problems: list[str]) -> Any:
    cls, rules = _SECTIONS[name]
    if data is None:  # `model:` with nothing under it
        return cls()
    if not isinstance(data, Mapping):
        problems.append(f"{name}: expected a mapping of settings, got {_show(data)}")
        return cls()
    values: dict[str, object] = {}
    for key, value in data.items():
        if key not in rules:
            problems.append(f"{name}.{key}: {_unknown_key(key, list(rules))}")
            continue
        values[key] = _check(rules[key], value, f"{name}.{key}", problems)
    return cls() if problems else cls(**values)


def _entries(
    section: str, data: Mapping[Any, Any], keys: tuple[str, ...], problems: list[str]
) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(name, dotted place, entry) of each mapping under ``section``; an entry that is no
    mapping, and keys not in ``keys``, are reported."""
    for name, entry in data.items():
        where = f"{section}.{name}"
        if not isinstance(entry, Mapping):
            shape = ", ".join(f"{k}: ..." for k in keys)
            problems.append(f"{where}: expected {{{shape}}}, got {_show(entry)}")
            continue
        for key in entry:
            if key not in keys:
                problems.append(f"{where}.{key}: {_unknown_key(key, list(keys))}")
        yield str(name), where, entry


_PRICE_KEYS = ("input", "output")


def _parse_pricing(data: object, problems: list[str]) -> dict[str, Price]:
    """``pricing: {model name: {input: USD per million, output: USD per million}}``."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        problems.append(f"pricing: expected a mapping of model names to prices, got {_show(data)}")
        return {}
    prices: dict[str, Price] = {}
    rule = _Rule(
        expected="a number of US dollars per million tokens, 0 or more", parse=_non_negative
    )
    for model, where, entry in _entries("pricing", data, _PRICE_KEYS, problems):
        amounts = [_check(rule, entry.get(key), f"{where}.{key}", problems) for key in _PRICE_KEYS]
        if all(isinstance(a, float) for a in amounts):
            prices[model] = Price(*amounts)  # type: ignore[arg-type]
    return prices


_ENGINE_KEYS = ("command", "args", "timeout_seconds")


def _parse_engines(data: object, problems: list[str]) -> dict[str, EngineConfig]:
    """``engines: {claude: {command: claude, args: [...], timeout_seconds: 1800}, ...}``;
    an engine not named keeps its default."""
    engines = dict(DEFAULT_ENGINES)
    if data is None:
        return engines
    if not isinstance(data, Mapping):
        problems.append(f"engines: expected a mapping of engine names, got {_show(data)}")
        return engines
    for name, where, entry in _entries("engines", data, _ENGINE_KEYS, problems):
        if name not in ENGINE_CLIS:
            problems.append(f"{where}: {_unknown_key(name, list(ENGINE_CLIS))}")
            continue
        command = _check(_text(), entry.get("command"), f"{where}.command", problems)
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            problems.append(f"{where}.args: expected a list of strings, got {_show(args)}")
            args = []
        timeout = _check(
            _timeout(),
            entry.get("timeout_seconds", 1800.0),
            f"{where}.timeout_seconds",
            problems,
        )
        if isinstance(command, str) and isinstance(timeout, float):
            engines[str(name)] = EngineConfig(
                command=command, args=tuple(args), timeout_seconds=timeout
            )
    return engines


def _non_negative(value: object) -> object:
    number = _as_number(value)
    return number if number is not None and number >= 0 else _INVALID


def override(cfg: AcodeConfig, section: str, key: str, value: object, source: str) -> AcodeConfig:
    """``cfg`` with one setting replaced, checked by the same rule as the file; an error
    names ``source`` (a flag or a variable) instead of the file."""
    checked = parse_config({section: {key: value}}, source)
    replacement = getattr(getattr(checked, section), key)
    updated = dataclasses.replace(getattr(cfg, section), **{key: replacement})
    return dataclasses.replace(cfg, **{section: updated})


def with_overrides(cfg: AcodeConfig, overrides: Mapping[str, object], source: str) -> AcodeConfig:
    """``cfg`` with ``{"section.key": value}`` applied, as recorded by an agent session."""
    for dotted, value in overrides.items():
        section, _, key = dotted.partition(".")
        cfg = override(cfg, section, key, value, source)
    return cfg


def parse_config(data: object, source: str) -> AcodeConfig:
    """Validate the mapping read from ``source``; every problem is reported in one error."""
    if data is None:
        return AcodeConfig()
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{source}: expected a mapping of settings at the top level, got {_show(data)}",
            hint=f"start {source} with sections such as `model:` or `resume:`, "
            "or delete it to use the defaults",
        )
    problems: list[str] = []
    known = [*_SECTIONS, "pricing", "engines", *_TOP_LEVEL_SCALARS]
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in _SECTIONS:
            values[key] = _parse_section(key, value, problems)
        elif key == "pricing":
            values[key] = _parse_pricing(value, problems)
        elif key == "engines":
            values[key] = _parse_engines(value, problems)
        elif key in _TOP_LEVEL_SCALARS:
            values[key] = _check(_TOP_LEVEL_SCALARS[key], value, key, problems)
        else:
            problems.append(f"{key}: {_unknown_key(key, known)}")
    if problems:
        raise ConfigError(
            "\n".join(f"{source}: {problem}" for problem in problems),
            hint=f"fix {'this key' if len(problems) == 1 else 'these keys'} in {source} "
            "(every key is described in docs/configuration.md), "
            "or delete the file to use the defaults",
        )
    return AcodeConfig(**values)


def config_to_dict(cfg: AcodeConfig) -> dict[str, object]:
    """A JSON-able copy that ``parse_config`` turns back into an equal config."""
    data = dataclasses.asdict(cfg)
    data["pricing"] = {name: dataclasses.asdict(price) for name, price in cfg.pricing.items()}
    data["engines"] = {
        name: {**dataclasses.asdict(engine), "args": list(engine.args)}
        for name, engine in cfg.engines.items()
    }
    return data


def config_hash(cfg: AcodeConfig) -> str:
    """SHA-256 of the canonical JSON: equal configs hash equal, whatever their key order."""
    return config_dict_hash(config_to_dict(cfg))


def config_dict_hash(data: Mapping[str, Any]) -> str:
    """``config_hash`` of the configuration ``data`` is the dict of (``config_to_dict``),
    as a session recorded it: an older acode's, with keys this one may not know."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
