from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from acode.domain.config import AcodeConfig, ModelSettings, config_to_dict
from acode.engine.config import CONFIG_RELATIVE, load_config, write_default_config
from acode.engine.store_choice import CONFIG_FILE, configured_store_url
from acode.errors import ConfigError


def write_config(workspace: Path, text: str | bytes) -> Path:
    path = workspace / CONFIG_RELATIVE
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def refused(workspace: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(workspace)
    return info.value


def test_missing_file_means_defaults(tmp_path: Path) -> None:
    assert load_config(tmp_path) == AcodeConfig()


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_empty_file_means_defaults(tmp_path: Path, text: str) -> None:
    write_config(tmp_path, text)
    assert load_config(tmp_path) == AcodeConfig()


def test_values_are_read(tmp_path: Path) -> None:
    write_config(
        tmp_path,
        "model:\n  name: qwen2.5-coder\n  temperature: 0.2\n"
        "resume:\n  in_progress_strategy: retry\ndurability: normal\n",
    )
    cfg = load_config(tmp_path)
    assert cfg.model.name == "qwen2.5-coder"
    assert cfg.model.temperature == 0.2
    assert cfg.resume.in_progress_strategy == "retry"
    assert cfg.durability == "normal"


def test_an_invalid_value_names_the_file_and_key(tmp_path: Path) -> None:
    path = write_config(tmp_path, "model:\n  temperature: hot\n")
    error = refused(tmp_path)
    assert error.message == (
        f"{path}: model.temperature: expected a number between 0 and 2, got 'hot'"
    )


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = write_config(tmp_path, "model:\n  name: a\n   temperature: [0\nresume: {}\n")
    error = refused(tmp_path)
    assert error.message.startswith(f"{path}:")
    assert "invalid YAML" in error.message
    line = int(error.message[len(str(path)) + 1 :].split(":")[0])
    assert 2 <= line <= 4
    assert error.hint is not None


def test_a_duplicate_key_is_refused_with_both_lines(tmp_path: Path) -> None:
    path = write_config(tmp_path, "model:\n  name: a\n  name: b\n")
    error = refused(tmp_path)
    assert error.message == f"{path}:3: duplicate key 'name' (first set on line 2)"


def test_unreadable_bytes_are_a_config_error(tmp_path: Path) -> None:
    write_config(tmp_path, b"model:\n  name: \xff\xfe\n")
    assert "cannot read" in refused(tmp_path).message


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path, "model:\n  name: from-file\n  temperature: 0.5\n")
    monkeypatch.setenv("ACODE_MODEL_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("ACODE_MODEL_NAME", "from-env")
    cfg = load_config(tmp_path)
    assert cfg.model == ModelSettings(
        base_url="http://127.0.0.1:9/v1", name="from-env", temperature=0.5
    )


def test_an_empty_variable_counts_as_unset(tmp_path: Path) -> None:
    assert load_config(tmp_path, environ={"ACODE_MODEL_NAME": ""}) == AcodeConfig()


@pytest.mark.parametrize(("text", "seconds"), [("3", 3.0), ("2.5", 2.5), (" 4", 4.0)])
def test_a_number_setting_is_read_from_its_variable_as_a_number(
    tmp_path: Path, text: str, seconds: float
) -> None:
    environ = {"ACODE_FLEET_LEASE_SECONDS": text}
    assert load_config(tmp_path, environ=environ).fleet.lease_seconds == seconds


@pytest.mark.parametrize("text", ["abc", "nan", "inf", "0", "1e9", "3s"])
def test_a_number_variable_out_of_range_or_not_a_number_is_refused(
    tmp_path: Path, text: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, environ={"ACODE_FLEET_LEASE_SECONDS": text})
    assert info.value.message.startswith("$ACODE_FLEET_LEASE_SECONDS: fleet.lease_seconds:")


def test_an_invalid_override_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, environ={"ACODE_MODEL_BASE_URL": "localhost:11434"})
    assert info.value.message.startswith("$ACODE_MODEL_BASE_URL: model.base_url: expected")
    assert info.value.hint == "correct or unset the environment variable ACODE_MODEL_BASE_URL"


def test_default_config_is_written_commented_and_equals_the_defaults(tmp_path: Path) -> None:
    path = write_default_config(tmp_path)
    assert path == tmp_path / CONFIG_RELATIVE
    text = path.read_text(encoding="utf-8")
    assert "# rollback | retry | prompt" in text
    assert load_config(tmp_path) == AcodeConfig()
    # Every key is shown, so a person sees what exists.
    written = yaml.safe_load(text)
    defaults = config_to_dict(AcodeConfig())
    assert written.keys() == defaults.keys()
    for section, values in defaults.items():
        if isinstance(values, dict):
            assert written[section].keys() == values.keys(), section
    assert [p.name for p in path.parent.iterdir()] == ["config.yml"]  # no temporary left


def test_an_existing_config_is_never_overwritten(tmp_path: Path) -> None:
    path = write_config(tmp_path, "model:\n  name: mine\n")
    assert write_default_config(tmp_path) == path
    assert path.read_text(encoding="utf-8") == "model:\n  name: mine\n"


@pytest.mark.parametrize(
    ("text", "environ", "expected"),
    [
        (None, {}, None),
        ("model: {name: x}\n", {}, None),
        ("store:\n  url: postgresql://me@db/acode\n", {}, "postgresql://me@db/acode"),
        (
            "store: {url: postgresql://me@db/a}\n",
            {"ACODE_STORE_URL": "postgres://e@h/b"},
            "postgres://e@h/b",
        ),
        (None, {"ACODE_STORE_URL": "postgresql://e@h/b"}, "postgresql://e@h/b"),
    ],
)
def test_the_store_url_is_read_as_load_config_reads_it(
    tmp_path: Path, text: str | None, environ: dict[str, str], expected: str | None
) -> None:
    if text is not None:
        write_config(tmp_path, text)
    assert configured_store_url(tmp_path, environ=environ) == expected
    assert load_config(tmp_path, environ=environ).store.url == expected
    assert CONFIG_FILE == CONFIG_RELATIVE
