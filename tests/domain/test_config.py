from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acode.domain.config import (
    AcodeConfig,
    HandoffSettings,
    LogSettings,
    ModelSettings,
    ResumeSettings,
    RunSettings,
    SyncSettings,
    config_hash,
    config_to_dict,
    parse_config,
)
from acode.domain.durations import MAX_TIMEOUT_SECONDS, TIMEOUT_RULE
from acode.errors import ConfigError

SOURCE = ".agent/config.yml"

CUSTOM = AcodeConfig(
    model=ModelSettings(
        base_url="https://api.example.com/v1",
        name="gpt-x",
        temperature=0.7,
        max_tokens=99,
        api_key_env="OPENAI_API_KEY",
        timeout_seconds=5.5,
        seed=42,
    ),
    resume=ResumeSettings(
        in_progress_strategy="retry",
        changed_files_action="abort",
        validate_environment=False,
        validation_timeout_seconds=3.0,
    ),
    run=RunSettings(default_timeout_seconds=30.0, max_output_bytes=1000),
    sync=SyncSettings(remote="postgresql://db.example.com/acode"),
    durability="normal",
)


def refused(data: object) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, SOURCE)
    return info.value.message


@pytest.mark.parametrize("data", [None, {}, {"model": None, "resume": {}}])
def test_nothing_given_means_defaults(data: object) -> None:
    assert parse_config(data, SOURCE) == AcodeConfig()


def test_defaults_are_the_documented_ones() -> None:
    cfg = AcodeConfig()
    assert cfg.model.base_url == "http://localhost:11434/v1"
    assert cfg.model.name == "llama3.2"
    assert cfg.model.retries == 3
    assert cfg.resume.in_progress_strategy == "rollback"
    assert cfg.resume.changed_files_action == "prompt"
    assert cfg.run.max_output_bytes == 65536
    assert cfg.sync.remote is None
    assert cfg.durability == "full"


def test_a_partial_section_keeps_the_other_defaults() -> None:
    cfg = parse_config({"model": {"name": "qwen2.5-coder"}}, SOURCE)
    assert cfg.model == ModelSettings(name="qwen2.5-coder")
    assert cfg.resume == ResumeSettings()


def test_every_key_round_trips_through_json() -> None:
    data = json.loads(json.dumps(config_to_dict(CUSTOM)))
    assert parse_config(data, SOURCE) == CUSTOM


def test_whole_numbers_are_accepted_for_float_keys_and_hash_the_same() -> None:
    a = parse_config({"model": {"temperature": 1, "timeout_seconds": 10}}, SOURCE)
    b = parse_config({"model": {"temperature": 1.0, "timeout_seconds": 10.0}}, SOURCE)
    assert isinstance(a.model.temperature, float)
    assert config_hash(a) == config_hash(b)


def test_message_names_source_and_dotted_key() -> None:
    message = refused({"model": {"temperature": "hot"}})
    assert message == (
        ".agent/config.yml: model.temperature: expected a number between 0 and 2, got 'hot'"
    )


