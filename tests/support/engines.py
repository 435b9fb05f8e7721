"""The real engine CLIs for tests: where they are installed and the private, offline
environment each one runs in (docs/testing.md, "The real engines offline").

``python -m tests.support.install_engines`` (``make test`` runs it) installs them into
``<repo>/.engines``; ``ACODE_ENGINES_DIR`` names another place. A test::

    path = require_engine("codex")             # skips (fails when CI=true) if not installed
    with EngineServer() as server:
        use_engine_env(monkeypatch, "codex", server.base_url, tmp_path / "home")
        turn = start_turn("codex", EngineConfig(command=str(path)), ...)

A subprocess (e.g. the acode CLI) gets the same with
``{**without_foreign(os.environ), **engine_env(...)}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.support.install_engines import DEFAULT_DEST, PINS, executable

__all__ = [
    "ENGINES_DIR",
    "ENGINES_VARIABLE",
    "FAKE_MODEL",
    "FOREIGN_VARIABLES",
    "engine_env",
    "engine_path",
    "require_engine",
    "use_engine_env",
    "without_foreign",
]

ENGINES_VARIABLE = "ACODE_ENGINES_DIR"
# Read at import: the autouse fixture in tests/conftest.py removes ACODE_* variables.
ENGINES_DIR = Path(os.environ.get(ENGINES_VARIABLE) or DEFAULT_DEST)
FAKE_MODEL = "fake-model"
_KEY_VARIABLE = "ENGINE_TEST_KEY"

# Variables of a developer's own setup that would send an engine elsewhere than the test
# server (a real key, a proxy, a cloud provider), or change how it behaves.
FOREIGN_VARIABLES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_MAX_RETRIES",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


def engine_path(name: str) -> Path | None:
    """The installed executable of engine ``name``, or None when it is not installed."""
    for install in PINS:
        if install.engine == name:
            path = executable(ENGINES_DIR, install)
            return path if path.exists() else None
    raise ValueError(f"no such engine: {name!r}")


def require_engine(name: str) -> Path:
    """The engine's executable; else skip the test loudly (fail it when CI=true, where the
    engines must have been installed)."""
    path = engine_path(name)
    if path is not None:
        return path
    reason = (
        f"!!! ENGINE NOT INSTALLED: {name} is not in {ENGINES_DIR} !!! "
        "Run `python -m tests.support.install_engines` (make test does; it needs npm for "
        "codex and claude: apt-get install -y npm)."
    )
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def engine_env(name: str, server_url: str, home: Path) -> dict[str, str]:
    """The variables that point engine ``name`` at ``server_url`` (EngineServer.base_url,
    no /v1) and keep all its files in ``home``, which is created with whatever config
    files the engine needs."""
    home.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home)}
    if name == "codex":
        env.update(_codex(server_url, home))
    elif name == "claude":
        env.update(
            CLAUDE_CONFIG_DIR=str(home / ".claude"),
            ANTHROPIC_BASE_URL=server_url,
            ANTHROPIC_API_KEY="dummy",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_TELEMETRY="1",
            DISABLE_AUTOUPDATER="1",
            DISABLE_ERROR_REPORTING="1",
        )
    elif name == "aider":
        env.update(_aider(server_url, home))
    else:
        raise ValueError(f"no such engine: {name!r}")
    return env


def without_foreign(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` less the developer's own engine settings (FOREIGN_VARIABLES)."""
    return {k: v for k, v in environ.items() if k not in FOREIGN_VARIABLES}


def use_engine_env(monkeypatch: pytest.MonkeyPatch, name: str, server_url: str, home: Path) -> None:
    """Put this process's environment in engine_env's shape for the rest of the test."""
    for variable in FOREIGN_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    for variable, value in engine_env(name, server_url, home).items():
        monkeypatch.setenv(variable, value)


def _codex(server_url: str, home: Path) -> dict[str, str]:
    codex_home = home / ".codex"
    codex_home.mkdir(exist_ok=True)
    # Only wire_api "responses" exists in codex 0.169. No retries: a test of a failing
    # server must not wait out codex's backoff (acode itself bounds the retries to 5).
    (codex_home / "config.toml").write_text(
        f'model = "{FAKE_MODEL}"\n'
        'model_provider = "local"\n'
        "\n"
        "[model_providers.local]\n"
        'name = "Local test server"\n'
        f'base_url = "{server_url}/v1"\n'
        'wire_api = "responses"\n'
        f'env_key = "{_KEY_VARIABLE}"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n",
        encoding="utf-8",
    )
    return {"CODEX_HOME": str(codex_home), _KEY_VARIABLE: "dummy"}


def _aider(server_url: str, home: Path) -> dict[str, str]:
    # Aider fetches litellm's model price list from the internet unless its cache in
    # ~/.aider/caches knows the model; litellm fetches its own copy unless told to use
    # the one it ships. Neither may reach out here.
    caches = home / ".aider" / "caches"
    caches.mkdir(parents=True, exist_ok=True)
    info = {
        "litellm_provider": "openai",
        "mode": "chat",
        "max_input_tokens": 32000,
        "max_output_tokens": 4096,
        "max_tokens": 4096,
        "input_cost_per_token": 0.0,
        "output_cost_per_token": 0.0,
    }
    (caches / "model_prices_and_context_window.json").write_text(
        json.dumps({FAKE_MODEL: info}), encoding="utf-8"
    )
    return {
        "AIDER_MODEL": f"openai/{FAKE_MODEL}",
        "AIDER_OPENAI_API_BASE": f"{server_url}/v1",
        "AIDER_OPENAI_API_KEY": "dummy",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
