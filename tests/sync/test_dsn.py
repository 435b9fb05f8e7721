"""A remote is shown without its password, whatever form its DSN takes."""

from __future__ import annotations

import pytest

from acode.sync.dsn import describe_remote


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        (
            "postgresql://team:s3cret@db.example.com:5433/acode",
            "postgresql://team@db.example.com:5433/acode",
        ),
        (
            "postgres://db.example.com/acode?sslmode=require&password=x",
            "postgres://db.example.com/acode",
        ),
        ("postgresql://u@[::1]:5432/acode", "postgresql://u@[::1]:5432/acode"),
        ("postgresql://postgres:@/postgres?host=/tmp/pg", "postgresql://postgres@/tmp/pg/postgres"),
        (
            "host=db port=5432 dbname=acode user=team password='it''s secret'",
            "host=db port=5432 dbname=acode user=team",
        ),
        ("password=hunter22", "the remote (no host named)"),
        ("postgresql://h:notaport/db", "the remote (its URL cannot be read)"),
    ],
)
def test_the_password_never_shows(dsn: str, shown: str) -> None:
    assert describe_remote(dsn) == shown
    assert "s3cret" not in describe_remote(dsn)
    assert "hunter22" not in describe_remote(dsn)
