"""Every test gets a clean environment: no ACODE_* variable leaks in from the caller,
and the checkpoint key lives in the test's own config directory, never the user's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.cli.conftest import Background


@pytest.fixture(autouse=True)
def clean_environ(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    for name in list(os.environ):
        if name.startswith("ACODE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
    for var, value in {
        "GIT_AUTHOR_NAME": "acode tests",
        "GIT_AUTHOR_EMAIL": "tests@acode.invalid",
        "GIT_COMMITTER_NAME": "acode tests",
        "GIT_COMMITTER_EMAIL": "tests@acode.invalid",
    }.items():
        monkeypatch.setenv(var, value)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace directory."""
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


# The CLI and the sync tests drive the real `acode` command; these two fixtures serve
# both (their helpers live in tests/cli/conftest.py).


@pytest.fixture
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from tests.cli.conftest import make_env

    return make_env(tmp_path_factory.mktemp("cli-config"))


@pytest.fixture
def background() -> Iterator[Background]:
    from tests.cli.conftest import Background

    procs = Background()
    try:
        yield procs
    finally:
        procs.stop_all()
