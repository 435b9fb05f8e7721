"""open_store: a URL (or a path) to the store behind it, or an error that names the URL."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from urllib.parse import quote

import pytest

from acode.errors import ErrorCode, StoreUrlError
from acode.store.base import open_store, workspace_url
from acode.store.sqlite.store import SqliteStore


@pytest.mark.parametrize("form", ["path", "text", "url"])
def test_a_path_or_a_sqlite_url_opens_that_file_whatever_its_name_holds(
    tmp_path: Path, form: str
) -> None:
    db = tmp_path / "a b%20?#" / "acode.db"
    forms: dict[str, str | Path] = {
        "path": db,
        "text": str(db),
        "url": f"sqlite://{quote(str(db))}",
    }
    given = forms[form]
    with closing(open_store(given)) as store:
        assert isinstance(store, SqliteStore)
        assert store.location == str(db)
        assert db.is_file()
        assert store.url.startswith("sqlite:///")
        with closing(open_store(store.url)) as again:  # the URL opens the same store
            assert again.location == str(db)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("mysql://acode:s3cret@db.example/acode", "mysql://***@db.example/acode"),
        ("mysql://db.example/acode", "mysql://db.example/acode"),
        ("://nothing", "://nothing"),
        ("sqlite://host/acode.db", "sqlite://host/acode.db"),
        ("sqlite://", "sqlite://"),
        ("sqlite:///tmp/acode.db?mode=ro", "sqlite:///tmp/acode.db?mode=ro"),
        ("sqlite://[::1/acode.db", "sqlite://[::1/acode.db"),
    ],
)
def test_a_url_no_backend_takes_is_a_usage_error_naming_it(url: str, shown: str) -> None:
    with pytest.raises(StoreUrlError) as refused:
        open_store(url)
    error = refused.value
    assert error.code is ErrorCode.STORE_URL
    assert error.exit_code == 2
    assert repr(shown) in error.message
    assert "s3cret" not in str(error)
    assert error.hint is not None
    assert "sqlite:///" in error.hint


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://a@h/db",
        "postgresql://a@h/db?sslmode=require",
        "postgresql://a@h/db?acode_workspace=/elsewhere",
        "postgresql://a@h/db?acode_workspace=/elsewhere&sslmode=require",
        "postgresql://a@h/db?sslmode=require&acode_workspace=/elsewhere",
    ],
)
def test_a_workspace_url_names_its_workspace_alone(url: str) -> None:
    # A workspace's scope is acode's to set: one written into store.url is replaced, so
    # that the sessions a workspace creates are the ones it sees.
    scoped = workspace_url(url, "/a b&c")
    assert scoped.count("acode_workspace=") == 1
    assert scoped.endswith("acode_workspace=%2Fa%20b%26c")
    assert ("sslmode=require" in scoped) == ("sslmode=require" in url)


@pytest.mark.parametrize(
    "url",
    ["postgresql://acode:s3cret@[::1/acode", "postgres://[::1/acode", "POSTGRESQL://[::1/acode"],
)
def test_a_postgresql_url_that_cannot_be_read_is_told_as_one(url: str) -> None:
    # What a workspace opens: the URL with acode's own parameter, which the person never
    # wrote and must not see; the hint is about PostgreSQL, not a SQLite file.
    with pytest.raises(StoreUrlError) as refused:
        open_store(workspace_url(url, "/home/me/project"))
    error = refused.value
    assert (error.code, error.exit_code) == (ErrorCode.STORE_URL, 2)
    assert "cannot be read" in error.message
    assert "acode_workspace" not in error.message
    assert "s3cret" not in str(error)
    assert error.hint is not None
    assert "postgresql://USER@HOST:PORT/DATABASE" in error.hint
    assert "sqlite" not in error.hint
