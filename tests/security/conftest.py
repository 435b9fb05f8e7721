"""The attacks on the CLI run the real `acode`, as tests/cli does: its fixtures serve here."""

from tests.cli.conftest import acode, terminal

__all__ = ["acode", "terminal"]
