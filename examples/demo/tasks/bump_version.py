"""Bump the minor version in VERSION: 0.1.0 -> 0.2.0.

Running it twice would bump twice (0.3.0), which is why the plan gives its step a
``check:`` command: on resume acode asks the check first and skips the bump when the
new version is already there.
"""

from __future__ import annotations

from pathlib import Path

path = Path("VERSION")
major, minor, _patch = (int(part) for part in path.read_text(encoding="utf-8").split("."))
path.write_text(f"{major}.{minor + 1}.0\n", encoding="utf-8")
print(f"version {major}.{minor + 1}.0")
