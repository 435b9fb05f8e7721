"""Every test gets a clean environment: no ACODE_* variable leaks in from the caller."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("ACODE_"):
            monkeypatch.delenv(name)
    yield