def test_the_hint_says_what_to_do() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"durability": "paranoid"}, SOURCE)
    assert info.value.hint is not None
    assert "docs/configuration.md" in info.value.hint
    assert SOURCE in info.value.hint
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"model": {"max_tokens": True}}, "model.max_tokens: expected a positive whole number"),
        ({"model": {"max_tokens": 1.5}}, "model.max_tokens: expected a positive whole number"),
        ({"model": {"max_tokens": 0}}, "model.max_tokens: expected a positive whole number"),
        ({"model": {"temperature": True}}, "got true"),
        ({"model": {"temperature": 2.5}}, "model.temperature: expected a number between 0 and 2"),
        ({"model": {"temperature": -0.1}}, "model.temperature"),
        ({"model": {"temperature": float("nan")}}, "model.temperature"),
        ({"model": {"timeout_seconds": float("inf")}}, "model.timeout_seconds"),
        ({"model": {"timeout_seconds": 0}}, f"expected {TIMEOUT_RULE}, got 0"),
        # Past what poll(2) can wait: an OverflowError in the middle of a model step.
        ({"model": {"timeout_seconds": 10**11}}, "at most 604,800 (a week)"),
        ({"engines": {"codex": {"command": "codex", "timeout_seconds": 604_801}}}, "a week"),
        ({"model": {"timeout_seconds": 10**400}}, "model.timeout_seconds"),
        ({"model": {"base_url": "localhost:11434"}}, "expected an http:// or https:// URL"),
        ({"model": {"name": ""}}, "model.name: expected a non-empty string, got ''"),
        ({"model": {"seed": "7"}}, "model.seed: expected a whole number or null, got '7'"),
        ({"model": {"retries": -1}}, "model.retries: expected a whole number, 0 or more, got -1"),
        ({"model": {"retries": True}}, "model.retries: expected a whole number, 0 or more"),
        ({"model": {"retries": 2.5}}, "model.retries: expected a whole number, 0 or more"),
        ({"resume": {"in_progress_strategy": "redo"}}, "one of 'rollback', 'retry', 'prompt'"),
        ({"resume": {"changed_files_action": None}}, "got null"),
        ({"resume": {"validate_environment": "yes"}}, "expected true or false, got 'yes'"),
        ({"resume": {"validation_timeout_seconds": -1}}, "resume.validation_timeout_seconds"),
        ({"run": {"max_output_bytes": [1]}}, "run.max_output_bytes: expected a positive whole"),
        ({"sync": {"remote": 5}}, "sync.remote: expected a non-empty string or null, got 5"),
        ({"durability": "fast"}, "durability: expected one of 'full', 'normal', got 'fast'"),
        ({"model": "llama3.2"}, "model: expected a mapping of settings, got 'llama3.2'"),
    ],
)
def test_bad_values_are_refused(data: object, expected: str) -> None:
    message = refused(data)
    assert message.startswith(f"{SOURCE}: ")
    assert expected in message


def test_unknown_keys_are_refused_with_a_suggestion() -> None:
    message = refused({"model": {"temprature": 0.5}})
    assert "model.temprature: unknown key (did you mean 'temperature'?)" in message
    assert "known keys: base_url, name, temperature" in message
    assert "unknown key (did you mean 'resume'?)" in refused({"resmue": {}})


def test_every_problem_is_reported_at_once() -> None:
    message = refused(
        {
            "model": {"temperature": "hot", "max_tokens": -5, "colour": "red"},
            "resume": {"in_progress_strategy": "redo"},
            "extra": 1,
        }
    )
    lines = message.splitlines()
    assert len(lines) == 5
    assert all(line.startswith(f"{SOURCE}: ") for line in lines)
    for key in ("model.temperature", "model.max_tokens", "model.colour", "resume.in_progress"):
        assert any(key in line for line in lines), key


def test_a_pasted_api_key_is_not_echoed() -> None:
    message = refused({"model": {"api_key_env": "sk-live-SECRET123"}})
    assert "SECRET123" not in message
    assert "model.api_key_env" in message
    assert "NAME of an environment variable" in message


@pytest.mark.parametrize("data", [["model"], "model: x", 3])
def test_a_top_level_that_is_not_a_mapping_is_refused(data: object) -> None:
    assert "expected a mapping of settings at the top level" in refused(data)


def test_long_values_are_shortened_in_messages() -> None:
    message = refused({"model": {"seed": "x" * 500}})
    assert len(message) < 200


def test_hash_is_sha256_of_canonical_json() -> None:
    import hashlib

    canonical = json.dumps(config_to_dict(CUSTOM), sort_keys=True, separators=(",", ":"))
    assert config_hash(CUSTOM) == hashlib.sha256(canonical.encode()).hexdigest()
    assert config_hash(AcodeConfig()) != config_hash(CUSTOM)
    assert config_hash(AcodeConfig()) == config_hash(parse_config({}, SOURCE))


@given(
    temperature=st.floats(min_value=0, max_value=2),
    max_tokens=st.integers(min_value=1, max_value=10**9),
    seed=st.none() | st.integers(min_value=-(2**63), max_value=2**63),
    retries=st.integers(min_value=0, max_value=100),
    strategy=st.sampled_from(["rollback", "retry", "prompt"]),
    timeout=st.floats(min_value=1e-3, max_value=MAX_TIMEOUT_SECONDS),
    remote=st.none() | st.text(min_size=1).filter(lambda s: s.strip() and s.isprintable()),
)
def test_any_valid_config_round_trips(
    *,
    temperature: float,
    max_tokens: int,
    seed: int | None,
    retries: int,
    strategy: str,
    timeout: float,
    remote: str | None,
) -> None:
    data = {
        "model": {
            "temperature": temperature,
            "max_tokens": max_tokens,
            "seed": seed,
            "retries": retries,
        },
        "resume": {"in_progress_strategy": strategy, "validation_timeout_seconds": timeout},
        "sync": {"remote": remote},
    }
    cfg = parse_config(data, SOURCE)
    again = parse_config(json.loads(json.dumps(config_to_dict(cfg))), SOURCE)
    assert again == cfg
    assert config_hash(again) == config_hash(cfg)


def test_pricing_and_engines_are_mappings_of_checked_entries() -> None:
    cfg = parse_config(
        {
            "pricing": {"gpt-4o": {"input": 2.5, "output": 10}},
            "engines": {"codex": {"command": "/opt/codex", "args": ["-c", "x=1"]}},
        },
        "f",
    )
    assert cfg.pricing["gpt-4o"].output == 10.0
    assert cfg.engines["codex"].args == ("-c", "x=1")
    assert cfg.engines["claude"].command == "claude"  # the others keep their defaults
    assert parse_config(config_to_dict(cfg), "again") == cfg
    with pytest.raises(ConfigError) as info:
        parse_config({"pricing": {"m": 3, "n": {"inp": 1}}, "engines": {"gpt": {}}}, "f")
    message = info.value.message
    assert "f: pricing.m: expected {input: ..., output: ...}, got 3" in message
    assert "pricing.n.inp: unknown key (did you mean 'input'?)" in message
    assert "engines.gpt: unknown key; known keys: claude, codex, aider, command" in message


def test_the_log_section_sets_the_size_of_the_json_log() -> None:
    assert AcodeConfig().log == LogSettings(max_bytes=10 * 1024 * 1024, keep=5)
    cfg = parse_config({"log": {"max_bytes": 1000000, "keep": 2}}, SOURCE)
    assert cfg.log == LogSettings(max_bytes=1000000, keep=2)
    assert "log.keep: expected a positive whole number" in refused({"log": {"keep": 0}})
    assert "log.max_size: unknown key" in refused({"log": {"max_size": 1}})


@pytest.mark.parametrize(
    "url",
    [
        "mysql://me:SECRET123@db/acode",
        "sqlite:///tmp/acode.db",
        "postgresql://me:SECRET123@ db/x",
        "postgresql://me:SECRET#123@db/x",
    ],
)
def test_a_store_url_that_is_not_postgresql_is_refused_without_echoing_it(url: str) -> None:
    message = refused({"store": {"url": url}})
    assert "store.url: expected a postgresql:// URL" in message
    assert "SECRET123" not in message


def test_a_postgresql_store_url_is_taken() -> None:
    url = "postgresql://me@db.example:5432/acode"
    assert parse_config({"store": {"url": url}}, SOURCE).store.url == url
    assert parse_config({"store": {"url": None}}, SOURCE).store.url is None


def test_the_handoff_section_names_a_git_remote() -> None:
    cfg = parse_config({"handoff": {"remote": "team.mirror-1", "push": False}}, "f.yml")

    assert cfg.handoff == HandoffSettings(remote="team.mirror-1", push=False)
    assert AcodeConfig().handoff == HandoffSettings(remote=None, push=True)


@pytest.mark.parametrize(
    "value",
    [
        "--upload-pack=touch pwned",
        "-x",
        ".hidden",
        "a/../b",
        "a..b",
        "ends.",
        "origin.lock",
        "a b",
        "a:b",
        "/srv/git/r.git",
        "file:///srv/git/r.git",
        "",
        "  ",
        7,
        True,
        ["origin"],
    ],
)
def test_a_remote_git_could_read_as_something_else_is_refused(value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"handoff": {"remote": value}}, "f.yml")

    assert "f.yml: handoff.remote: expected the name of a git remote" in caught.value.message


def test_the_credentials_of_a_url_given_as_remote_are_masked() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"handoff": {"remote": "https://bob:hunter2@git.example.com/r.git"}}, "f")

    assert "hunter2" not in caught.value.message
    assert "bob" not in caught.value.message
    assert "'https://***@git.example.com/r.git'" in caught.value.message


@given(st.text(min_size=1, max_size=30))
def test_an_accepted_remote_is_never_an_option_a_url_or_a_path(value: str) -> None:
    try:
        remote = parse_config({"handoff": {"remote": value}}, "f").handoff.remote
    except ConfigError:
        return
    assert remote == value
    assert not value.startswith(("-", "."))
    assert not {":", "/", " ", "\\", "@"} & set(value)
